"""The new user's mesh scenario of the GAMMA trial, written once for every test that replays it.

As the user wrote it (no fixtures/base, no Gateway): two mesh-registered namespaces,
``payments`` (Deployments ``ledger-v1``, ``ledger-v2`` and ``batch``, each with its
ServiceAccount; Services ``ledger``, ``ledger-v1``, ``ledger-v2``) and ``storefront``
(Deployment ``web``); a producer route ``payments/ledger-canary`` (a header match to
v2, else a 90/10 split) and a consumer route ``storefront/ledger-from-storefront``
(``/reports`` to v1; it replaces the producer route for storefront's clients). No
EndpointSlice: the endpoints are derived. ``cluster_ips=False`` writes the Services
as real manifests do, without ``spec.clusterIP`` (the cluster assigns one).
"""

from __future__ import annotations

import string
from pathlib import Path

NAMESPACES = """\
apiVersion: v1
kind: Namespace
metadata: {name: payments, labels: {aether.io/managed: "true"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: storefront, labels: {aether.io/managed: "true"}}
"""

_WORKLOAD = string.Template("""\
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: $name, namespace: $ns}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: $name, namespace: $ns}
spec:
  replicas: 1
  selector: {matchLabels: $labels}
  template:
    metadata: {labels: $labels}
    spec:
      serviceAccountName: $name
      containers:
      - {name: app, image: registry.example.com/$name:1.0, ports: [{containerPort: 3000}]}
""")

_SERVICE = string.Template("""\
---
apiVersion: v1
kind: Service
metadata: {name: $name, namespace: payments}
spec:
$cluster_ip  selector: $selector
  ports:
  - {name: http, port: 8080, targetPort: 3000}
""")

ROUTES = """\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ledger-canary, namespace: payments}
spec:
  parentRefs:
  - {group: "", kind: Service, name: ledger, port: 8080}
  rules:
  - matches:
    - headers:
      - {name: x-canary, value: "true"}
    backendRefs:
    - {name: ledger-v2, port: 8080}
  - backendRefs:
    - {name: ledger-v1, port: 8080, weight: 90}
    - {name: ledger-v2, port: 8080, weight: 10}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ledger-from-storefront, namespace: storefront}
spec:
  parentRefs:
  - {group: "", kind: Service, name: ledger, namespace: payments, port: 8080}
  rules:
  - matches:
    - path: {type: PathPrefix, value: /reports}
    backendRefs:
    - {name: ledger-v1, namespace: payments, port: 8080}
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: storefront-routes, namespace: payments}
spec:
  from:
  - {group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: storefront}
  to:
  - {group: "", kind: Service}
"""

# name -> (selector, the ClusterIP the user gave)
SERVICES = {
    "ledger": ("{app: ledger}", "10.96.10.10"),
    "ledger-v1": ("{app: ledger, version: v1}", "10.96.10.11"),
    "ledger-v2": ("{app: ledger, version: v2}", "10.96.10.12"),
}

CASES = """\
- name: batch-canary-header-goes-to-v2
  from: {namespace: payments, workload: batch}
  service: {namespace: payments, name: ledger, port: 8080}
  request: {path: /balance, headers: {x-canary: "true"}}
  expect: {status: 200, backend: ledger-v2, namespace: payments}
- name: batch-default-goes-to-v1-or-v2
  from: {namespace: payments, workload: batch}
  service: {namespace: payments, name: ledger, port: 8080}
  request: {path: /balance}
  expect: {status: 200, backends: [ledger-v1, ledger-v2]}
- name: web-reports-go-to-v1
  from: {namespace: storefront, workload: web}
  service: {namespace: payments, name: ledger, port: 8080}
  request: {path: /reports/2026, headers: {x-canary: "true"}}
  expect: {status: 200, backend: ledger-v1, namespace: payments}
- name: web-other-paths-404-consumer-replaces-producer
  from: {namespace: storefront, workload: web}
  service: {namespace: payments, name: ledger, port: 8080}
  request: {path: /balance}
  expect: {status: 404}
"""


def resources(*, cluster_ips: bool = True, routes: bool = True) -> str:
    """The scenario's resources.yaml: with the ClusterIPs the user gave, or none
    (``cluster_ips=False``); without the HTTPRoutes (``routes=False``)."""
    out = NAMESPACES
    for name, labels in (
        ("ledger-v1", "{app: ledger, version: v1}"),
        ("ledger-v2", "{app: ledger, version: v2}"),
    ):
        out += _WORKLOAD.substitute(name=name, ns="payments", labels=labels)
    out += _WORKLOAD.substitute(name="batch", ns="payments", labels="{app: batch}")
    out += _WORKLOAD.substitute(name="web", ns="storefront", labels="{app: web}")
    for name, (selector, ip) in SERVICES.items():
        line = f"  clusterIP: {ip}\n" if cluster_ips else ""
        out += _SERVICE.substitute(name=name, selector=selector, cluster_ip=line)
    return out + (ROUTES if routes else "")


def write(
    folder: Path, cases: str | None = CASES, *, cluster_ips: bool = True, routes: bool = True
) -> Path:
    """The scenario in ``folder`` (resources.yaml, and ``cases`` as its cases.yaml)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = resources(cluster_ips=cluster_ips, routes=routes)
    (folder / "resources.yaml").write_text(text, encoding="utf-8")
    if cases is not None:
        (folder / "cases.yaml").write_text(cases, encoding="utf-8")
    return folder
