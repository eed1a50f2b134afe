"""Every RE2 regex in the snapshot is within Envoy's program size limit.

Why it matters: Envoy refuses a ``RegexMatcher`` whose compiled RE2 program is larger
than the runtime limit ``re2.max_program_size.error_level`` (default 100): "regex
'a{200}' RE2 program size of 204 > max program size of 100 set for the error level
threshold". The whole resource (route configuration, cluster, listener) is NACKed,
so every route in it keeps its old behaviour or never appears. A RegexMatcher's
deprecated ``google_re2.max_program_size``, when set, replaces the limit.

Every regex is checked wherever it is: route ``safe_regex`` paths, header and query
parameter matchers, ``regex_rewrite`` and ``host_rewrite_path_regex`` patterns, CORS
origin matchers in ``typed_per_filter_config``, TLS SAN matchers. Sizes are computed
as Envoy 1.40 computes them (RE2 over the pattern's bytes in Latin-1 mode, checked
against ``envoy --mode validate``); regexes RE2 cannot compile are envoy-invalid-values'.

Example: ``RegularExpression`` path ``/api/v[0-9]+/(users|groups|roles)/...`` long
enough to compile to 112 instructions is refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support import regex as rx
from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.registry import Rule

NAME = "regex-program-size"
CODE = "EV601"


def check(ctx: Context) -> Iterable[Finding]:
    for path, matcher in rx.regexes(ctx.snapshot):
        size, _error = rx.compile_envoy(matcher.regex)
        most = rx.limit(matcher)
        if size is None or size <= most:
            continue
        yield new(
            CODE,
            NAME,
            resource=walk.resource_of(path),
            xds_path=path,
            expected={"program_size_at_most": most},
            actual={"program_size": size},
            regex=matcher.regex,
            size=size,
            limit=most,
        )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRoute",),
    spec_ref="https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/type/matcher/v3/regex.proto",
    doc=(__doc__ or "").strip(),
    check=check,
)
