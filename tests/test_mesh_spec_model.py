"""The spec model's answers to mesh requests (verifier/semantics/spec/mesh.py).

The fixtures' mesh cases are judged in tests/test_spec_model.py with the edge's;
here: the mesh scenarios are what their name says (mesh routes and mesh cases
only, from clients of two namespaces at least), the capture scope and the frontend
on small worlds, and, on drawn worlds (Hypothesis), three properties the spec
states: a consumer route never changes the answer for a client of another
namespace; a world with producer routes only answers every mesh client alike;
a parentRef.port never changes another port's answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from conftest import BASE, edge_scenarios, mesh_scenarios
from hypothesis import given
from hypothesis import strategies as st
from worlds import world_settings

from verifier import pipeline
from verifier.gatewayapi.load import load_texts
from verifier.gatewayapi.resources import Resources, build
from verifier.semantics.request import Outcome, Request, Source
from verifier.semantics.spec.mesh import NO_RESPONSE, MeshModel, spec_evaluate_mesh

# ------------------------------------------------------------ the fixtures


def test_mesh_scenarios_hold_mesh_routes_and_cases_only() -> None:
    """What tests/conftest.py's edge_scenarios relies on to leave them out of the edge's
    sweeps: no route of theirs has a Gateway or ListenerSet parent (only Services, or,
    in the status scenario, ``kind: Service`` left in the Gateway API group on
    purpose), every case is a mesh case, and their clients are in two namespaces at
    least (so consumer/producer precedence is exercised by their tables as a whole)."""
    scenarios = mesh_scenarios()
    assert len(scenarios) >= 12
    namespaces: set[str] = set()
    for scenario in scenarios:
        res = pipeline.load_resources([str(scenario)])
        for key, route in res.httproutes.items():
            kinds = {(p.group, p.kind) for p in route.parent_refs}
            assert {kind for _group, kind in kinds} == {"Service"}, (scenario.name, key)
        cases, _ = pipeline.load_cases(str(scenario / "cases.yaml"))
        assert cases and all(c.mesh for c in cases), scenario.name
        here = {c.request.source.namespace for c in cases if c.request.source}
        assert len(here) >= 2 or scenario.name == "mesh-basic", scenario.name
        namespaces |= here
    assert {"mesh-apps", "mesh-client", "edge-web"} <= namespaces


def test_edge_scenarios_have_no_mesh_case() -> None:
    for scenario in edge_scenarios():
        table = scenario / "cases.yaml"
        items = yaml.safe_load(table.read_text()) if table.is_file() else []
        assert not [c for c in items or [] if "service" in c], scenario.name


# ------------------------------------------------------------ small worlds

NS = """\
apiVersion: v1
kind: Namespace
metadata: {{name: {name}{labels}}}
---
"""
CLIENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: client, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{app: client}}}}
  template:
    metadata: {{labels: {{app: client}}{annotations}}}
    spec: {{containers: [{{name: c, image: x}}]}}
---
"""
SERVICE = """\
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: prod}}
spec:
  clusterIP: {ip}
  selector: {{app: {name}}}
  ports:
  - {{name: http, port: 80, targetPort: 3000}}
  - {{name: http-alt, port: 8080, targetPort: 3000}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: prod}}
spec:
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: c, image: x, ports: [{{containerPort: 3000}}]}}]}}
---
"""
MESH = ', labels: {aether.io/managed: "true"}'
IPS = {"svc": "10.96.0.10", "other": "10.96.0.11", "plain": "10.96.0.12"}


@dataclass(frozen=True)
class R:
    """A mesh route on Service svc: from ``ns``, on ``port`` (None: every port), for
    paths under ``prefix``, marking its answers with header X-Route: ``name``."""

    name: str
    ns: str
    port: int | None = None
    prefix: str = "/"

    def yaml(self) -> str:
        port = f", port: {self.port}" if self.port else ""
        to = "" if self.ns == "prod" else ", namespace: prod"
        return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {self.name}, namespace: {self.ns}}}
spec:
  parentRefs: [{{group: "", kind: Service, name: svc, namespace: prod{port}}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: {self.prefix}}}}}]
    filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier: {{set: [{{name: X-Route, value: {self.name}}}]}}
    backendRefs: [{{name: svc{to}, port: 80}}]
---
"""


GRANT = """\
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: consumers, namespace: prod}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: c1},
         {group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: c2}]
  to: [{group: "", kind: Service}]
"""


def world(routes: tuple[R, ...], *, capture_all: bool = False, extra: str = "") -> Resources:
    """Namespaces prod, c1, c2 (mesh-registered) and out (not); a client in each;
    Services svc and other in prod, plain in out (not mesh-registered)."""
    text = "".join(NS.format(name=n, labels=MESH) for n in ("prod", "c1", "c2"))
    text += NS.format(name="out", labels="")
    annotations = ', annotations: {capture.aether.io/redirect-all: "true"}' if capture_all else ""
    text += "".join(
        CLIENT.format(ns=n, annotations=annotations) for n in ("prod", "c1", "c2", "out")
    )
    text += "".join(SERVICE.format(name=n, ip=IPS[n]) for n in ("svc", "other"))
    text += SERVICE.format(name="plain", ip=IPS["plain"]).replace(
        "namespace: prod", "namespace: out"
    )
    text += "".join(r.yaml() for r in routes) + GRANT + extra
    return build(load_texts([("world.yaml", text)]))


def ask(
    res: Resources, client: str, path: str = "/", *, port: int = 80, to: str = "svc"
) -> Outcome:
    req = Request(
        host=f"{to}.prod", port=port, address=IPS[to], path=path, source=Source(client, "client")
    )
    return spec_evaluate_mesh(res, req).outcome


def marked(o: Outcome) -> str | None:
    return dict(o.response_headers).get("x-route", (None,))[0]


def test_a_producer_route_applies_to_every_mesh_client_and_not_outside_the_mesh() -> None:
    res = world((R("p", "prod"),))
    assert [marked(ask(res, ns)) for ns in ("prod", "c1", "c2")] == ["p", "p", "p"]
    outside = ask(res, "out")  # no sidecar: kube-proxy, to the Service itself
    assert (outside.status, marked(outside), [b.name for b in outside.backends]) == (
        200,
        None,
        ["svc"],
    )


def test_consumer_routes_replace_producer_routes_for_their_namespace_only() -> None:
    res = world((R("p", "prod"), R("c", "c1", prefix="/c")))
    assert marked(ask(res, "c1", "/c/x")) == "c"
    assert ask(res, "c1", "/").status == 404  # the producer route no longer applies to c1
    assert marked(ask(res, "c2", "/c/x")) == "p" and marked(ask(res, "prod", "/")) == "p"


def test_the_frontend_is_the_cluster_ip_not_the_host() -> None:
    res = world((R("p", "prod"),))
    to_other = Request(host="svc.prod", address=IPS["other"], source=Source("c1", "client"))
    answer = spec_evaluate_mesh(res, to_other).outcome
    assert marked(answer) is None and [b.name for b in answer.backends] == ["other"]
    nowhere = Request(host="svc.prod", address="10.96.9.9", source=Source("c1", "client"))
    assert spec_evaluate_mesh(res, nowhere).outcome.status == NO_RESPONSE
    wrong_port = Request(
        host="svc.prod", address=IPS["svc"], port=81, source=Source("c1", "client")
    )
    assert spec_evaluate_mesh(res, wrong_port).outcome.status == NO_RESPONSE


def test_capture_scope_redirect_all_or_mesh_registered_services() -> None:
    """A (consumer) route of prod on a Service outside the mesh (out/plain) applies to
    prod's client only when its sidecar captures all outbound traffic; otherwise
    kube-proxy answers."""
    route = R("p", "prod").yaml()
    route = route.replace("name: svc, namespace: prod", "name: plain, namespace: out")
    for capture_all, expected in ((False, None), (True, "p")):
        res = world((), capture_all=capture_all, extra="---\n" + route)
        answer = ask(res, "prod", to="plain")
        assert (answer.status, marked(answer)) == (200, expected), capture_all


def test_no_ready_endpoint_kube_proxy_refuses_a_sidecar_answers_503() -> None:
    text = "".join(NS.format(name=n, labels=MESH) for n in ("prod",)) + NS.format(
        name="out", labels=""
    )
    text += CLIENT.format(ns="prod", annotations="") + CLIENT.format(ns="out", annotations="")
    svc = SERVICE.format(name="svc", ip=IPS["svc"])
    text += svc.split("---\napiVersion: apps/v1")[0]  # the Service without its pods
    res = build(load_texts([("w.yaml", text)]))
    assert ask(res, "prod").status == 503
    assert ask(res, "out").status == NO_RESPONSE


def test_trace_names_the_decisions() -> None:
    res = world((R("p", "prod"), R("c", "c1", port=80)))
    trace = spec_evaluate_mesh(
        res, Request(host="svc.prod", address=IPS["svc"], source=Source("c2", "client"))
    ).trace
    text = "\n".join(trace)
    assert "frontend: Service prod/svc port 80" in text
    assert "consumer route of namespace c1, not the client's (c2)" in text
    assert "producer route(s): HTTPRoute prod/p" in text and "winner prod/p" in text


def test_the_model_object_and_the_function_agree() -> None:
    res = world((R("p", "prod", port=8080), R("c", "c2")))
    model = MeshModel(res)
    for ns in ("prod", "c1", "c2", "out"):
        for port in (80, 8080):
            req = Request(
                host="svc.prod", address=IPS["svc"], port=port, source=Source(ns, "client")
            )
            assert model.evaluate(req).outcome == spec_evaluate_mesh(res, req).outcome


# ------------------------------------------------------------ drawn worlds

PATHS = ("/", "/a", "/a/b", "/b")
routes_drawn = st.lists(
    st.builds(
        R,
        name=st.sampled_from(["r0", "r1", "r2"]),
        ns=st.sampled_from(["prod", "c1", "c2"]),
        port=st.sampled_from([None, 80, 8080]),
        prefix=st.sampled_from(["/", "/a", "/b"]),
    ),
    max_size=4,
    unique_by=lambda r: (r.ns, r.name),
)


def answers(
    res: Resources, clients: tuple[str, ...], ports: tuple[int, ...] = (80, 8080)
) -> dict[tuple[str, int, str], Outcome]:
    model = MeshModel(res)
    return {
        (client, port, path): model.evaluate(
            Request(
                host="svc.prod",
                address=IPS["svc"],
                port=port,
                path=path,
                source=Source(client, "client"),
            ),
            trace=False,
        ).outcome
        for client in clients
        for port in ports
        for path in PATHS
    }


@world_settings(40)
@given(
    routes=routes_drawn,
    path=st.sampled_from(["/", "/a", "/b"]),
    port=st.sampled_from([None, 80, 8080]),
)
def test_a_consumer_route_never_changes_another_namespaces_answers(
    routes: list[R], path: str, port: int | None
) -> None:
    consumer = R("added", "c1", port=port, prefix=path)
    before = answers(world(tuple(routes)), ("prod", "c2", "out"))
    after = answers(world((*routes, consumer)), ("prod", "c2", "out"))
    assert before == after


@world_settings(40)
@given(routes=routes_drawn)
def test_a_producer_only_world_answers_every_mesh_client_alike(routes: list[R]) -> None:
    named = {r.name: R(r.name, "prod", r.port, r.prefix) for r in routes}
    producers = tuple(named.values())
    found = answers(world(producers), ("prod", "c1", "c2"))
    for (client, port, path), outcome in found.items():
        assert outcome == found[("prod", port, path)], (client, port, path)


@world_settings(40)
@given(routes=routes_drawn, ns=st.sampled_from(["prod", "c1", "c2"]))
def test_a_parent_ref_port_never_changes_another_ports_answers(routes: list[R], ns: str) -> None:
    """A route for port 80 only, added to any world, leaves every answer on 8080 as it was."""
    added = R("on-80", ns, port=80)
    clients = ("prod", "c1", "c2", "out")
    before = answers(world(tuple(routes)), clients, (8080,))
    assert before == answers(world((*routes, added)), clients, (8080,))


def test_base_mesh_clients_and_services_load_without_notes() -> None:
    res = pipeline.load_resources([str(BASE)])
    assert not [w for w in res.warnings if "mesh-apps" in w or "mesh-client" in w]
