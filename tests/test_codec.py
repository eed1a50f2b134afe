"""Tests for verifier.xds.codec: validator cache, type loading, and proto-JSON."""

from __future__ import annotations

import datetime
import inspect
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import betterproto2
import pydantic
import pydantic_core
import pytest
from envoy_data_plane.envoy.admin.v3 import ClustersConfigDumpDynamicCluster
from envoy_data_plane.envoy.config.cluster.v3 import (
    Cluster,
    ClusterDiscoveryType,
    ClusterRingHashLbConfig,
    OutlierDetection,
)
from envoy_data_plane.envoy.config.core.v3 import (
    Address,
    Http1ProtocolOptions,
    Metadata,
    SocketAddress,
)
from envoy_data_plane.envoy.config.endpoint.v3 import (
    ClusterLoadAssignment,
    Endpoint,
    LbEndpoint,
    LocalityLbEndpoints,
)
from envoy_data_plane.envoy.config.listener.v3 import Filter, FilterChain, Listener
from envoy_data_plane.envoy.config.route.v3 import (
    Route,
    RouteAction,
    RouteConfiguration,
    RouteMatch,
    VirtualHost,
)
from envoy_data_plane.envoy.extensions.filters.http.router.v3 import Router
from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
    HttpConnectionManager,
    HttpFilter,
)
from envoy_data_plane.google.protobuf import Any as AnyMsg
from envoy_data_plane.google.protobuf import Duration, Struct
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic._internal._mock_val_ser import MockCoreSchema

from verifier.xds import codec
from verifier.xds.codec import (
    Skipped,
    XdsLoadError,
    ensure_type,
    from_json_dict,
    pack_any,
    preload_types,
    to_json_dict,
    unpack_any,
)

HCM_URL = (
    "type.googleapis.com/"
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)


def _route(i: int) -> Route:
    return Route(
        name=f"r{i}",
        match=RouteMatch(prefix=f"/p{i}"),
        route=RouteAction(cluster=f"c{i}", timeout=datetime.timedelta(seconds=i % 7)),
        metadata=Metadata(filter_metadata={"verifier": Struct.from_dict({"i": i})}),
    )


def _route_config(n: int) -> RouteConfiguration:
    vhost = VirtualHost(name="vh", domains=["*"], routes=[_route(i) for i in range(n)])
    return RouteConfiguration(name="rc", virtual_hosts=[vhost])


def _cluster() -> Cluster:
    addr = Address(socket_address=SocketAddress(address="web.example.com", port_value=80))
    return Cluster(
        name="web",
        type=ClusterDiscoveryType.STRICT_DNS,
        connect_timeout=datetime.timedelta(seconds=2, milliseconds=500),
        outlier_detection=OutlierDetection(consecutive_5xx=5, interval=datetime.timedelta(0)),
        ring_hash_lb_config=ClusterRingHashLbConfig(minimum_ring_size=1024),
        load_assignment=ClusterLoadAssignment(
            cluster_name="web",
            endpoints=[
                LocalityLbEndpoints(lb_endpoints=[LbEndpoint(endpoint=Endpoint(address=addr))])
            ],
        ),
    )


def _listener() -> Listener:
    hcm = HttpConnectionManager(
        stat_prefix="http",
        route_config=_route_config(2),
        http_protocol_options=Http1ProtocolOptions(accept_http_10=True),
        http_filters=[
            HttpFilter(name="envoy.filters.http.router", typed_config=pack_any(Router()))
        ],
    )
    chain = FilterChain(filters=[Filter(name="hcm", typed_config=pack_any(hcm))])
    addr = Address(socket_address=SocketAddress(address="0.0.0.0", port_value=8080))
    return Listener(name="http", address=addr, filter_chains=[chain])


def _submessages(msg: betterproto2.Message) -> Iterator[betterproto2.Message]:
    """Every message reachable from ``msg``, including inside packed Anys."""
    yield msg
    if isinstance(msg, AnyMsg) and msg.type_url:
        yield from _submessages(unpack_any(msg))
    for name in msg._betterproto.meta_by_field_name:
        value = getattr(msg, name)
        values = value.values() if isinstance(value, dict) else value
        for item in values if isinstance(values, list | type({}.values())) else [value]:
            if isinstance(item, betterproto2.Message):
                yield from _submessages(item)


# --- validator cache -------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(codec.PATCHES))
def test_patches_are_installed_once(name: str) -> None:
    patched = inspect.getattr_static(betterproto2.Message, name)
    original = codec.original(name)
    codec.install_patches()
    codec.install_patches()
    assert inspect.getattr_static(betterproto2.Message, name) is patched
    assert codec.original(name) is original
    assert original is not patched and original is not codec.PATCHES[name]
    assert original.__qualname__ == f"Message.{name}"
    assert original.__module__ == "betterproto2"


def _break_port(m: Any) -> None:
    m.socket_address.port_value = -1


def _break_name(m: Any) -> None:
    m.name = 5


def _break_oneof(m: Any) -> None:
    m.virtual_hosts[0].routes[0].match.path = "/both"


def _break_timeout(m: Any) -> None:
    m.connect_timeout = "soon"


def _break_chains(m: Any) -> None:
    m.filter_chains = ["not a chain"]


@pytest.mark.parametrize(
    ("make", "target", "breaker"),
    [
        (lambda: Address(socket_address=SocketAddress(address="a")), "socket_address", _break_port),
        (_listener, "", _break_name),
        (lambda: _route_config(1), "virtual_hosts[0].routes[0].match", _break_oneof),
        (_cluster, "", _break_timeout),
        (_listener, "", _break_chains),
    ],
)
def test_patched_rejects_what_original_rejects(
    make: Callable[[], Any], target: str, breaker: Callable[[Any], None]
) -> None:
    msg = make()
    breaker(msg)
    victim: Any = msg
    for step in filter(None, target.replace("[0]", ".0").split(".")):
        victim = victim[int(step)] if step.isdigit() else getattr(victim, step)
    with pytest.raises(Exception) as original:
        _original_validate(victim)
    with pytest.raises(Exception) as patched:
        victim._validate()
    assert type(patched.value) is type(original.value)
    assert isinstance(patched.value, pydantic.ValidationError | ValueError)
    if isinstance(original.value, pydantic.ValidationError):
        assert isinstance(patched.value, pydantic.ValidationError)
        flags: dict[str, bool] = {"include_url": False, "include_context": False}
        assert patched.value.errors(**flags) == original.value.errors(**flags)


def _original_validate(msg: betterproto2.Message) -> None:
    """betterproto2's own ``_validate``, which needs the class's pydantic schema built:
    envoy-data-plane's are deferred (verifier._deferred), and in a test run alone no
    earlier test has built them."""
    if isinstance(type(msg).__pydantic_core_schema__, MockCoreSchema):  # type: ignore[attr-defined]
        pydantic.dataclasses.rebuild_dataclass(type(msg))  # type: ignore[arg-type]
    codec.original("_validate")(msg)


@pytest.mark.parametrize("make", [lambda: _route(3), _cluster, _listener, lambda: _route_config(3)])
def test_patched_accepts_what_original_accepts(make: Callable[[], betterproto2.Message]) -> None:
    checked = 0
    for sub in _submessages(make()):
        if sub._is_pydantic():
            _original_validate(sub)
            sub._validate()
            checked += 1
    assert checked > 5


def test_validator_constructions_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    rc = _route_config(1000)
    bytes(rc), rc.to_dict(), to_json_dict(rc)  # warm up type hints and pydantic rebuilds
    built = 0
    real = pydantic_core.SchemaValidator

    def counting(*args: Any, **kwargs: Any) -> pydantic_core.SchemaValidator:
        nonlocal built
        built += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(pydantic_core, "SchemaValidator", counting)
    monkeypatch.setattr(codec, "_VALIDATORS", {})

    timings: dict[str, float] = {}
    for label, action in [
        ("bytes", lambda: bytes(rc)),
        ("to_dict", lambda: rc.to_dict()),
        ("to_json_dict", lambda: to_json_dict(rc)),
        ("parse", lambda: RouteConfiguration.parse(bytes(rc))),
    ]:
        start = time.perf_counter()
        action()
        timings[f"cached {label}"] = time.perf_counter() - start
    cached_builds = built
    # RouteConfiguration, VirtualHost, Route, RouteMatch, RouteAction, Metadata, Struct, Value
    assert cached_builds <= 12

    built = 0
    monkeypatch.setattr(betterproto2.Message, "_validate", codec.original("_validate"))
    for label, action in [("bytes", lambda: bytes(rc)), ("to_dict", lambda: rc.to_dict())]:
        start = time.perf_counter()
        action()
        timings[f"original {label}"] = time.perf_counter() - start
    assert built > 5000  # one per message per call: that is what the cache removes
    print(
        f"\n1,000-route RouteConfiguration, SchemaValidators built: cached {cached_builds}, "
        f"original {built}"
    )
    for label, seconds in timings.items():
        print(f"  {label:22} {seconds * 1000:8.1f} ms")


# --- types and Any ------------------------------------------------------------------------


def test_ensure_type_maps_url_to_module_and_class() -> None:
    assert ensure_type(HCM_URL) is HttpConnectionManager
    assert ensure_type("example.com/envoy.config.cluster.v3.Cluster") is Cluster
    nested = "type.googleapis.com/envoy.admin.v3.ClustersConfigDump.DynamicCluster"
    assert ensure_type(nested) is ClustersConfigDumpDynamicCluster
    for bad in [
        "type.googleapis.com/acme.widgets.v1.Widget",
        "type.googleapis.com/envoy.config.cluster.v3.NoSuchThing",
        "type.googleapis.com/",
        "type.googleapis.com/Foo",
        "type.googleapis.com/os.path.Join",
        "",
    ]:
        assert ensure_type(bad) is None


def test_ensure_type_imports_unimported_modules() -> None:
    """In a fresh interpreter, an Any of a never-imported type still loads."""
    script = """
import json, sys
from envoy_data_plane.message_pool import default_message_pool as pool
url = "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer"
assert url not in pool.url_to_type
assert "envoy_data_plane.envoy.extensions.filters.http.buffer.v3" not in sys.modules
from verifier.xds.codec import from_json_dict, preload_types, to_json_dict
from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
    HttpFilter)
doc = {"name": "buf", "typed_config": {"@type": url, "max_request_bytes": 1024}}
assert preload_types(doc) == set()
assert url in pool.url_to_type
msg, notes = from_json_dict(HttpFilter, doc)
assert notes == [] and to_json_dict(msg) == doc, (notes, to_json_dict(msg))
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_pack_and_unpack_any() -> None:
    cluster = _cluster()
    packed = pack_any(cluster)
    assert packed.type_url == "type.googleapis.com/envoy.config.cluster.v3.Cluster"
    assert unpack_any(packed) == cluster
    with pytest.raises(XdsLoadError, match="unknown type"):
        unpack_any(AnyMsg(type_url="type.googleapis.com/acme.Nope", value=b""))
    with pytest.raises(XdsLoadError):
        unpack_any(AnyMsg())


# --- to JSON ----------------------------------------------------------------------------------


def test_to_json_is_envoy_snake_case() -> None:
    doc = to_json_dict(_cluster(), with_type=True)
    assert doc == {
        "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
        "name": "web",
        "type": "STRICT_DNS",
        "connect_timeout": "2.500s",
        # betterproto2 would write consecutive_5_xx / consecutive5Xx, which Envoy rejects
        "outlier_detection": {"consecutive_5xx": 5, "interval": "0s"},
        "ring_hash_lb_config": {"minimum_ring_size": "1024"},  # UInt64Value: a string
        "load_assignment": {
            "cluster_name": "web",
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {
                                    "socket_address": {
                                        "address": "web.example.com",
                                        "port_value": 80,
                                    }
                                }
                            }
                        }
                    ]
                }
            ],
        },
    }


def test_to_json_nested_any_carries_type() -> None:
    doc = to_json_dict(_listener())
    hcm = doc["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm["@type"] == HCM_URL
    assert hcm["http_protocol_options"] == {"accept_http_10": True}
    assert hcm["http_filters"][0]["typed_config"] == {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
    }
    route = hcm["route_config"]["virtual_hosts"][0]["routes"][1]
    assert route["metadata"] == {"filter_metadata": {"verifier": {"i": 1}}}
    assert route["route"]["timeout"] == "1s"


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (datetime.timedelta(0), "0s"),
        (datetime.timedelta(seconds=15), "15s"),
        (datetime.timedelta(milliseconds=250), "0.250s"),
        (datetime.timedelta(seconds=1, milliseconds=1), "1.001s"),
        (datetime.timedelta(microseconds=1500), "0.001500s"),
        (datetime.timedelta(days=2), "172800s"),
        (-datetime.timedelta(seconds=1, milliseconds=500), "-1.500s"),
    ],
)
def test_duration_json(delta: datetime.timedelta, text: str) -> None:
    route = RouteAction(cluster="c", timeout=delta)
    assert to_json_dict(route)["timeout"] == text
    back, notes = from_json_dict(RouteAction, {"cluster": "c", "timeout": text})
    assert notes == [] and back.timeout == delta


def test_well_known_types_inside_any_use_value_form() -> None:
    packed = pack_any(Duration(seconds=3))
    assert to_json_dict(packed) == {
        "@type": "type.googleapis.com/google.protobuf.Duration",
        "value": "3s",
    }
    back, notes = from_json_dict(AnyMsg, to_json_dict(packed))
    assert notes == [] and unpack_any(back) == Duration(seconds=3)
    struct = Struct.from_dict({"a": [1, 2.5, None, True, "x", {"b": {}}]})
    doc = to_json_dict(struct, with_type=True)
    assert doc["value"] == {"a": [1, 2.5, None, True, "x", {"b": {}}]}
    assert from_json_dict(Struct, doc)[0] == struct


# --- from JSON --------------------------------------------------------------------------------


def test_from_json_round_trips() -> None:
    for msg in [_cluster(), _listener(), _route_config(5)]:
        doc = to_json_dict(msg, with_type=True)
        back, notes = from_json_dict(type(msg), doc)
        assert notes == []
        assert to_json_dict(back, with_type=True) == doc


def _camel(doc: Any) -> Any:
    """Proto-JSON camelCase keys, leaving map keys (filter_metadata) alone."""
    if isinstance(doc, list):
        return [_camel(v) for v in doc]
    if not isinstance(doc, dict):
        return doc
    out = {}
    for key, value in doc.items():
        head, *rest = key.split("_")
        camel = head + "".join(p[:1].upper() + p[1:] for p in rest)
        out[camel] = value if key == "filter_metadata" else _camel(value)
    return out


def test_camel_case_equals_snake_case() -> None:
    for msg in [_cluster(), _listener()]:
        snake = to_json_dict(msg)
        camel = _camel(snake)
        assert camel != snake
        assert "consecutive5xx" in json.dumps(camel) or "acceptHttp10" in json.dumps(camel)
        assert from_json_dict(type(msg), camel) == from_json_dict(type(msg), snake)
        # betterproto2's own (differently mangled) camelCase output loads the same too
        own = msg.to_dict()
        assert from_json_dict(type(msg), own)[0] == from_json_dict(type(msg), snake)[0]


def test_unparseable_parts_are_dropped_with_notes() -> None:
    doc = {
        "name": "web",
        "connectTimeout": "soon",
        "outlier_detection": {"consecutive_5xx": 5, "consecutive_banana": 1},
        "per_connection_buffer_limit_bytes": -1,
        "lb_policy": "NOT_A_POLICY",
        "type": "STATIC",
        "cluster_type": {"name": "custom"},
        "load_assignment": {
            "cluster_name": "web",
            "endpoints": [
                {
                    "lb_endpoints": [
                        {"endpoint": {"address": {"socket_address": {"port_value": 2**32}}}}
                    ]
                }
            ],
        },
        "typed_extension_protocol_options": {
            "empty": {},
            "alien": {"@type": "type.googleapis.com/acme.Alien", "x": 1},
        },
        "metadata": {"filter_metadata": {"ok": {"k": "v"}, "bad": 5}},
    }
    msg, notes = from_json_dict(Cluster, doc, "in.json:$")
    reasons = {n.path: n.reason for n in notes}
    assert all(isinstance(n, Skipped) for n in notes)
    assert set(reasons) == {
        "in.json:$.connectTimeout",
        "in.json:$.outlier_detection.consecutive_banana",
        "in.json:$.per_connection_buffer_limit_bytes",
        "in.json:$.lb_policy",
        "in.json:$.cluster_type",
        "in.json:$.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value",
        'in.json:$.typed_extension_protocol_options["empty"]',
        'in.json:$.typed_extension_protocol_options["alien"]',
        'in.json:$.metadata.filter_metadata["bad"]',
    }, reasons
    assert "oneof" in reasons["in.json:$.cluster_type"]
    assert "unknown type" in reasons['in.json:$.typed_extension_protocol_options["alien"]']
    assert "without @type" in reasons['in.json:$.typed_extension_protocol_options["empty"]']
    assert msg.name == "web" and msg.type == ClusterDiscoveryType.STATIC
    assert msg.outlier_detection == OutlierDetection(consecutive_5xx=5)
    assert msg.connect_timeout is None and msg.per_connection_buffer_limit_bytes is None
    assert list(msg.metadata.filter_metadata) == ["ok"]
    assert msg.typed_extension_protocol_options == {}


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ([], "expected a JSON object"),
        ("cluster", "expected a JSON object"),
        ({"@type": HCM_URL, "name": "x"}, "is not type.googleapis.com/envoy.config.cluster.v3"),
    ],
)
def test_from_json_rejects_malformed_top_level(data: Any, match: str) -> None:
    with pytest.raises(XdsLoadError, match=match) as info:
        from_json_dict(Cluster, data, "f.json:$")
    assert info.value.path == "f.json:$"


def test_an_enum_number_the_enum_lacks_round_trips_as_a_number() -> None:
    """Open enums keep unknown numbers (Envoy then rejects them in validation);
    writing one back must not crash, and proto3 JSON writes it as the number."""
    doc = to_json_dict(_cluster())
    doc["type"] = 5
    cluster, notes = from_json_dict(Cluster, doc)
    assert not notes
    assert to_json_dict(cluster)["type"] == 5
    assert to_json_dict(_cluster())["type"] == "STRICT_DNS"


def _preload_reference(doc: object, skip: frozenset[str]) -> set[str]:
    """preload_types as it was: every value visited, depth first."""
    unknown: set[str] = set()
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            url = node.get("@type")
            wanted = isinstance(url, str) and url and url.rsplit("/", 1)[-1] not in skip
            if wanted and ensure_type(url) is None:
                unknown.add(url)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return unknown


_URLS = st.sampled_from(
    [
        "type.googleapis.com/envoy.config.route.v3.Route",
        "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
        "type.googleapis.com/acme.v1.Nope",
        "type.googleapis.com/envoy.admin.v3.ClustersConfigDump",
        "nonsense",
        "",
    ]
)
_TYPED_DOCS = st.recursive(
    st.one_of(st.integers(), st.text(max_size=3), st.none(), _URLS),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["@type", "a", "b", "value"]), inner, max_size=4),
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(doc=_TYPED_DOCS, skip=st.sets(st.sampled_from(["envoy.admin.v3.ClustersConfigDump"])))
def test_preload_types_finds_what_the_full_walk_finds(doc: object, skip: set[str]) -> None:
    assert preload_types(doc, skip=frozenset(skip)) == _preload_reference(doc, frozenset(skip))  # type: ignore[arg-type]


def test_readers_share_one_decoded_any_and_editors_get_their_own() -> None:
    """read.unpack decodes an Any's bytes once for every reader (the rules walk each
    listener's HCM again and again); unpack_any, which mutation operators edit, gives
    a fresh message each time, and an Any given other bytes is decoded afresh."""
    from verifier.xds import read

    hcm = HttpConnectionManager(stat_prefix="shared")
    packed = pack_any(hcm)
    first = read.unpack(packed)
    assert read.unpack(AnyMsg(type_url=packed.type_url, value=bytes(packed.value))) is first
    assert first.stat_prefix == "shared"
    edited = unpack_any(packed)
    assert edited is not first and edited is not unpack_any(packed)
    edited.stat_prefix = "edited"
    assert read.unpack(packed).stat_prefix == "shared"
    packed.value = pack_any(edited).value
    assert read.unpack(packed).stat_prefix == "edited"


@pytest.mark.parametrize("number", [-(2**63) - 1, -(2**31) - 1, 2**31, 2**64])
def test_an_enum_number_past_32_bits_is_dropped_with_a_note(number: int) -> None:
    """An enum is an int32 on the wire. Inside an Any (re-encoded as it is read) a number
    past that escaped as a ValueError from the varint encoder (found by the entry-point
    fuzz through ``mutate --xds``: a TLS context's protocol version set to -2**63-1)."""
    raw = {
        "name": "c",
        "transport_socket": {
            "name": "tls",
            "typed_config": {
                "@type": "type.googleapis.com/"
                "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "common_tls_context": {"tls_params": {"tls_minimum_protocol_version": number}},
            },
        },
    }
    msg, notes = from_json_dict(Cluster, raw)
    assert [n.path for n in notes] == [
        "$.transport_socket.typed_config.common_tls_context.tls_params.tls_minimum_protocol_version"
    ]
    assert "32-bit" in str(notes[0])
    assert msg.transport_socket is not None and msg.transport_socket.typed_config is not None


@pytest.mark.parametrize("number", [-(2**31), 2**31 - 1, 7])
def test_an_unknown_enum_number_within_32_bits_is_kept(number: int) -> None:
    """proto3 enums are open: a number the enum does not name is still a value."""
    msg, notes = from_json_dict(Cluster, {"name": "c", "lb_policy": number})
    assert notes == [] and int(msg.lb_policy) == number
