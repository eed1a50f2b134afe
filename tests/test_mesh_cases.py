"""Mesh cases: a request from a client workload to a Service's frontend.

The shared vocabulary the spec model, the translator and the Envoy model read
(docs/mesh.md, docs/cases.md): ``Request.source``, the ``from:``/``service:``
keys of a cases table, and ``Destinations.sent`` aiming a mesh request at the
Service's ClusterIP with the Service's name as Host.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from verifier import pipeline
from verifier.destinations import Destinations
from verifier.errors import InputErrors
from verifier.semantics.cases import CaseError, parse_case
from verifier.semantics.request import Request, Source, service_host

MESH = {
    "name": "to-echo",
    "from": {"namespace": "mesh-client", "workload": "client"},
    "service": {"namespace": "mesh-apps", "name": "echo", "port": 8080},
    "request": {"path": "/v2"},
    "expect": {"status": 200},
}


def test_a_mesh_case_names_its_client_and_service() -> None:
    case = parse_case(MESH, 0)
    assert case.mesh and case.gateway is None
    assert case.parent_key == ("mesh-apps", "echo") and case.port == 8080
    assert case.request.source == Source("mesh-client", "client")
    assert case.request.port == 8080 and case.request.mesh


def test_an_edge_case_has_no_source() -> None:
    edge = {"name": "e", "gateway": {"namespace": "a", "name": "b", "port": 80}}
    case = parse_case(edge, 0)
    assert not case.mesh and case.request.source is None and case.parent_key == ("a", "b")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gateway": {"namespace": "a", "name": "b"}}, "[0].service"),  # both
        ({"service": None, "from": None}, "[0].gateway"),  # neither (keys removed below)
        ({"from": None}, "[0].service"),  # a Service with no client
        ({"from": {"namespace": "x"}}, "[0].from.workload"),
        ({"service": {"name": "echo"}}, "[0].service.namespace"),
        ({"service": {"namespace": "a", "name": "b", "port": 0}}, "[0].service.port"),
        ({"from": {"namespace": "x", "workload": "y", "pod": "z"}}, "[0].from.pod"),
        ({"request": {"scheme": "https"}}, "[0].request.scheme"),
        ({"request": {"protocol": "h2c"}}, "[0].request.protocol"),
        ({"expect": {"websocket": {"messages": ["a"]}}}, "[0].expect.websocket"),
    ],
)
def test_a_mesh_case_is_read_strictly(change: dict[str, object], field: str) -> None:
    item = {**MESH, **{k: v for k, v in change.items() if v is not None}}
    for key in [k for k, v in change.items() if v is None]:
        item.pop(key)
    with pytest.raises(CaseError) as err:
        parse_case(item, 0)
    assert err.value.field == field


def test_a_gateway_case_cannot_have_a_client() -> None:
    item = {"name": "e", "gateway": {"namespace": "a", "name": "b"}, "from": MESH["from"]}
    with pytest.raises(CaseError) as err:
        parse_case(item, 0)
    assert err.value.field == "[0].from"


def test_the_request_shows_its_source() -> None:
    req = Request(host="echo", path="/", source=Source("ns", "client"))
    assert "from ns/client" in req.line()
    assert req.to_json()["source"] == {"namespace": "ns", "workload": "client"}
    assert "source" not in Request().to_json()  # an edge request's JSON is unchanged


def test_a_mesh_request_goes_to_the_service_frontend() -> None:
    where = Destinations(cluster_ips={("mesh-apps", "echo"): "10.96.50.1"})
    sent = where.sent(("mesh-apps", "echo"), Request(port=8080, source=Source("c", "w")))
    assert (sent.address, sent.port) == ("10.96.50.1", 8080)
    assert sent.host == "echo.mesh-apps.svc.cluster.local:8080"
    assert where.sent(("mesh-apps", "echo"), sent) is sent  # aimed already
    on_80 = where.sent(("mesh-apps", "echo"), Request(port=80, source=Source("c", "w")))
    assert on_80.host == service_host("mesh-apps", "echo", 80) == "echo.mesh-apps.svc.cluster.local"
    named = where.sent(("mesh-apps", "echo"), Request(host="x", port=80, source=Source("c", "w")))
    assert named.host == "x"  # a Host the case gives is kept


SERVICE = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: client, namespace: mesh-apps}
spec:
  selector: {matchLabels: {app: client}}
  template:
    metadata: {labels: {app: client}}
    spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: mesh-apps}
spec:
  clusterIP: 10.96.50.1
  selector: {app: echo}
  ports:
  - {name: http, port: 8080}
  - {name: admin, port: 9000}
"""


def _load(tmp_path: Path, cases: str) -> tuple[list[object], list[str]]:
    (tmp_path / "svc.yaml").write_text(SERVICE)
    table = tmp_path / "cases.yaml"
    table.write_text(cases)
    res = pipeline.load_resources([str(tmp_path / "svc.yaml")])
    try:
        loaded, lines = pipeline.load_cases(str(table))
        return list(pipeline.with_ports(res, loaded, str(table), lines)), []
    except InputErrors as exc:
        return [], [str(e) for e in exc.errors]


def test_cases_file_errors_name_their_line(tmp_path: Path) -> None:
    _, errors = _load(
        tmp_path,
        "- name: ok\n  from: {namespace: mesh-apps, workload: client}\n"
        "  service: {namespace: mesh-apps, name: echo, port: 8080}\n"
        "- name: bad\n  from: {namespace: c}\n  service: {namespace: mesh-apps, name: echo}\n",
    )
    assert errors == [
        f"{tmp_path / 'cases.yaml'}:5: [1].from.workload: required: "
        "{namespace, workload} as non-empty strings [case]"
    ]


def test_the_service_port_is_checked_against_the_service(tmp_path: Path) -> None:
    head = "- name: c\n  from: {namespace: mesh-apps, workload: client}\n"
    _, errors = _load(tmp_path, head + "  service: {namespace: mesh-apps, name: echo}\n")
    assert len(errors) == 1 and ":3: [0].service.port:" in errors[0], errors  # at its field
    _, errors = _load(tmp_path, head + "  service: {namespace: mesh-apps, name: echo, port: 81}\n")
    assert len(errors) == 1 and "has no port 81 (ports: 8080, 9000)" in errors[0], errors
    _, errors = _load(tmp_path, head + "  service: {namespace: mesh-apps, name: nope}\n")
    assert len(errors) == 1 and "no Service mesh-apps/nope" in errors[0], errors
    other = "- name: c\n  from: {namespace: mesh-apps, workload: clint}\n"
    _, errors = _load(tmp_path, other + "  service: {namespace: mesh-apps, name: echo, port: 80}\n")
    # both wrong references of the case, each at its field
    assert len(errors) == 2 and ":2: [0].from.workload:" in errors[0], errors
    assert ":3: [0].service.port:" in errors[1], errors
    assert "did you mean mesh-apps/client?" in errors[0], errors
    cases, errors = _load(
        tmp_path, head + "  service: {namespace: mesh-apps, name: echo, port: 9000}\n"
    )
    assert not errors and cases
