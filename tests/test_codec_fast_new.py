"""Decoded messages built without pydantic's validator are the ones pydantic builds.

``codec._fast_new`` vouches for a value only where the pydantic schema of its
field takes it unchanged, and ``codec.vouched`` lets ``_validate`` skip building
a validator on the same grounds. Two proofs: every field of every message class
``check`` can meet has a schema of the shape the fast path assumes (so what it
vouches for, pydantic accepts as it is); and every fixture's xDS, its foreign
re-encoding and hostile values decode to equal messages, equal bytes, equal
JSON and equal notes both ways.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import betterproto2
import pydantic
import pytest
import verifier.rules
from conftest import FIXTURES, translate_scenario
from envoy_data_plane.google import protobuf as pb
from envoy_data_plane.message_pool import default_message_pool
from foreign import reencode
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic._internal._mock_val_ser import MockCoreSchema

import verifier.check  # noqa: F401  (every message module check imports)
from verifier.gatewayapi.resources import load_resources
from verifier.xds import codec
from verifier.xds.snapshot import KINDS, Snapshot, from_config_dump, load_path, to_config_dump

SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "xds.routes.golden.json").is_file())


def _inner(schema: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """(nullable, the value's schema) of a field's pydantic schema."""
    if schema["type"] == "default":
        schema = schema["schema"]
    if schema["type"] == "nullable":
        return True, schema["schema"]
    return False, schema


def _leaf(schema: dict[str, Any]) -> str:
    """The value schema's shape: the type, and the validator or bounds on it."""
    kind = schema["type"]
    if kind == "function-after":
        return f"{schema['function']['function'].__name__}({_leaf(schema['schema'])})"
    if kind == "int":
        return f"int[{schema.get('ge')},{schema.get('le')}]" if "ge" in schema else "int"
    if kind == "list":
        return f"list({_leaf(schema['items_schema'])})"
    if kind == "dict":
        return f"dict({_leaf(schema['keys_schema'])}:{_leaf(schema['values_schema'])})"
    if kind in ("dataclass", "definition-ref", "definitions"):
        return "message"
    return str(kind)


def _expected(field: Any) -> set[str]:
    """The shapes under which the fast path's check of ``field`` accepts nothing that
    pydantic would reject or change (it may take less: then pydantic builds it)."""
    if field.key_type:
        return {f"dict(str:{one})" for one in _single(field)}
    if field.meta.repeated:
        return {f"list({one})" for one in _single(field)}
    return _single(field)


def _single(field: Any) -> set[str]:
    kind = field.meta.proto_type
    if kind == betterproto2.TYPE_MESSAGE:
        if field.meta.unwrap is not None:
            native = codec._UNWRAPPED[field.meta.unwrap()]
            return {
                bool: {"bool"},
                str: {"validate_string(str)", "str"},
                bytes: {"bytes"},
                int: {"int"},
                float: {"float"},
            }.get(native, {"timedelta", "datetime"})
        return {"message", "check_oneof(message)"}
    if kind == betterproto2.TYPE_ENUM:
        return {"enum", "message"}  # an enum may be a shared definition (a ref)
    if kind in codec.INT_RANGES:
        low, high = codec.INT_RANGES[kind]
        return {f"int[{low},{high}]"}
    return {
        betterproto2.TYPE_DOUBLE: {"float"},
        # validate_string takes what encodes as UTF-8, as the fast check; a bare str
        # (map values) takes more: the fast check is stricter there, never looser.
        betterproto2.TYPE_STRING: {"validate_string(str)", "str"},
        betterproto2.TYPE_BOOL: {"bool"},
        betterproto2.TYPE_BYTES: {"bytes"},
    }[kind]


def _schema_fields(cls: type) -> list[dict[str, Any]]:
    schema = cls.__pydantic_core_schema__  # type: ignore[attr-defined]
    if isinstance(schema, MockCoreSchema):
        pydantic.dataclasses.rebuild_dataclass(cls)  # type: ignore[arg-type]
        schema = cls.__pydantic_core_schema__  # type: ignore[attr-defined]
    defined: dict[str, Any] = {}
    while schema["type"] in ("function-after", "definitions"):
        defined.update((d["ref"], d) for d in schema.get("definitions", []) if "ref" in d)
        schema = schema["schema"]
        if schema["type"] == "definition-ref":  # a recursive class: its own definition
            schema = defined[schema["schema_ref"]]
    assert schema["type"] == "dataclass", cls
    fields: list[dict[str, Any]] = schema["schema"]["fields"]
    return fields


def test_every_field_the_fast_path_vouches_for_has_the_schema_it_assumes() -> None:
    checked = 0
    for cls in list(default_message_pool.type_to_url):
        plan = codec._plan_of(cls)
        if plan is None:
            continue
        fields = {f.attr: f for f in codec._table(cls)[0]}
        for entry in _schema_fields(cls):
            name = entry["name"]
            nullable, value = _inner(entry["schema"])
            field = fields[name]
            assert nullable == (name in plan.nullable), (cls, name)
            if name not in plan.checks:
                continue
            shape = _leaf(value)
            assert shape in _expected(field), (cls.__name__, name, shape)
            checked += 1
    # The classes of the modules check imports (more when other tests ran first).
    assert checked > 1000


def _pair(doc: Any) -> tuple[tuple[Snapshot, list[Any]], tuple[Snapshot, list[Any]]]:
    """The document decoded with the fast path for every message (classes other tests
    had pydantic build included), then with pydantic's construction."""
    with _fast_for_every_class():
        fast = from_config_dump(copy.deepcopy(doc), "doc")
    with _pydantic_builds():
        slow = from_config_dump(copy.deepcopy(doc), "doc")
    return fast, slow


@contextmanager
def _fast_for_every_class() -> Iterator[None]:
    """The fast path for every message (classes other tests had pydantic build
    included); and it must have been taken."""
    built = [0]
    fast_new = codec._fast_new

    def counted(cls: type, kwargs: dict[str, Any]) -> Any:
        msg = fast_new(cls, kwargs)
        built[0] += msg is not None
        return msg

    codec._fast_new, codec.VOUCH_ALWAYS = counted, True  # type: ignore[assignment]
    try:
        yield
    finally:
        codec._fast_new, codec.VOUCH_ALWAYS = fast_new, False  # type: ignore[assignment]
    assert built[0] > 10, "the fast path built the messages"


@contextmanager
def _pydantic_builds() -> Iterator[None]:
    codec.FAST_NEW = False
    try:
        yield
    finally:
        codec.FAST_NEW = True


def _same(fast: tuple[Snapshot, list[Any]], slow: tuple[Snapshot, list[Any]]) -> int:
    (a, notes_a), (b, notes_b) = fast, slow
    assert [str(n) for n in notes_a] == [str(n) for n in notes_b]
    compared = 0
    for kind in KINDS:
        for x, y in zip(getattr(a, kind), getattr(b, kind), strict=True):
            assert type(x) is type(y)
            assert x == y
            assert bytes(x) == bytes(y)
            assert codec.to_json_dict(x) == codec.to_json_dict(y)
            compared += 1
    return compared


def _dumps() -> Iterator[tuple[str, Any]]:
    for name in SCENARIOS:
        snap, _ = load_path(FIXTURES / name)
        yield name, to_config_dump(snap)


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_fixture_decodes_to_the_same_messages(name: str) -> None:
    snap, _ = load_path(FIXTURES / name)
    doc = to_config_dump(snap)
    assert _same(*_pair(doc)) > 0
    res = load_resources([str(FIXTURES / "base"), str(FIXTURES / name)])
    foreign = to_config_dump(reencode(snap, res))
    assert _same(*_pair(foreign)) > 0


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_translator_builds_the_messages_pydantic_builds(name: str) -> None:
    """The translator builds its messages with ``codec.new``, which skips building
    pydantic's schemas (half of a small check's CPU): the same snapshot as with
    ``cls(**fields)``, and a copy (``copy``, ``deepcopy``: the validation bootstrap
    copies listeners) is its message, with lists of its own as pydantic gives it."""
    with _fast_for_every_class():
        fast = translate_scenario(FIXTURES / name)
    with _pydantic_builds():
        slow = translate_scenario(FIXTURES / name)
    assert _same((fast, []), (slow, [])) > 0
    for kind in KINDS:
        for msg in getattr(fast, kind):
            for made in (copy.copy(msg), copy.deepcopy(msg)):
                assert type(made) is type(msg) and made == msg and bytes(made) == bytes(msg)
    for listener in fast.listeners:
        assert copy.copy(listener).filter_chains is not listener.filter_chains
        assert copy.deepcopy(listener).filter_chains[0] is not listener.filter_chains[0]


def _listener_doc() -> Any:
    snap, _ = load_path(FIXTURES / "httproute-exact-path-matching")
    return to_config_dump(snap)


def _first(doc: Any, section: str, key: str, having: str = "") -> Any:
    for part in doc["configs"]:
        for entry in part.get(section, []):
            found = entry[key] if key else entry
            if not having or having in found:
                return found
    raise AssertionError(section)


HOSTILE = {
    "port out of range": lambda d: _first(d, "dynamic_listeners", "active_state")["listener"][
        "address"
    ]["socket_address"].update(port_value=2**32),
    "negative port": lambda d: _first(d, "dynamic_listeners", "active_state")["listener"][
        "address"
    ]["socket_address"].update(port_value=-1),
    "lone surrogate": lambda d: _first(d, "dynamic_listeners", "active_state")["listener"].update(
        stat_prefix="\ud800"
    ),
    "two of a oneof": lambda d: _first(d, "dynamic_route_configs", "route_config", "virtual_hosts")[
        "virtual_hosts"
    ][0]["routes"][0]["match"].update(path="/both", prefix="/"),
    "timeout not a duration": lambda d: _first(d, "dynamic_active_clusters", "cluster").update(
        connect_timeout="soon"
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_values_pydantic_rejects_are_dropped_with_its_own_notes(name: str) -> None:
    doc = json.loads(json.dumps(_listener_doc()))
    HOSTILE[name](doc)
    fast, slow = _pair(doc)
    _same(fast, slow)
    assert fast[1], "the bad value is reported"


def test_a_vouched_message_is_one_the_validator_accepts() -> None:
    snap, _ = load_path(FIXTURES / SCENARIOS[0])
    for top in snap.listeners:
        assert codec.vouched(top)
        codec.original("_validate")(top)  # pydantic agrees
        broken = copy.copy(top)
        broken.name = 7  # type: ignore[assignment]
        assert not codec.vouched(broken)
        with pytest.raises(pydantic.ValidationError):
            broken._validate()


# Struct, Value and ListValue (route metadata) are built by codec._fast_json_message
# when every value is vouched for; otherwise from_dict builds them, or gives its error.
_json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.integers().map(lambda n: n * 10**320),  # too big for a float
    st.floats(allow_nan=False),  # infinities too: what a 1e999 in JSON becomes
    st.text(max_size=4),
    st.sampled_from(["\ud800", "a\udfffb"]),  # lone surrogates, which JSON can carry
)
_json_values = st.recursive(
    _json_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(raw=_json_values, kind=st.sampled_from(["Value", "Struct", "ListValue"]))
def test_json_messages_built_fast_are_from_dicts(raw: Any, kind: str) -> None:
    cls = getattr(pb, kind)
    if kind == "Struct":
        raw = raw if isinstance(raw, dict) else {"k": raw}
    elif kind == "ListValue":
        raw = raw if isinstance(raw, list) else [raw]
    fast = codec._fast_json_message(cls, raw)
    try:
        expected = cls.from_dict(raw)
    except (ValueError, TypeError, OverflowError, pydantic.ValidationError):
        assert fast is None  # what from_dict refuses is left to it, for its error
        return
    if fast is not None:
        assert fast == expected
        assert bytes(fast) == bytes(expected)
        assert codec.to_json_dict(fast, with_type=True) == codec.to_json_dict(
            expected, with_type=True
        )


def test_route_metadata_is_built_fast() -> None:
    """The fast path is taken for what the translator writes (not only refused)."""
    raw = {"aether.io/route": {"httproute": "ns/r", "rule": 0, "match": 1, "x": [True, None]}}
    fast = codec._fast_json_message(pb.Struct, raw)
    assert fast is not None and fast == pb.Struct.from_dict(raw)
