"""Every listener of a Gateway (and of the ListenerSets it admits) can be programmed.

Why it matters: a Conflicted listener ("its network port should not be configured")
and an HTTPS listener whose certificateRefs do not resolve serve nothing, so every
route on them is dark, and the xDS of a correct translator leaves them out: the
models agree, and only a case sent to that listener would notice. This rule gives
the listener's status at its own line, whether or not a case exercises it:
Conflicted (EV910: ProtocolConflict or HostnameConflict with another listener of
the Gateway, its ListenerSets, or, with ``--addressing shared``, another Gateway)
and ResolvedRefs=False (EV911: a Secret that does not exist, with the closest
Secret name; one of another type or without PEM data; one in another namespace
with no ReferenceGrant; or no certificateRef at all). It reads the spec model's own
reading of listeners (``verifier.semantics.spec.listeners``). A Secret in a
namespace a ``--kubeconfig --namespace`` read did not cover is not judged.

Example: an HTTPS listener with ``certificateRefs: [{name: shop-tsl}]`` beside
Secret ``shop-tls``: EV911 at the certificateRef's line, "did you mean shop-tls?".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from verifier.rules.support.mistakes import name_fix, unknowable
from verifier.rules.support.served import gateway_finding, listener_set_of, our_gateways

from verifier.check import Context
from verifier.findings import Finding, hint
from verifier.gatewayapi import model as m
from verifier.registry import Rule
from verifier.semantics.spec.attach import Refusal
from verifier.semantics.spec.listeners import shared_peers
from verifier.semantics.spec.status import listener_refusals

NAME = "gateway-listeners"
CONFLICTED = "EV910"
UNRESOLVED = "EV911"


def _finding(ctx: Context, gw: m.Gateway, lst: m.GatewayListener, refusal: Refusal) -> Finding:
    owner = listener_set_of(ctx.res, lst)
    listener = f"{lst.name} ({lst.protocol} :{lst.port})"
    actual = {"reason": refusal.reason, "detail": refusal.detail}
    if refusal.reason in ("ProtocolConflict", "HostnameConflict"):
        return gateway_finding(
            CONFLICTED,
            NAME,
            gw,
            refusal.path,
            listener_set=owner,
            actual=actual,
            listener=listener,
            detail=refusal.detail,
        )
    near = None
    if refusal.missing is not None:
        fix, near = name_fix(ctx.res, *refusal.missing)
    else:
        fix = hint("secret-tls")
    return gateway_finding(
        UNRESOLVED,
        NAME,
        gw,
        refusal.path,
        listener_set=owner,
        actual=actual,
        expected={"did_you_mean": near} if near else None,
        listener=listener,
        reason=refusal.reason,
        detail=refusal.detail,
        fix=fix,
    )


def _gateway(ctx: Context, gw: m.Gateway) -> Iterator[Finding]:
    peers = shared_peers(ctx.res, gw, ctx.controller_name) if ctx.addressing.shared else ()
    for lst in gw.listeners:
        for refusal in listener_refusals(ctx.res, gw, lst, peers):
            if not unknowable(ctx.res, refusal):
                yield _finding(ctx, gw, lst, refusal)


def check(ctx: Context) -> Iterable[Finding]:
    for gw in our_gateways(ctx.res, ctx.controller_name):
        yield from _gateway(ctx, gw)


RULE = Rule(
    name=NAME,
    codes=(CONFLICTED, UNRESOLVED),
    features=("Gateway",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#listenerconditionreason",
    doc=(__doc__ or "").strip(),
    check=check,
)
