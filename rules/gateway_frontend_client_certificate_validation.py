"""HTTPS listeners refuse or accept client certificates as spec.tls.frontend says.

Why it matters: client certificate validation is an access control. "AllowValidOnly:
In this mode, the gateway will accept connections only if the client presents a valid
certificate" (FrontendTLSValidation.mode): a listener that lets a client without a
certificate, or with one from another CA, through to the routes is open to everyone.
The other way round, AllowInsecureFallback "will accept connections even if the client
certificate is not presented or fails verification", and a port whose CA references
are all invalid must not serve HTTPS at all (Accepted False, NoValidCACertificate).
Each HTTPS port is probed in the handshake with no certificate, a certificate of a CA
nobody trusts, and one of each CA the validation names (perPort entries replace the
default for their port).

Example: Gateway ``edge-infra/client-validation`` trusts ConfigMap ``client-ca-a`` on
port 8451, but the filter chain's DownstreamTlsContext has no validation context: a
request without a client certificate is answered 200 instead of failing the handshake.
"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

from verifier.check import Comparison, Context


def _validation_path(c: Comparison, ctx: Context) -> str:
    """The port's validation (its perPort entry or the default), else its listener."""
    gw = ctx.res.gateways.get(c.witness.gateway)
    if gw is None:
        return ""
    port = c.request.port
    validation = gw.frontend_validation(port)
    if validation is not None:
        return validation.path
    return next((lst.path for lst in gw.listeners if lst.port == port), "")


RULE = disagreement_rule(
    name="gateway-frontend-client-certificate-validation",
    code="EV224",
    features=(
        "GatewayFrontendClientCertificateValidation",
        "GatewayFrontendClientCertificateValidationInsecureFallback",
    ),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#frontendtlsvalidation",
    doc=__doc__ or "",
    locate=_validation_path,
)
