"""What an answer of the Envoy model rests on without knowing it, as Caveats on that answer.

The model reads only the xDS and the request. Some answers depend on more: a route
condition on what a request of ours does not carry (TLS session details, another
filter's metadata or state, cookies), a runtime layer that may override a
runtime_fraction, the client's address (whether a request is internal), or Envoy's
reply to a gRPC client. Where the answer depends on one of them, the model still
answers, on a stated assumption, and the Caveat says which: ``check`` counts such
an answer unjudged, and ``explain`` shows it beside the answer. Where the answer
does not depend on it (the request misses the route on a known condition first, the
origin does not matter to this route), there is no caveat.
"""

from __future__ import annotations

from verifier.semantics.envoy.match import MatchContext
from verifier.semantics.envoy.origin import (
    INTERNAL_HEADER,
    ROUTER_READS,
    UNKNOWN_ORIGIN,
    Origin,
    OriginConfig,
    depends_on_origin,
)
from verifier.semantics.envoy.routes import CompiledRoute, RouteTable
from verifier.semantics.request import Caveat, Headers, Outcome, evolve

GRPC_REQUEST = "a gRPC request (content-type application/grpc)"


def of_route(route: CompiledRoute) -> list[Caveat]:
    """What an answer given by ``route`` assumes about its match."""
    match = route.match
    found = [Caveat(f"route {route.label}: {c.subject}", c.assumption) for c in match.assumed]
    if match.runtime is not None:
        r = match.runtime
        found.append(Caveat(f"route {route.label}: {r.subject}", r.assumption, r.decides))
    return found


def before_route(
    table: RouteTable,
    ctx: MatchContext,
    upto: int,
    origin: Origin,
    config: OriginConfig,
    headers: Headers,
    internal_only: tuple[str, ...],
) -> list[Caveat]:
    """What the choice of route, and the headers it forwards, assume: routes off by
    default that a runtime key may turn on, and an origin the request does not tell."""
    found = [
        Caveat(
            f"route {cr.label}: runtime_fraction 0% with runtime key "
            f"{cr.route.match.runtime_fraction.runtime_key!r}",  # type: ignore[union-attr]
            "taken at its default 0%: it would take this request if a runtime layer turned it on",
        )
        for cr in table.dormant_before(ctx, upto)
    ]
    if origin.internal is None:
        if table.reads_before(INTERNAL_HEADER, upto):
            found.append(Caveat(UNKNOWN_ORIGIN, "taken as external: no x-envoy-internal"))
        names = depends_on_origin(headers, config, internal_only)
        if names:
            found.append(
                Caveat(UNKNOWN_ORIGIN, f"taken as external: {', '.join(sorted(names))} removed")
            )
    if origin.internal is not False:
        read = sorted({k for k, _ in headers} & ROUTER_READS)
        if read:
            found.append(
                Caveat(
                    f"{', '.join(read)} on a request that may be internal",
                    "the router reads them from internal requests; not modelled",
                )
            )
    return found


def grpc_request(headers: Headers) -> bool:
    """Grpc::Common::hasGrpcContentType, on the request's content-type."""
    content_type = ",".join(next((v for k, v in headers if k == "content-type"), ()))
    return content_type == "application/grpc" or content_type.startswith("application/grpc+")


def of_local_reply(outcome: Outcome) -> list[Caveat]:
    """A gRPC client gets Envoy's own replies as HTTP 200 with a grpc-status
    (ActiveStreamDecoderFilter: "we can issue gRPC local responses to gRPC requests";
    seen on Envoy 1.40: a direct_response 213 reached a gRPC client as 200)."""
    if outcome.request is not None or outcome.status == 0:
        return []
    return [Caveat(GRPC_REQUEST, f"Envoy's own reply taken as HTTP {outcome.status}; not modelled")]


def on_local_replies(outcome: Outcome) -> Outcome:
    """``outcome`` (a gRPC request's) with the caveat on each possible answer that is
    Envoy's own reply."""
    rest = outcome.otherwise
    if rest is not None:
        rest = on_local_replies(rest)
    found = of_local_reply(outcome)
    if not found and rest is outcome.otherwise:
        return outcome
    return evolve(outcome, caveats=(*outcome.caveats, *found), otherwise=rest)
