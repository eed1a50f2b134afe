"""Every ListenerSet is accepted by the Gateway it names.

Why it matters: "By default, Gateways do not allow ListenerSet attachment": a
ListenerSet whose Gateway's ``allowedListeners`` does not admit its namespace is
refused (Accepted=False, NotAllowed), and none of its listeners, nor any route on
them, serves. A correct translation leaves them out, so the models agree and only a
case sent to one of its ports would notice. This rule gives the refusal at the
ListenerSet's parentRef, whether or not a case exercises it (EV912), and also
reports a parentRef to a Gateway that does not exist (with the closest Gateway
name). A ListenerSet none of whose listeners is valid is reported listener by
listener (``gateway-listeners``). A parent Gateway in a namespace a ``--kubeconfig
--namespace`` read did not cover is not judged.

Example: ListenerSet ``edge-apps/not-allowed`` names Gateway
``edge-infra/listener-set-parent``, whose ``allowedListeners`` admits only its own
namespace: EV912 at the ListenerSet's ``parentRef``.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support.mistakes import name_fix, refused_at, unknowable

from verifier.check import Context
from verifier.findings import Finding, hint
from verifier.registry import Rule
from verifier.semantics.spec.status import listener_set_refusal

NAME = "listener-set-accepted"
CODE = "EV912"


def check(ctx: Context) -> Iterable[Finding]:
    res = ctx.res
    for key in sorted(res.listener_sets):
        refusal = listener_set_refusal(res, key, ctx.controller_name)
        if refusal is None or unknowable(res, refusal):
            continue
        ls = res.listener_sets[key]
        near = None
        if refusal.missing is not None:
            fix, near = name_fix(res, *refusal.missing)
        else:
            fix = hint("allow-listener-sets", namespace=ls.meta.namespace)
        yield refused_at(
            CODE,
            NAME,
            ls.meta,
            refusal,
            fix,
            near,
            listener_set=f"{key[0]}/{key[1]}",
            reason=refusal.reason,
        )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("ListenerSet",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#listenerset",
    doc=(__doc__ or "").strip(),
    check=check,
)
