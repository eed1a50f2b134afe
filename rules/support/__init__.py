"""What several rules share; none of these modules is a rule (rules live one per file above).

walk (a snapshot as Envoy reads it), backends (which Service a cluster dials), headers,
regex (RE2 as Envoy compiles it), served (what the spec says must be served), disagreement.
Like every rule, never imports the translator: rules judge xDS from any source.
"""
