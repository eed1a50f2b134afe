"""envoy-data-plane's classes, built later (``verifier._deferred``), are built the same.

The option only moves when pydantic builds a message class's validator. These tests
hold it to that: in one fresh interpreter the classes are made as envoy-data-plane
makes them, in another after ``import verifier``. For every message class of every
module the translator loads or a check can meet, the two core schemas pydantic ends
up with are the same, so every value is accepted or rejected alike. And the option
does take effect (no class is built as it is created), for envoy-data-plane's
classes only.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

# Prints {class: its core schema, normalized} for the named modules' message classes.
# Normalized: a class's schema is a definition referred to where pydantic met it twice
# in one build, and inline where once, so which it is depends on what was built before;
# every reference is replaced by its definition, and a class met again inside itself
# (by reference or inlined) by its name. Refs end in the class's id() and functions
# print their address: both differ between any two processes, so they are taken out.
DUMP = r"""
import importlib, json, re, sys

def plain(ref):
    return re.sub(r":\d+$", "", ref)

def norm(s, defs, open_):
    if isinstance(s, list):
        return [norm(x, defs, open_) for x in s]
    if not isinstance(s, dict):
        return s
    kind = s.get("type")
    if kind == "definitions":
        defs = {**defs, **{plain(d["ref"]): d for d in s["definitions"]}}
        return norm(s["schema"], defs, open_)
    if kind == "definition-ref":
        ref = plain(s["schema_ref"])
        if ref in open_:
            return ["recursive", ref]
        return norm(defs[ref], defs, open_)
    if "ref" in s:
        if plain(s["ref"]) in open_:  # a class inside itself, inlined: unfolded once
            return ["recursive", plain(s["ref"])]
        open_ = open_ | {plain(s["ref"])}
    return {k: norm(v, defs, open_) for k, v in s.items() if k != "ref"}

modules, deferred = json.loads(sys.argv[1]), sys.argv[2] == "deferred"
if deferred:
    import verifier  # noqa: F401
import betterproto2, pydantic.dataclasses
out = {}
for name in modules:
    mod = importlib.import_module(name)
    for attr, cls in sorted(vars(mod).items()):
        if not (isinstance(cls, type) and issubclass(cls, betterproto2.Message)):
            continue
        if cls.__module__ != name:
            continue
        made = cls.__pydantic_complete__
        pydantic.dataclasses.rebuild_dataclass(cls)
        text = repr(norm(cls.__pydantic_core_schema__, {}, frozenset()))
        text = re.sub(r" at 0x[0-9a-f]+", "", text)
        out[f"{name}.{attr}"] = [made, text]
print(json.dumps(out))
"""

# Lists the envoy-data-plane modules that translating a config imports, and those whose
# messages a check can meet (``check --xds`` itself reads records: verifier.xds.records).
MODULES = """
import importlib, json, sys
import verifier.translate, verifier.xds.codec
from verifier.xds.schema import MODULES
for name in MODULES:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("envoy_data_plane."))))
"""


def _run(code: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def schemas() -> tuple[dict[str, list[object]], dict[str, list[object]]]:
    modules = _run(MODULES).strip()
    eager = json.loads(_run(DUMP, modules, "eager"))
    deferred = json.loads(_run(DUMP, modules, "deferred"))
    return eager, deferred


def test_every_class_gets_the_schema_it_gets_when_built_at_once(
    schemas: tuple[dict[str, list[object]], dict[str, list[object]]],
) -> None:
    eager, deferred = schemas
    assert len(eager) > 400  # the route, listener, cluster, HCM, TLS... classes
    assert eager.keys() == deferred.keys()
    differ = [name for name in eager if eager[name][1] != deferred[name][1]]
    assert differ == []


def test_no_class_is_built_as_it_is_created(
    schemas: tuple[dict[str, list[object]], dict[str, list[object]]],
) -> None:
    eager, deferred = schemas
    assert [name for name, (made, _) in deferred.items() if made] == []
    # Without the option pydantic builds the classes it can (and these are what the
    # option saves), so the comparison above is between two different histories.
    assert sum(1 for made, _ in eager.values() if made) > 50


def test_other_pydantic_dataclasses_are_built_as_before() -> None:
    code = """
import verifier, envoy_data_plane.envoy.config.route.v3
import pydantic.dataclasses
@pydantic.dataclasses.dataclass
class Mine:
    x: int
print(Mine.__pydantic_complete__, Mine(x="3").x)
"""
    assert _run(code).split() == ["True", "3"]


def test_a_deferred_class_still_rejects_what_pydantic_rejects() -> None:
    code = """
import verifier
from envoy_data_plane.envoy.config.route.v3 import RouteMatch
try:
    RouteMatch(prefix=3)
except ValueError as exc:
    print(type(exc).__name__, "string_type" in str(exc))
"""
    assert _run(code).split() == ["ValidationError", "True"]


def test_the_finder_waits_for_envoy_data_plane() -> None:
    """``--version`` and ``--help`` import neither pydantic nor envoy-data-plane."""
    out = _run("import sys, verifier; print(sorted({m.split('.')[0] for m in sys.modules}))")
    assert not re.search(r"'(pydantic|envoy_data_plane)'", out)
