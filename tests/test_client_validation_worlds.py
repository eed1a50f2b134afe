"""Drawn client certificate validation worlds: the translator and the spec model,
written separately, must agree on every one (``check`` finds nothing).

GEP-91's corners: a default and perPort entries that replace it (also with no
validation), several caCertificateRefs of which some are unusable (missing,
other kind, other namespace with or without a ReferenceGrant, a ConfigMap
without ``ca.crt``), both modes, several HTTPS ports and an HTTP one.
"""

from __future__ import annotations

from typing import Any

import yaml
from conftest import FIXTURES
from hypothesis import given
from hypothesis import strategies as st
from worlds import GROUP, assert_check_finds_nothing, world_settings

PKI = FIXTURES / "gateway-frontend-client-certificate-validation"
SECRET = next(
    d
    for d in yaml.safe_load_all((PKI / "resources.yaml").read_text(encoding="utf-8"))
    if d and d["kind"] == "Secret"
)
CAS = {x: (PKI / f"client-ca-{x}.crt").read_text(encoding="utf-8") for x in ("a", "b")}
# (name, namespace, data): usable, in another namespace, without ca.crt, not a PEM.
CONFIG_MAPS = [
    ("ca-a", "edge-infra", {"ca.crt": CAS["a"]}),
    ("ca-b", "edge-infra", {"ca.crt": CAS["b"]}),
    ("ca-both", "edge-infra", {"ca.crt": CAS["a"] + CAS["b"]}),
    ("ca-web", "edge-web", {"ca.crt": CAS["b"]}),
    ("ca-apps", "edge-apps", {"ca.crt": CAS["a"]}),
    ("no-key", "edge-infra", {"other.crt": CAS["a"]}),
    ("not-pem", "edge-infra", {"ca.crt": "not a certificate"}),
]
REFS = [
    {"group": "", "kind": "ConfigMap", "name": "ca-a"},
    {"group": "", "kind": "ConfigMap", "name": "ca-b"},
    {"group": "", "kind": "ConfigMap", "name": "ca-both"},
    {"group": "", "kind": "ConfigMap", "name": "ca-web", "namespace": "edge-web"},
    {"group": "", "kind": "ConfigMap", "name": "ca-apps", "namespace": "edge-apps"},
    {"group": "", "kind": "ConfigMap", "name": "missing"},
    {"group": "", "kind": "ConfigMap", "name": "no-key"},
    {"group": "", "kind": "ConfigMap", "name": "not-pem"},
    {"group": "", "kind": "Secret", "name": "ca-a"},
]
PORTS = [8401, 8402]


@st.composite
def validations(draw: st.DrawFn) -> dict[str, Any]:
    refs = draw(st.lists(st.sampled_from(range(len(REFS))), min_size=1, max_size=3, unique=True))
    out: dict[str, Any] = {"caCertificateRefs": [REFS[i] for i in refs]}
    mode = draw(st.sampled_from([None, "AllowValidOnly", "AllowInsecureFallback"]))
    if mode is not None:
        out["mode"] = mode
    return out


@st.composite
def worlds(draw: st.DrawFn) -> list[dict[str, Any]]:
    listeners: list[dict[str, Any]] = [
        {
            "name": f"https-{port}",
            "port": port,
            "protocol": "HTTPS",
            "hostname": "*.example.com",
            "tls": {
                "certificateRefs": [
                    {"kind": "Secret", "group": "", "name": SECRET["metadata"]["name"]}
                ]
            },
        }
        for port in PORTS
    ]
    listeners.append({"name": "http", "port": 8403, "protocol": "HTTP"})
    frontend: dict[str, Any] = {"default": {}}
    if draw(st.booleans()):
        frontend["default"]["validation"] = draw(validations())
    per_port = []
    for port in draw(st.lists(st.sampled_from([*PORTS, 8403]), max_size=2, unique=True)):
        entry: dict[str, Any] = {"port": port, "tls": {}}
        if draw(st.booleans()):
            entry["tls"]["validation"] = draw(validations())
        per_port.append(entry)
    if per_port:
        frontend["perPort"] = per_port
    gateway = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Gateway",
        "metadata": {"name": "client-validation", "namespace": "edge-infra"},
        "spec": {
            "gatewayClassName": "aether",
            "listeners": listeners,
            "tls": {"frontend": frontend},
        },
    }
    docs: list[dict[str, Any]] = [SECRET, gateway]
    for name, ns, data in CONFIG_MAPS:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns},
                "data": data,
            }
        )
    if draw(st.booleans()):
        docs.append(
            {
                "apiVersion": f"{GROUP}/v1beta1",
                "kind": "ReferenceGrant",
                "metadata": {"name": "ca-for-gateways", "namespace": "edge-web"},
                "spec": {
                    "from": [{"group": GROUP, "kind": "Gateway", "namespace": "edge-infra"}],
                    "to": [{"group": "", "kind": "ConfigMap"}],
                },
            }
        )
    docs.append(
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "all", "namespace": "edge-infra"},
            "spec": {
                "parentRefs": [{"name": "client-validation"}],
                "rules": [{"backendRefs": [{"name": "infra-backend-v1", "port": 8080}]}],
            },
        }
    )
    return docs


@world_settings(40)
@given(docs=worlds())
def test_translator_and_spec_model_agree_on_client_validation(docs: list[dict[str, Any]]) -> None:
    assert_check_finds_nothing(docs)
