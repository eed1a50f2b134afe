"""A shrunk counterexample written as a fixture ``check`` reads as it is.

``OUT/`` is a suite: ``OUT/base/base.yaml`` (what every world stands on) and one
folder per counterexample with ``resources.yaml`` (the world), ``cases.yaml``
(its requests and the spec model's answers to them), ``expected-findings.yaml``
when the world holds configuration mistakes (drawn on purpose: a Service that does
not exist, a route no listener takes) and a README line naming the property.
``edge-verify check OUT/`` checks them all; copying a folder and the base into a
fixtures tree makes it a regression test.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from verifier import expected
from verifier.check import Context
from verifier.errors import InputError, InputErrors
from verifier.gatewayapi.resources import load_resources
from verifier.semantics import witness as wt
from verifier.semantics.cases import possible_statuses
from verifier.semantics.request import Outcome
from verifier.semantics.spec.mesh import spec_evaluate_mesh
from verifier.semantics.spec.model import spec_evaluate
from verifier.xds.snapshot import Snapshot

from .properties import Failure
from .trial import load_world
from .worlds import BASE_YAML, CONTROLLER


def write_found(out: Path, failure: Failure, name: str, note: str) -> Path:
    """``out/name/`` for ``failure``; ``out/base/base.yaml`` when it is not there yet."""
    check_out(out)
    base = out / "base" / "base.yaml"
    base.parent.mkdir(parents=True, exist_ok=True)
    if not base.exists():
        base.write_text(BASE_YAML, encoding="utf-8")
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    header = "".join(f"# {line}\n" for line in note.splitlines())
    (folder / "resources.yaml").write_text(header + failure.world.yaml(), encoding="utf-8")
    cases = expected_cases(failure)
    if cases:
        text = yaml.safe_dump(cases, sort_keys=False, default_flow_style=None, width=100)
        (folder / "cases.yaml").write_text(text, encoding="utf-8")
    declare_findings(base.parent, folder)
    (folder / "README.md").write_text(
        f"Found by `edge-verify fuzz`: property `{failure.property}` failed.\n\n"
        f"{failure.summary}\n",
        encoding="utf-8",
    )
    return folder


DECLARED_HEADER = (
    "# The world's configuration mistakes, drawn on purpose (a backendRef to a Service\n"
    "# that does not exist, a route no listener takes): check reports them as it must.\n"
)


def declare_findings(base: Path, folder: Path) -> None:
    """``folder/expected-findings.yaml`` when the world in ``folder`` holds configuration
    mistakes, so that ``check`` passes on it with a correct translator."""
    declared = declared_findings(base, folder)
    if declared:
        text = yaml.safe_dump(declared, sort_keys=False, default_flow_style=None, width=100)
        (folder / expected.FILE).write_text(DECLARED_HEADER + text, encoding="utf-8")


def declared_findings(base: Path, folder: Path) -> list[dict[str, Any]]:
    """The findings of the configuration rules on the written world, as
    expected-findings.yaml declares them: drawn worlds hold mistakes on purpose, and
    the fixture must pass ``check`` with a correct translator."""
    from verifier.rules import CONFIGURATION

    res = load_resources([str(base), str(folder)])
    ctx = Context(res, Snapshot(), controller_name=CONTROLLER)
    found = sorted(f for rule in CONFIGURATION for f in rule.check(ctx))
    return [
        {
            "code": f.code,
            "file": os.path.relpath(f.file, folder),
            "line": f.line,
            "resource": f.resource,
        }
        for f in found
    ]


def check_out(out: Path) -> None:
    """Refuse an ``out`` that cannot hold fixtures: a file, or a suite whose base
    is another version's. The command asks before searching, so that nothing
    found is lost for want of a place to write it."""
    if out.exists() and not out.is_dir():
        message = "exists and is not a directory"
        raise InputErrors([InputError("--out", 0, str(out), "not-a-directory", message)])
    base = out / "base" / "base.yaml"
    if base.exists() and base.read_text(encoding="utf-8") != BASE_YAML:
        message = f"{base} holds another base than this version's fuzzer writes: give another --out"
        raise InputErrors([InputError("--out", 0, str(out), "conflict", message)])


def expected_cases(failure: Failure) -> list[dict[str, Any]]:
    """The failure's requests, each with the answer the spec model gives in its world:
    an edge case names its Gateway, a mesh case its client and Service (docs/cases.md)."""
    res = load_world(failure.world)
    out = []
    unique = {(w.gateway, w.request): w for w in failure.requests}
    for i, w in enumerate(unique.values()):
        case: dict[str, Any] = {"name": f"{failure.property}-{i}"}
        source = w.request.source
        if source is None:
            outcome = spec_evaluate(res, w.gateway, w.request, controller_name=CONTROLLER).outcome
            port = w.request.port
            case["gateway"] = {"namespace": w.gateway[0], "name": w.gateway[1], "port": port}
        else:
            outcome = spec_evaluate_mesh(res, w.request, trace=False).outcome
            case["from"] = {"namespace": source.namespace, "workload": source.workload}
            case["service"] = {
                "namespace": w.gateway[0],
                "name": w.gateway[1],
                "port": w.request.port,
            }
        case["request"] = _request(w)
        case["expect"] = _expect(outcome)
        out.append(case)
    return out


def _request(w: wt.Witness) -> dict[str, Any]:
    r = w.request
    out: dict[str, Any] = {"method": r.method}
    if r.source is None:  # a mesh client sends cleartext (its sidecar adds mTLS)
        out["scheme"] = r.scheme
    if r.host != r.address:
        out["host"] = r.host
    out["path"] = r.path
    if r.headers:
        out["headers"] = {n: list(vs) if len(vs) > 1 else vs[0] for n, vs in r.headers}
    return out


def _expect(o: Outcome) -> dict[str, Any]:
    statuses = sorted(possible_statuses(o))
    out: dict[str, Any] = {"status": o.status} if len(statuses) == 1 else {"statuses": statuses}
    if o.backends:
        names = sorted({b.name for b in o.backends})
        if len(names) == 1:
            out["backend"] = names[0]
        else:
            out["backends"] = names
        namespaces = {b.namespace for b in o.backends}
        if len(namespaces) == 1:
            out["namespace"] = namespaces.pop()
    if o.redirect is not None:
        r = o.redirect
        out["redirect"] = {"scheme": r.scheme, "host": r.host, "port": r.port, "path": r.path}
    if o.request is not None and o.backends:
        out["request"] = {"host": o.request.host, "path": o.request.path}
    return out
