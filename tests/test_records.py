"""The records decoder reads every xDS exactly as the message decoder does.

``verifier.xds.records`` decodes proto-JSON into plain records without envoy-data-plane;
the Envoy model and the rules are to read them in place of messages, so a record must
hold, field by field, the value the message holds (enums as their numbers, an Any's
payload decoded, a Struct as its JSON). Proved here on every fixture's xDS, its
foreign re-encoding (Envoy Gateway's and Istio's ways of writing the same routes),
camelCase proto-JSON, every mutant the mutation engine makes of every fixture, hostile
values and random damage: each resource decodes to an equal record with the same
notes, or the records decoder declines it (and the message decoder decides).
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import re
from collections.abc import Iterator
from typing import Any

import betterproto2
import pytest
from conftest import FIXTURES
from envoy_data_plane.google import protobuf as pb
from foreign import reencode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import verifier.check  # noqa: F401  (every message module check imports)
from verifier.gatewayapi.resources import load_resources
from verifier.xds import codec, records, schema
from verifier.xds.layout import XdsLoadError
from verifier.xds.snapshot import Snapshot, load_path

SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "xds.routes.golden.json").is_file())


def differences(msg: Any, rec: Any, path: str = "$") -> list[str]:
    """Where a record does not hold what the message holds (empty: the same)."""
    if msg is None or rec is None:
        return [] if msg is None and rec is None else [f"{path}: {msg!r} vs {rec!r}"]
    if isinstance(msg, pb.Any):
        if not isinstance(rec, records.AnyRecord) or rec.type_url != msg.type_url:
            return [f"{path}: Any {msg.type_url} vs {rec!r}"]
        return differences(codec.unpack_any(msg), rec.value, path + "<any>")
    if isinstance(msg, pb.Struct | pb.Value | pb.ListValue):
        same = isinstance(rec, records.JsonRecord) and rec._pb_name == _name(type(msg))
        if same and codec._message_to_json(msg) == rec.json:
            return []
        return [f"{path}: {codec._message_to_json(msg)!r} vs {rec!r}"]
    if isinstance(msg, betterproto2.Message):
        if not isinstance(rec, records.Record) or rec._pb_name != _name(type(msg)):
            return [f"{path}: {type(msg).__name__} vs {type(rec).__name__}"]
        fields = codec._table(type(msg))[0]
        if rec._pb_fields != tuple(f.attr for f in fields):
            return [f"{path}: fields {rec._pb_fields}"]
        out: list[str] = []
        for f in fields:
            out += differences(getattr(msg, f.attr), getattr(rec, f.attr), f"{path}.{f.attr}")
        return out
    if isinstance(msg, list):
        if not isinstance(rec, list | tuple) or len(rec) != len(msg):
            return [f"{path}: {len(msg)} items vs {rec!r}"]
        return [
            d
            for i, (m, r) in enumerate(zip(msg, rec, strict=True))
            for d in differences(m, r, f"{path}[{i}]")
        ]
    if isinstance(msg, dict):
        if not hasattr(rec, "keys") or list(rec.keys()) != list(msg.keys()):
            return [f"{path}: keys {list(msg)} vs {rec!r}"]
        return [d for k in msg for d in differences(msg[k], rec[k], f"{path}[{k!r}]")]
    if isinstance(msg, betterproto2.Enum):
        ok = type(rec) is int and rec == int(msg)
        return [] if ok else [f"{path}: {msg!r} vs {rec!r}"]
    if type(msg) is not type(rec):
        return [f"{path}: {type(msg).__name__} {msg!r} vs {type(rec).__name__} {rec!r}"]
    if isinstance(msg, float) and math.isnan(msg):
        return [] if math.isnan(rec) else [f"{path}: nan vs {rec!r}"]
    if isinstance(msg, datetime.datetime):
        return [] if (msg, msg.tzinfo) == (rec, rec.tzinfo) else [f"{path}: {msg} vs {rec}"]
    return [] if msg == rec else [f"{path}: {msg!r} vs {rec!r}"]


def _name(cls: type) -> str:
    return codec.type_url_of(cls).rsplit("/", 1)[-1]


def both(name: str, doc: Any) -> tuple[Any, list[Any], Any, list[Any]] | None:
    """(message, notes, record, notes), or None when the records decoder declines."""
    cls = codec.ensure_type(name)
    assert cls is not None
    try:
        msg, notes = codec.from_json_dict(cls, copy.deepcopy(doc))
    except XdsLoadError:
        msg, notes = None, []
    try:
        rec, rnotes = records.decode(name, doc)
    except records.Decline:
        return None
    except XdsLoadError:
        assert msg is None, "the records decoder refused what the message decoder read"
        return None
    assert msg is not None, f"records decoded what the message decoder refused: {rec!r}"
    return msg, notes, rec, rnotes


def assert_same(name: str, doc: Any, *, must_decode: bool = True) -> bool:
    found = both(name, doc)
    if found is None:
        assert not must_decode, f"declined a valid {name}"
        return False
    msg, notes, rec, rnotes = found
    assert differences(msg, rec) == []
    assert rnotes == notes
    assert records.to_json(rec) == codec.to_json_dict(msg)
    return True


def _all(snap: Snapshot) -> tuple[Any, ...]:
    return (*snap.clusters, *snap.endpoints, *snap.listeners, *snap.routes, *snap.secrets)


def resources(snap: Snapshot, skip: Snapshot | None = None) -> Iterator[tuple[str, Any]]:
    shared = {id(m) for m in _all(skip)} if skip is not None else set()
    for msg in _all(snap):
        if id(msg) not in shared:
            yield _name(type(msg)), codec.to_json_dict(msg)


_MAPS = {"typed_per_filter_config", "filter_metadata", "typed_filter_metadata", "fields"}


def _camel_key(key: str, doc: dict[str, Any]) -> str:
    if key.startswith("@") or "_" not in key:
        return key
    return re.sub(r"_(.)", lambda m: m.group(1).upper(), key)


def _camel_safe(doc: Any) -> Any:
    """camelCase keys everywhere but inside maps, whose keys are data."""
    if isinstance(doc, list):
        return [_camel_safe(x) for x in doc]
    if not isinstance(doc, dict):
        return doc
    out = {}
    for k, v in doc.items():
        if k in _MAPS and isinstance(v, dict):
            out[_camel_key(k, doc)] = {mk: _camel_safe(mv) for mk, mv in v.items()}
        else:
            out[_camel_key(k, doc)] = _camel_safe(v)
    return out


def test_the_schema_is_the_installed_envoy_data_plane() -> None:
    """envoy_schema.json is what ``python -m verifier.xds.schema`` writes now."""
    assert schema.SCHEMA_PATH.read_text() == schema.render(), (
        "stale: run python -m verifier.xds.schema"
    )


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_fixture_decodes_to_the_same_values(name: str) -> None:
    snap, _ = load_path(FIXTURES / name)
    res = load_resources([str(FIXTURES / "base"), str(FIXTURES / name)])
    count = 0
    for source in (snap, reencode(snap, res)):
        for type_name, doc in resources(source):
            assert_same(type_name, doc)
            assert_same(type_name, _camel_safe(doc))
            count += 1
    assert count > 0


def test_every_mutant_decodes_to_the_same_values() -> None:
    from verifier.mutate.catalog import mutants

    decoded = declined = 0
    for name in SCENARIOS:
        snap, _ = load_path(FIXTURES / name)
        for mutant in mutants(snap):  # the resources a mutant changed (they share the rest)
            for type_name, doc in resources(mutant.snapshot, skip=snap):
                if assert_same(type_name, doc, must_decode=False):
                    decoded += 1
                else:
                    declined += 1
    assert decoded > 1000
    assert declined < decoded / 100, (declined, decoded)


def test_a_difference_is_found() -> None:
    """The comparison is not vacuous: a changed value, a dropped route, an enum off by
    one and a payload of another type are each reported."""
    snap, _ = load_path(FIXTURES / "httproute-cors")
    msg = next(r for r in snap.routes if r.virtual_hosts and r.virtual_hosts[0].routes)
    lmsg = next(x for x in snap.listeners if x.filter_chains)
    rc, listener = codec.to_json_dict(msg), codec.to_json_dict(lmsg)
    rec, _ = records.decode("envoy.config.route.v3.RouteConfiguration", rc)
    assert differences(msg, rec) == []
    rec.virtual_hosts[0].routes[0].match.__dict__["prefix"] = "/elsewhere"
    assert differences(msg, rec)
    rec, _ = records.decode("envoy.config.route.v3.RouteConfiguration", rc)
    rec.virtual_hosts[0].__dict__["routes"] = rec.virtual_hosts[0].routes[1:]
    assert differences(msg, rec)
    lrec, _ = records.decode("envoy.config.listener.v3.Listener", listener)
    assert differences(lmsg, lrec) == []
    chain = lrec.filter_chains[0]
    hcm = chain.filters[0].typed_config.value
    hcm.__dict__["codec_type"] = hcm.codec_type + 1
    assert differences(lmsg, lrec)
    hcm.__dict__["codec_type"] -= 1
    chain.filters[0].typed_config.__dict__["value"] = hcm.http_filters[0].typed_config.value
    assert differences(lmsg, lrec)


HOSTILE = {
    "port out of range": (
        "envoy.config.listener.v3.Listener",
        "address.socket_address.port_value",
        2**32,
    ),
    "negative port": ("envoy.config.listener.v3.Listener", "address.socket_address.port_value", -1),
    "lone surrogate": ("envoy.config.listener.v3.Listener", "stat_prefix", "\ud800"),
    "timeout not a duration": ("envoy.config.cluster.v3.Cluster", "connect_timeout", "soon"),
    "unknown enum name": ("envoy.config.cluster.v3.Cluster", "lb_policy", "NOT_A_POLICY"),
    "unknown enum number": ("envoy.config.cluster.v3.Cluster", "lb_policy", 4242),
    "enum number": ("envoy.config.cluster.v3.Cluster", "lb_policy", 1),
    "integral float": (
        "envoy.config.listener.v3.Listener",
        "address.socket_address.port_value",
        8080.0,
    ),
    "number as text": (
        "envoy.config.listener.v3.Listener",
        "address.socket_address.port_value",
        "8080",
    ),
    "unknown field": ("envoy.config.cluster.v3.Cluster", "no_such_field", 1),
    "null": ("envoy.config.cluster.v3.Cluster", "connect_timeout", None),
    "list for a message": ("envoy.config.cluster.v3.Cluster", "load_assignment", []),
    "object for a list": ("envoy.config.listener.v3.Listener", "filter_chains", {}),
    "wrapper as an object": (
        "envoy.config.cluster.v3.Cluster",
        "per_connection_buffer_limit_bytes",
        {"value": 7},
    ),
    "duration as an object": (
        "envoy.config.cluster.v3.Cluster",
        "connect_timeout",
        {"seconds": 2, "nanos": 5000},
    ),
    "Any without @type": (
        "envoy.config.listener.v3.Listener",
        "filter_chains.0.filters.0.typed_config",
        {"a": 1},
    ),
    "Any of an unknown type": (
        "envoy.config.listener.v3.Listener",
        "filter_chains.0.filters.0.typed_config",
        {"@type": "type.googleapis.com/no.Such"},
    ),
    "Struct of big numbers": (
        "envoy.config.cluster.v3.Cluster",
        "metadata.filter_metadata.x",
        {"n": 10**400},
    ),
    "Struct of ints": (
        "envoy.config.cluster.v3.Cluster",
        "metadata.filter_metadata.x",
        {"n": 3, "l": [1, None, "a", {"b": True}]},
    ),
}


def _set(doc: Any, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        doc = doc[int(part)] if isinstance(doc, list) else doc.setdefault(part, {})
    doc[int(last) if isinstance(doc, list) else last] = value


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_values_are_read_alike_or_declined(case: str) -> None:
    type_name, path, value = HOSTILE[case]
    snap, _ = load_path(FIXTURES / "httproute-exact-path-matching")
    docs = dict(resources(snap))
    doc = json.loads(json.dumps(docs[type_name]))
    _set(doc, path, value)
    assert_same(type_name, doc, must_decode=False)


def _leaves(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, (*path, i))


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
_DAMAGE_DOCS = [
    (t, d)
    for scenario in ("httproute-cors", "httproute-request-mirror", "gateway-https-listener")
    for t, d in resources(load_path(FIXTURES / scenario)[0])
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_resources_are_read_alike_or_declined(data: st.DataObject) -> None:
    type_name, doc = data.draw(st.sampled_from(_DAMAGE_DOCS))
    doc = json.loads(json.dumps(doc))
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _leaves(doc) if p]
        if not paths:
            break
        where = data.draw(st.sampled_from(paths))
        parent = doc
        for part in where[:-1]:
            parent = parent[part]
        if data.draw(st.booleans()):
            parent[where[-1]] = data.draw(_json)
        elif isinstance(parent, dict):  # a key respelled, or unknown
            value = parent.pop(where[-1])
            key = data.draw(st.sampled_from([_camel_key(str(where[-1]), {}), str(where[-1]) + "x"]))
            parent[key] = value
    assert_same(type_name, doc, must_decode=False)


def test_the_model_enums_are_envoy_data_plane_s() -> None:
    import importlib
    import inspect

    from verifier.xds import enums

    modules = [importlib.import_module(m) for m in schema.MODULES]
    for name, ours in inspect.getmembers(enums, inspect.isclass):
        if ours.__module__ != enums.__name__:
            continue
        theirs = [getattr(m, name) for m in modules if hasattr(m, name)]
        assert len(theirs) == 1, name
        assert {m.name: int(m) for m in ours} == {m.name: int(m.value) for m in theirs[0]}


def test_records_hold_messages_in_the_fields_messages_do() -> None:
    """``read.fields`` (what ``support.walk`` descends into, and in which order) is the
    same for a record as for a message of every type the records decoder knows."""
    import importlib

    from verifier.xds import read

    compared = 0
    for module in schema.MODULES:
        importlib.import_module(module)
    for url, cls in list(codec.default_message_pool.url_to_type.items()):
        name = url.rsplit("/", 1)[-1]
        if cls.__module__ not in schema.MODULES or name in (
            "google.protobuf.Any",
            "google.protobuf.Struct",
            "google.protobuf.Value",
            "google.protobuf.ListValue",
        ):
            continue
        assert read.fields(read.empty(name)) == read.fields(codec.new(cls)), name
        compared += 1
    assert compared > 400
