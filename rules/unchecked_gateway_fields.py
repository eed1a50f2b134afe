"""A Gateway asks for client-certificate behaviour this check cannot judge.

Why it matters: a verifier that passes what it does not understand is worse than none.
Neither model knows ``spec.tls.backend`` (GatewayBackendClientCertificate: the
certificate the Gateway presents to backends), and the reference translator does not
render it, so without this rule ``check`` would report such a Gateway clean while no
backend ever sees that certificate. The finding says the check is blind there; it is a
warning, ``--fail-on warning`` makes it fail a pipeline. The other features no rule
judges are listed, with why, in docs/rules.md.

Example: Gateway ``edge-infra/be`` sets ``spec.tls.backend.clientCertificateRef``; the
check says it does not judge the Gateway's client certificate towards backends.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support import served as spec

from verifier.check import Context
from verifier.features import NOT_CHECKED
from verifier.findings import Finding
from verifier.registry import Rule

NAME = "unchecked-gateway-fields"
CODE = "EV108"

# spec.tls key -> the feature it asks for.
FIELDS = {
    "backend": "GatewayBackendClientCertificate",
}


def check(ctx: Context) -> Iterable[Finding]:
    for gw in spec.our_gateways(ctx.res, ctx.controller_name):
        for key in gw.tls:
            feature = FIELDS.get(key)
            if feature is None:
                continue
            field = f"spec.tls.{key}"
            yield spec.gateway_finding(
                CODE,
                NAME,
                gw,
                field,
                gateway=f"{gw.meta.namespace}/{gw.meta.name}",
                field=field,
                feature=feature,
                why=NOT_CHECKED[feature],
            )


RULE = Rule(
    NAME,
    (CODE,),
    ("Gateway",),
    "https://gateway-api.sigs.k8s.io/reference/spec/#gatewaytlsconfig",
    (__doc__ or "").strip(),
    check,
)
