"""A new user's mesh scenario (the GAMMA trial), written once for the tests that replay it.

As the user wrote it: namespaces ``payments`` and ``storefront``, both mesh-registered
(``aether.io/managed: "true"``); Deployments ``ledger-v1`` and ``ledger-v2`` behind
Services ``ledger`` (both), ``ledger-v1`` and ``ledger-v2``; clients ``payments/batch``
and ``storefront/web``; a producer route on ``payments/ledger`` (a header match to v2,
else a 90/10 split) and storefront's consumer route (``/reports`` to v1, granted by a
ReferenceGrant). ``edge.yaml`` is the dummy Gateway a mesh-only input needs. Each test
makes its mistake by replacing text (``edits``), and finds lines by their text, never
by number.
"""

from __future__ import annotations

from pathlib import Path

RESOURCES = """\
apiVersion: v1
kind: Namespace
metadata:
  name: payments
  labels:
    aether.io/managed: "true"
---
apiVersion: v1
kind: Namespace
metadata:
  name: storefront
  labels:
    aether.io/managed: "true"
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: ledger-v1
  namespace: payments
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: ledger-v1
  namespace: payments
spec:
  replicas: 1
  selector:
    matchLabels: {app: ledger, version: v1}
  template:
    metadata:
      labels: {app: ledger, version: v1}
    spec:
      serviceAccountName: ledger-v1
      containers:
      - name: ledger
        image: registry.example.com/ledger:1.0
        ports:
        - containerPort: 3000
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: ledger-v2
  namespace: payments
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: ledger-v2
  namespace: payments
spec:
  replicas: 1
  selector:
    matchLabels: {app: ledger, version: v2}
  template:
    metadata:
      labels: {app: ledger, version: v2}
    spec:
      serviceAccountName: ledger-v2
      containers:
      - name: ledger
        image: registry.example.com/ledger:2.0
        ports:
        - containerPort: 3000
---
apiVersion: v1
kind: Service
metadata:
  name: ledger
  namespace: payments
spec:
  clusterIP: 10.96.10.10
  selector: {app: ledger}
  ports:
  - name: http
    port: 8080
    targetPort: 3000
---
apiVersion: v1
kind: Service
metadata:
  name: ledger-v1
  namespace: payments
spec:
  clusterIP: 10.96.10.11
  selector: {app: ledger, version: v1}
  ports:
  - name: http
    port: 8080
    targetPort: 3000
---
apiVersion: v1
kind: Service
metadata:
  name: ledger-v2
  namespace: payments
spec:
  clusterIP: 10.96.10.12
  selector: {app: ledger, version: v2}
  ports:
  - name: http
    port: 8080
    targetPort: 3000
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: batch
  namespace: payments
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: batch
  namespace: payments
spec:
  selector:
    matchLabels: {app: batch}
  template:
    metadata:
      labels: {app: batch}
    spec:
      serviceAccountName: batch
      containers:
      - name: batch
        image: registry.example.com/batch:1.0
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: web
  namespace: storefront
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: storefront
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      serviceAccountName: web
      containers:
      - name: web
        image: registry.example.com/web:3.1
        ports:
        - containerPort: 8000
---
# Producer route: applies to every mesh client of payments/ledger.
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ledger-canary
  namespace: payments
spec:
  parentRefs:
  - group: ""
    kind: Service
    name: ledger
    port: 8080
  rules:
  - matches:
    - headers:
      - name: x-canary
        value: "true"
    backendRefs:
    - name: ledger-v2
      port: 8080
  - backendRefs:
    - name: ledger-v1
      port: 8080
      weight: 90
    - name: ledger-v2
      port: 8080
      weight: 10
---
# Consumer route: storefront's clients only; replaces the producer route for them.
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ledger-from-storefront
  namespace: storefront
spec:
  parentRefs:
  - group: ""
    kind: Service
    name: ledger
    namespace: payments
    port: 8080
  rules:
  - matches:
    - path: {type: PathPrefix, value: /reports}
    backendRefs:
    - name: ledger-v1
      namespace: payments
      port: 8080
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata:
  name: storefront-routes
  namespace: payments
spec:
  from:
  - group: gateway.networking.k8s.io
    kind: HTTPRoute
    namespace: storefront
  to:
  - group: ""
    kind: Service
"""

EDGE = """\
# The trial's user added it when check refused a mesh-only input (it no longer does:
# tests/test_mesh_inputs.py); kept, so the scenario is theirs as written.
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: aether
spec:
  controllerName: gateway.aether.io/edge
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: web
  namespace: storefront
spec:
  gatewayClassName: aether
  listeners:
  - name: http
    protocol: HTTP
    port: 80
"""

CASES = """\
- name: batch-canary-header-goes-to-v2
  from: {namespace: payments, workload: batch}
  service: {namespace: payments, name: ledger, port: 8080}
  request: {path: /balance, headers: {x-canary: "true"}}
  expect: {status: 200, backend: ledger-v2, namespace: payments}

- name: batch-default-split
  from: {namespace: payments, workload: batch}
  service: {namespace: payments, name: ledger, port: 8080}
  request: {path: /balance}
  samples: 200
  expect:
    status: 200
    backends: [ledger-v1, ledger-v2]
    backend_ratio:
      ledger-v1: {ratio: 0.9, tolerance: 0.08}
      ledger-v2: {ratio: 0.1, tolerance: 0.08}

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


def write(folder: Path, *edits: tuple[str, str], cases: bool = False) -> Path:
    """The scenario in ``folder`` (created), each (old, new) text replaced once in
    resources.yaml; with ``cases``, its cases.yaml beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    text = RESOURCES
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    (folder / "resources.yaml").write_text(text, "utf-8")
    (folder / "edge.yaml").write_text(EDGE, "utf-8")
    if cases:
        (folder / "cases.yaml").write_text(CASES, "utf-8")
    return folder


def line_of(path: Path, text: str, after: str = "") -> int:
    """The number of the first line of ``path`` that is ``text`` once stripped (and
    comes after the first line that is ``after``)."""
    lines = [line.strip() for line in path.read_text("utf-8").splitlines()]
    start = lines.index(after) if after else 0
    return lines.index(text, start) + 1
