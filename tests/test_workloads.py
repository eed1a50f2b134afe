"""Endpoints derived from workloads, for Services given without EndpointSlices.

The derived slices must be what a cluster's EndpointSlice controller would
publish, since the models, the translator and the live pass all read them as
if they had been given.
"""

from __future__ import annotations

import ipaddress

import pytest

from verifier.errors import InputErrors
from verifier.gatewayapi.load import load_texts
from verifier.gatewayapi.resources import Resources, build
from verifier.gatewayapi.workloads import POD_RANGE


def _workload(kind: str, name: str, *, replicas: int | None = None, ports: str = "") -> str:
    rep = "" if replicas is None else f"\n  replicas: {replicas}"
    port_list = ports or "[{containerPort: 3000}]"
    return f"""---
apiVersion: apps/v1
kind: {kind}
metadata: {{name: {name}, namespace: ns}}
spec:{rep}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}, tier: web}}}}
    spec:
      containers:
      - name: c
        ports: {port_list}
"""


def _service(name: str, selector: str, *, target: str = "", port: int = 8080) -> str:
    target_line = f", targetPort: {target}" if target else ""
    return f"""---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: ns}}
spec:
  selector: {selector}
  ports: [{{port: {port}{target_line}}}]
"""


def _load(*docs: str) -> Resources:
    return build(load_texts([("t.yaml", "".join(docs))]))


def _slices(
    res: Resources, service: str
) -> list[tuple[tuple[str, ...], tuple[tuple[str, int], ...]]]:
    return [
        (s.addresses, s.ports)
        for s in res.endpoint_slices.values()
        if s.meta.namespace == "ns" and s.service_name == service
    ]


def test_selector_picks_the_pods_of_matching_workloads_only() -> None:
    res = _load(
        _workload("Deployment", "a", replicas=2),
        _workload("Deployment", "b", replicas=3),
        _service("svc-a", "{app: a}", target="3000"),
        _service("svc-web", "{tier: web}", target="3000"),
    )
    [(a_addresses, a_ports)] = _slices(res, "svc-a")
    assert len(a_addresses) == 2 and a_ports == (("", 3000),)
    [(web, _)] = _slices(res, "svc-web")
    assert len(web) == 5 and set(a_addresses) < set(web)
    for address in web:
        assert ipaddress.IPv4Address(address) in POD_RANGE
        assert ipaddress.IPv4Address(address) not in ipaddress.IPv4Network("192.0.2.0/24")
    assert any("svc-a" in w and "derived 2 ready endpoints" in w for w in res.warnings)


def test_named_target_port_resolves_to_the_container_port() -> None:
    res = _load(
        _workload(
            "Deployment",
            "a",
            ports="[{name: http, containerPort: 3000}, {name: admin, containerPort: 9000}]",
        ),
        _service("named", "{app: a}", target="admin"),
        _service("unset", "{app: a}", port=8080),
        _service("missing", "{app: a}", target="nope"),
    )
    assert [p for _, p in _slices(res, "named")] == [(("", 9000),)]
    # Unset targetPort is the Service port.
    assert [p for _, p in _slices(res, "unset")] == [(("", 8080),)]
    # No container port of that name: the pod is published without the port.
    [(addresses, ports)] = _slices(res, "missing")
    assert addresses and ports == ()


@pytest.mark.parametrize("replicas", [0, None])
def test_replicas_zero_means_no_ready_endpoint_and_unset_means_one(replicas: int | None) -> None:
    res = _load(_workload("Deployment", "a", replicas=replicas), _service("s", "{app: a}"))
    [(addresses, _)] = _slices(res, "s")
    assert len(addresses) == (0 if replicas == 0 else 1)
    if replicas == 0:
        assert any("no ready endpoint" in w and "503" in w for w in res.warnings)


def test_no_matching_workload_is_an_empty_slice() -> None:
    res = _load(_workload("Deployment", "a"), _service("s", "{app: other}"))
    assert _slices(res, "s") == [((), ())]


def test_pod_names_follow_the_controllers() -> None:
    from verifier.gatewayapi.workloads import pod_names

    res = _load(
        _workload("StatefulSet", "db", replicas=3),
        _workload("Deployment", "web", replicas=2),
        _workload("DaemonSet", "node"),
    )
    (stateful,) = (w for w in res.workloads.values() if w.meta.kind == "StatefulSet")
    assert pod_names(stateful) == ["db-0", "db-1", "db-2"]
    (deployment,) = (w for w in res.workloads.values() if w.meta.kind == "Deployment")
    names = pod_names(deployment)
    assert len(set(names)) == 2 and all(n.startswith("web-") for n in names)
    assert len({n.rsplit("-", 1)[0] for n in names}) == 1  # one ReplicaSet hash
    assert names == pod_names(deployment)  # stable from run to run
    (daemon,) = (w for w in res.workloads.values() if w.meta.kind == "DaemonSet")
    assert len(pod_names(daemon)) == 1  # one node


def _versioned(version: str) -> str:
    return f"""---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: echo-{version}, namespace: ns}}
spec:
  selector: {{matchLabels: {{app: echo, version: {version}}}}}
  template:
    metadata: {{labels: {{app: echo, version: {version}}}}}
    spec:
      serviceAccountName: echo-{version}
      containers: [{{name: c, ports: [{{containerPort: 3000}}]}}]
"""


def test_a_pod_two_services_select_presents_its_own_workloads_identity() -> None:
    """Found against real Envoy (tests/test_sidecar_model_vs_live.py, scenario
    mesh-sidecar-translation): ``echo`` selects both versions' pods, ``echo-v2`` only
    v2's. The pod of echo-v2 presents echo-v2's certificate whichever Service's slice
    lists it first; the directory used to give it the identity of the first workload
    ``echo`` selects (echo-v1), so the Envoy model predicted 503 (SAN mismatch) on
    ``mesh/ns/echo-v2/80``, where Envoy's handshake succeeded."""
    from verifier.gatewayapi.workloads import address_owners
    from verifier.semantics.directory import backend_directory_from

    res = _load(
        _versioned("v1"),
        _versioned("v2"),
        _service("echo", "{app: echo}", target="3000"),
        _service("echo-v2", "{app: echo, version: v2}", target="3000"),
    )
    [(both, _)] = _slices(res, "echo")
    [(v2_pods, _)] = _slices(res, "echo-v2")
    [v2] = v2_pods
    [v1] = set(both) - {v2}
    owners = address_owners(res)
    assert owners[v2] == {("Deployment", "ns", "echo-v2")}
    assert owners[v1] == {("Deployment", "ns", "echo-v1")}
    directory = backend_directory_from(res)
    assert directory.identity(v2) == "spiffe://cluster.local/ns/ns/sa/echo-v2"
    assert directory.identity(v1) == "spiffe://cluster.local/ns/ns/sa/echo-v1"


def test_whose_pod_an_address_is_when_two_workloads_share_labels() -> None:
    """Derived, each address is known to be its own workload's pod, whatever the
    selectors say; given (an EndpointSlice names no workload here), the input does not
    say whose it is, so the directory keeps the Service's reading (its first selected
    workload) and ``address_owners`` names both."""
    from verifier.gatewayapi.workloads import address_owners
    from verifier.semantics.directory import backend_directory_from

    twin = _versioned("v1").replace("echo-v1", "echo-twin")
    docs = [_versioned("v1"), twin, _service("echo", "{app: echo}", target="3000")]
    res = _load(*docs)
    [(addresses, _)] = _slices(res, "echo")
    directory = backend_directory_from(res)
    accounts = {address_owners(res)[a].pop()[2]: directory.identity(a) for a in addresses}
    assert accounts == {
        "echo-v1": "spiffe://cluster.local/ns/ns/sa/echo-v1",
        "echo-twin": "spiffe://cluster.local/ns/ns/sa/echo-twin",
    }
    given = """---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-given, namespace: ns, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{name: "", port: 3000}]
endpoints: [{addresses: [10.244.0.9]}]
"""
    res = _load(*docs, given)
    assert len(address_owners(res)["10.244.0.9"]) == 2
    identity = backend_directory_from(res).identity("10.244.0.9")
    assert identity == "spiffe://cluster.local/ns/ns/sa/echo-twin"


def test_derived_addresses_are_stable_and_distinct() -> None:
    docs = [_workload("Deployment", f"w{i}", replicas=4) for i in range(20)]
    docs.append(_service("all", "{tier: web}"))
    first = _slices(_load(*docs), "all")
    assert first == _slices(_load(*docs), "all")
    assert len(set(first[0][0])) == 80


def test_a_given_endpoint_slice_wins() -> None:
    given = """---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: s-given, namespace: ns, labels: {kubernetes.io/service-name: s}}
addressType: IPv4
ports: [{name: "", port: 3000}]
endpoints: [{addresses: [10.244.0.9]}]
"""
    res = _load(_workload("Deployment", "a", replicas=3), _service("s", "{app: a}"), given)
    assert _slices(res, "s") == [(("10.244.0.9",), (("", 3000),))]
    assert not res.warnings


def test_a_service_without_selector_is_left_alone() -> None:
    res = _load(
        _workload("Deployment", "a"),
        "---\napiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: ns}\n"
        "spec: {ports: [{port: 80}]}\n",
    )
    assert _slices(res, "s") == [] and not res.warnings


@pytest.mark.parametrize(
    ("doc", "field", "code"),
    [
        (_workload("Deployment", "a", replicas=-1), "spec.replicas", "minimum"),
        (
            _workload("Deployment", "a", ports="[{containerPort: 0}]"),
            "spec.template.spec.containers[0].ports[0].containerPort",
            "minimum",
        ),
        (
            _workload("Deployment", "a", ports="[{name: Bad_Name, containerPort: 80}]"),
            "spec.template.spec.containers[0].ports[0].name",
            "invalid-name",
        ),
        (
            _workload(
                "Deployment",
                "a",
                ports="[{name: x, containerPort: 80}, {name: x, containerPort: 81}]",
            ),
            "spec.template.spec.containers[0].ports[1].name",
            "unique",
        ),
        (
            _workload("StatefulSet", "a").replace("matchLabels: {app: a}", "matchLabels: {app: b}"),
            "spec.selector",
            "selector-mismatch",
        ),
        (
            _workload("DaemonSet", "a").replace("apps/v1", "apps/v1beta2"),
            "apiVersion",
            "unsupported-version",
        ),
    ],
)
def test_fields_the_derivation_reads_are_validated(doc: str, field: str, code: str) -> None:
    with pytest.raises(InputErrors) as caught:
        _load(doc)
    assert [(e.field, e.code) for e in caught.value.errors] == [(field, code)]


def test_fields_the_derivation_does_not_read_are_known_not_checked() -> None:
    """A field of DeploymentSpec the derivation never reads is known and its value left
    to the API server (``strategy`` with whatever it holds); a key the API does not
    define at that level is refused, as the API server refuses it."""
    doc = _workload("Deployment", "a").replace(
        "spec:\n  selector", "spec:\n  strategy: {type: Recreate, anything: 1}\n  selector"
    )
    assert _load(doc).workloads
    with pytest.raises(InputErrors) as caught:
        _load(doc.replace("strategy:", "stratgy:"))
    assert [(e.field, e.code) for e in caught.value.errors] == [("spec.stratgy", "unknown-field")]


def test_a_huge_replica_count_is_refused_not_enumerated() -> None:
    with pytest.raises(InputErrors) as caught:
        _load(_workload("Deployment", "a", replicas=10**9), _service("s", "{app: a}"))
    assert [(e.field, e.code) for e in caught.value.errors] == [("spec.replicas", "too-many-pods")]
    # Nothing selects it: nothing is enumerated, nothing refused.
    assert _load(_workload("Deployment", "a", replicas=10**9)).workloads
