"""Requests whose Envoy answer rests on an assumption are named, and left unjudged.

Why it matters: check compares the two models' answers, and a comparison is only as
good as the Envoy model's answer. Where that answer depends on something the model
does not know (a route condition on TLS session details, dynamic metadata, filter
state or cookies; a runtime key that would turn a route on or off; whether the
client's address is internal, with ``use_remote_address`` and
``internal_address_config`` ranges; Envoy's own replies to a gRPC client), the model
answers on a stated assumption (a Caveat on the answer, which ``explain`` shows),
and comparing that answer would judge the assumption rather than the xDS. Such a
request neither agrees nor disagrees: check counts it unjudged (the summary says how
many) and names each assumption once here (EV110), at the xDS route that answered,
with how many requests rest on it. A run in which no request could be judged
checked nothing, and says so as an error (EV111), as every run that checked nothing
does. A runtime_fraction share between 0 and 100% is not an assumption: the model
gives every answer such a request may get, and each is compared.

Beside unmodelled-xds (EV109), which names every xDS element the model does not
model whether or not a request reaches it: EV110 says which requests' answers, and
so which of check's verdicts, that element (or a fact about the client) withheld.

Example: a route matching on ``dynamic_metadata`` takes the requests for ``/api``:
"4 requests were not judged: their Envoy answer rests on route #0 'api': route match
on dynamic_metadata, which check does not know (not modelled: taken to match)".
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.registry import Rule

NAME = "assumed-answers"
NAMED = "EV110"
NOTHING_JUDGED = "EV111"


def check(ctx: Context) -> Iterable[Finding]:
    if ctx.models_problem is not None:
        return
    ctx.comparisons  # noqa: B018 (asks the models; sets ctx.assumed and ctx.asked)
    groups: dict[tuple[str, str], list[str]] = {}
    for a in ctx.assumed:
        for c in a.caveats:
            groups.setdefault((c.subject, c.assumption), []).append(a.xds_path)
    for (subject, assumption), paths in sorted(groups.items()):
        path = next((p for p in paths if p), "")
        yield new(
            NAMED,
            NAME,
            count=len(paths),
            subject=subject,
            assumption=assumption,
            resource=walk.resource_of(path) if path else "",
            xds_path=path,
        )
    if ctx.assumed and len(ctx.assumed) == ctx.asked and not ctx.proven:
        yield new(NOTHING_JUDGED, NAME, count=ctx.asked)


RULE = Rule(
    name=NAME,
    codes=(NAMED, NOTHING_JUDGED),
    features=("HTTPRoute",),
    spec_ref="https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/api",
    doc=(__doc__ or "").strip(),
    check=check,
    reads_models=True,
)
