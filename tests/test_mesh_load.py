"""Mesh routes and the mesh's deployment facts, as the input layer reads them.

An HTTPRoute whose parentRef is a Service (``group: ""``, ``kind: Service``) is a
mesh route; the CRD's rules for parentRefs hold for Service parents as for
Gateways (distinctness by group/kind/namespace/name, with sectionName and port).
Workloads' ServiceAccount and capture annotation, and which namespaces and
Services are mesh-registered, are read once here for the spec model and the
translator alike (verifier/gatewayapi/workloads.py).
"""

from __future__ import annotations

import textwrap

import pytest

from verifier.gatewayapi.load import load_texts
from verifier.gatewayapi.model import ParentRef
from verifier.gatewayapi.resources import Resources, build
from verifier.gatewayapi.validate import validate_object
from verifier.gatewayapi.workloads import (
    captures_all,
    has_sidecar,
    mesh_namespace,
    mesh_service,
    workload,
)


def _route(parents: str) -> str:
    return (
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n"
        "metadata: {name: r, namespace: shop}\nspec:\n  parentRefs:\n"
        + textwrap.indent(textwrap.dedent(parents), "  ")
    )


def _problems(text: str) -> list[tuple[int, str, str]]:
    loaded = load_texts([("t.yaml", text)])
    assert not loaded.errors
    return sorted((e.line, e.field, e.code) for o in loaded.objects for e in validate_object(o))


def test_a_service_parent_is_read_as_written() -> None:
    text = _route(
        """\
        - {group: "", kind: Service, name: cart, port: 8080}
        - {group: "", kind: Service, name: pay, namespace: billing, sectionName: http}
        """
    )
    assert _problems(text) == []
    res = build(load_texts([("t.yaml", text)]))
    refs = res.httproutes[("shop", "r")].parent_refs
    assert refs == (
        ParentRef("", "Service", "shop", "cart", None, 8080),
        ParentRef("", "Service", "billing", "pay", "http", None),
    )


@pytest.mark.parametrize(
    ("parents", "expected"),
    [
        # CRD: "sectionName or port must be specified when parentRefs includes 2 or
        # more references to the same parent"
        (
            '- {group: "", kind: Service, name: cart}\n'
            '- {group: "", kind: Service, name: cart, port: 80}\n',
            [(7, "spec.parentRefs[1]", "parent-ref-section-required")],
        ),
        # "... must be unique when parentRefs includes 2 or more references to the same parent"
        (
            '- {group: "", kind: Service, name: cart, port: 80}\n'
            '- {group: "", kind: Service, name: cart, port: 80}\n',
            [(7, "spec.parentRefs[1]", "unique")],
        ),
        # Distinct parents: a Gateway named like the Service, another namespace's Service.
        (
            '- {group: "", kind: Service, name: cart}\n- {name: cart}\n'
            '- {group: "", kind: Service, name: cart, namespace: other}\n',
            [],
        ),
        # PortNumber: 1-65535; SectionName: an RFC 1123 subdomain.
        (
            '- {group: "", kind: Service, name: cart, port: 0}\n',
            [(6, "spec.parentRefs[0].port", "minimum")],
        ),
        (
            '- {group: "", kind: Service, name: cart, sectionName: HTTP_PORT}\n',
            [(6, "spec.parentRefs[0].sectionName", "pattern")],
        ),
    ],
)
def test_the_crd_rules_hold_for_service_parents(
    parents: str, expected: list[tuple[int, str, str]]
) -> None:
    assert _problems(_route(parents)) == expected


WORLD = """\
apiVersion: v1
kind: Namespace
metadata: {name: meshed, labels: {aether.io/managed: "true"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: plain}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: client, namespace: meshed}
spec:
  selector: {matchLabels: {app: client}}
  template:
    metadata:
      labels: {app: client}
      annotations: {capture.aether.io/redirect-all: "true"}
    spec:
      serviceAccountName: client-sa
      containers: [{name: c, image: x}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: meshed}
spec:
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}, annotations: {capture.aether.io/redirect-all: "yes"}}
    spec: {containers: [{name: c, image: x}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: outside, namespace: plain}
spec:
  selector: {matchLabels: {app: outside}}
  template:
    metadata: {labels: {app: outside}}
    spec: {containers: [{name: c, image: x}]}
"""


def _world() -> Resources:
    return build(load_texts([("w.yaml", WORLD)]))


def test_workloads_carry_their_identity_and_capture_scope() -> None:
    res = _world()
    client, db, outside = (
        workload(res, *k) for k in (("meshed", "client"), ("meshed", "db"), ("plain", "outside"))
    )
    assert client is not None and db is not None and outside is not None
    assert workload(res, "meshed", "nobody") is None
    assert (client.service_account, db.service_account) == ("client-sa", "default")
    assert captures_all(client) and not captures_all(db)  # only "true" widens the scope
    assert has_sidecar(res, client) and has_sidecar(res, db) and not has_sidecar(res, outside)


def test_mesh_registration_by_label_or_registry() -> None:
    res = _world()
    assert mesh_namespace(res, "meshed") and not mesh_namespace(res, "plain")
    assert mesh_service(res, frozenset(), "meshed", "any")
    assert not mesh_service(res, frozenset(), "plain", "svc")
    assert mesh_service(res, frozenset({("plain", "svc")}), "plain", "svc")
