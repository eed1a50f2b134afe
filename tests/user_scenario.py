"""The new user's scenario of issue 31, written once for every test that replays that trial.

As the user wrote it (no fixtures/base): a GatewayClass ``aether``, a Namespace
``shop``, a Gateway ``shop/web`` listening on ``*.shop.example.com``, two Deployments
with their Services (``cart``, ``cart-canary``; no EndpointSlice, so the endpoints are
derived) and an HTTPRoute ``shop/cart`` with a prefix match, a header match, a header
modifier and a 90/10 split. Each test varies the route's fields it is about
(``values``), and the mistakes users make are one table (``MISTAKES``) that says where
each is to be reported: as the text of the line, never as a number, so a test finds
the line in the file it wrote.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from pathlib import Path

_APP = """\
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: $app, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: $app}}
  template:
    metadata: {labels: {app: $app}}
    spec:
      containers:
      - {name: echo, image: echo, ports: [{containerPort: 3000}]}
---
apiVersion: v1
kind: Service
metadata: {name: $app, namespace: shop}
spec:
  selector: {app: $app}
  ports:
  - {port: 8080, targetPort: 3000}
"""

RESOURCES = string.Template(
    """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: aether}
spec: {controllerName: gateway.aether.io/edge}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: shop}
spec:
  gatewayClassName: aether
  listeners:
  - name: http
    protocol: HTTP
    port: 80
    hostname: "*.shop.example.com"
"""
    + "".join(string.Template(_APP).substitute(app=app) for app in ("cart", "cart-canary"))
    + """\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cart, namespace: shop}
spec:
  parentRefs:
  - name: ${parent}
  hostnames:
  - ${hostname}
  rules:
  - matches:
    - path: {type: PathPrefix, value: /cart}
      headers:
      - {name: x-beta, value: "yes"}
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        add:
        - {name: x-canary, value: "1"}
    backendRefs:
    - name: cart
      port: 8080
      weight: ${weight}
    - name: ${canary}
      port: ${port}
      weight: ${canary_weight}
"""
)

# The route's fields as the user meant them.
INTENDED = {
    "parent": "web",
    "hostname": "cart.shop.example.com",
    "canary": "cart-canary",
    "port": "8080",
    "weight": "90",
    "canary_weight": "10",
}

# One case that states the split: the cases.yaml of a user who tests it.
SPLIT_CASE = """\
- name: beta-split
  gateway: {namespace: shop, name: web}
  request: {host: cart.shop.example.com, path: /cart/1, headers: {x-beta: "yes"}}
  samples: 200
  expect:
    status: 200
    backends: [cart, cart-canary]
    namespace: shop
    backend_ratio: {cart: {ratio: 0.9, tolerance: 0.07}, cart-canary: {ratio: 0.1, tolerance: 0.07}}
"""


def resources(**values: str) -> str:
    """The scenario's resources.yaml, the route's fields ``values`` changed (``INTENDED``)."""
    unknown = set(values) - set(INTENDED)
    assert not unknown, f"not a field of the user's route: {unknown}"
    return RESOURCES.substitute({**INTENDED, **values})


def write(folder: Path, cases: str | None = None, **values: str) -> Path:
    """The user's scenario in ``folder``: resources.yaml with ``values``, and ``cases``
    as its cases.yaml when given."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "resources.yaml").write_text(resources(**values), encoding="utf-8")
    if cases is not None:
        (folder / "cases.yaml").write_text(cases, encoding="utf-8")
    return folder


def line_of(path: Path, text: str) -> int:
    """The number of the line of ``path`` that is ``text``, as a user's editor numbers it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = [i for i, line in enumerate(lines, 1) if line == text]
    assert len(found) == 1, f"{text!r} is on lines {found} of {path}"
    return found[0]


@dataclass(frozen=True)
class Mistake:
    """A mistake users make in the route: the fields it changes, the finding's code, the
    Accepted/ResolvedRefs reason a controller would write, the text of the line the
    finding is at, and the fix its message offers."""

    values: dict[str, str] = field(hash=False)
    code: str
    reason: str
    line: str
    fix: str


MISTAKES = {
    "service-does-not-exist": Mistake(
        {"canary": "cart-canry"},
        "EV905",
        "BackendNotFound",
        "    - name: cart-canry",
        "did you mean cart-canary?",
    ),
    "port-the-service-lacks": Mistake(
        {"port": "9090"}, "EV906", "BackendNotFound", "      port: 9090", "port 8080"
    ),
    "hostname-no-listener-takes": Mistake(
        {"hostname": "cart.shop.example.org"},
        "EV903",
        "NoMatchingListenerHostname",
        "  - cart.shop.example.org",
        "*.shop.example.com",
    ),
    "gateway-does-not-exist": Mistake(
        {"parent": "wbe"}, "EV901", "NoMatchingParent", "  - name: wbe", "did you mean web?"
    ),
}
# The three the issue's trial found passing check.
ISSUE = ("hostname-no-listener-takes", "port-the-service-lacks", "service-does-not-exist")
