"""``support.walk.instances`` reads only the fields that can lead to the type it looks for:
it must find exactly what reading every field finds, in the same order, with the same
paths, wherever the message hides (route matchers, inside ``Any``s, map values)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import betterproto2
import pytest
from conftest import FIXTURES, REPO_ROOT, as_records, scenario_params, translate_scenario
from conftest import valid_scenarios as _valid
from envoy_data_plane.envoy.config.cluster.v3 import Cluster
from envoy_data_plane.envoy.config.core.v3 import Metadata, TransportSocket
from envoy_data_plane.envoy.config.route.v3 import CorsPolicy, Route, RouteMatch
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import (
    CertificateValidationContext,
    CommonTlsContext,
    SubjectAltNameMatcher,
    SubjectAltNameMatcherSanType,
    UpstreamTlsContext,
)
from envoy_data_plane.envoy.type.matcher.v3 import RegexMatcher, StringMatcher
from envoy_data_plane.google.protobuf import Any as PbAny
from envoy_data_plane.google.protobuf import Struct
from verifier.rules.support import regex as rx
from verifier.rules.support import walk

from verifier.xds import records
from verifier.xds.codec import pack_any, to_json_dict, unpack_any
from verifier.xds.snapshot import Snapshot


def _every(msg: betterproto2.Message, path: str) -> Iterator[tuple[str, betterproto2.Message]]:
    """Every nested message, reading every field (the walk before it learnt to skip)."""
    yield path, msg
    for f in dataclasses.fields(msg):  # type: ignore[arg-type]
        value = getattr(msg, f.name, None)
        if isinstance(value, list):
            named = f.name == "virtual_hosts"
            items = [(item.name if named else i, item) for i, item in enumerate(value)]
        elif isinstance(value, dict):
            items = list(value.items())
        else:
            yield from _inner(value, f"{path}.{f.name}")
            continue
        for key, item in items:
            yield from _inner(item, f"{path}.{f.name}[{key}]")


def _inner(value: object, path: str) -> Iterator[tuple[str, betterproto2.Message]]:
    if isinstance(value, PbAny):
        if value.type_url:
            yield from _every(unpack_any(value), path)
    elif isinstance(value, betterproto2.Message):
        yield from _every(value, path)


def _same_as_reading_everything(snap: Snapshot) -> list[tuple[str, RegexMatcher]]:
    found = rx.regexes(snap)
    expected = [
        (path, msg)
        for root, resource in walk.resources(snap)
        for path, msg in _every(resource, root)
        if isinstance(msg, RegexMatcher)
    ]
    assert found == expected  # messages unpacked from an Any are equal, not the same
    return found


@pytest.mark.parametrize("path", scenario_params(_valid()))
def test_finds_what_reading_every_field_finds(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    _same_as_reading_everything(translate_scenario(path))


def _regex(pattern: str) -> StringMatcher:
    return StringMatcher(safe_regex=RegexMatcher(regex=pattern))


def test_finds_regexes_inside_anys_and_maps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    snap = translate_scenario(FIXTURES / "httproute-regex-path-matching")
    route = next(rc for rc in snap.routes if rc.virtual_hosts).virtual_hosts[0].routes[0]
    cors = CorsPolicy(allow_origin_string_match=[_regex("cors")])
    route.typed_per_filter_config = {"envoy.filters.http.cors": pack_any(cors)}
    route.metadata = Metadata(
        filter_metadata={"x": Struct()},
        typed_filter_metadata={"y": pack_any(RouteMatch(safe_regex=RegexMatcher(regex="meta")))},
    )
    san = SubjectAltNameMatcher(san_type=SubjectAltNameMatcherSanType.DNS, matcher=_regex("san"))
    tls = UpstreamTlsContext(
        common_tls_context=CommonTlsContext(
            validation_context=CertificateValidationContext(match_typed_subject_alt_names=[san])
        )
    )
    socket = TransportSocket(name="envoy.transport_sockets.tls", typed_config=pack_any(tls))
    cluster = Cluster(name="tls", transport_socket=socket)
    snap = dataclasses.replace(snap, clusters=(*snap.clusters, cluster))

    found = {m.regex: p for p, m in _same_as_reading_everything(snap)}

    served = next(rc for rc in snap.routes if rc.virtual_hosts)
    rc, vh = served.name, served.virtual_hosts[0].name
    at = f"routes[{rc}].virtual_hosts[{vh}].routes[0]"
    assert found["cors"] == (
        f"{at}.typed_per_filter_config[envoy.filters.http.cors]"
        ".allow_origin_string_match[0].safe_regex"
    )
    assert found["meta"] == f"{at}.metadata.typed_filter_metadata[y].safe_regex"
    assert found["san"] == (
        "clusters[tls].transport_socket.typed_config.common_tls_context"
        ".validation_context.match_typed_subject_alt_names[0].matcher.safe_regex"
    )


def test_an_empty_regex_is_found() -> None:
    """An all-default message is falsy in betterproto2; it is still there."""
    route = Route(match=RouteMatch(safe_regex=RegexMatcher()))
    found = walk.instances(route, "r", "envoy.type.matcher.v3.RegexMatcher")
    assert found == [("r.match.safe_regex", RegexMatcher())]


@pytest.mark.parametrize("path", scenario_params(_valid()))
def test_records_are_walked_as_messages_are(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``check --xds`` reads records: the walk finds the same matchers at the same
    paths in them, Anys and maps included."""
    monkeypatch.chdir(REPO_ROOT)
    snap = translate_scenario(path)
    read = as_records(snap)
    for target in ("envoy.type.matcher.v3.RegexMatcher", "envoy.type.matcher.v3.StringMatcher"):
        want = [
            (p, to_json_dict(m))
            for root, r in walk.resources(snap)
            for p, m in walk.instances(r, root, target)
        ]
        got = [
            (p, records.to_json(m))
            for root, r in walk.resources(read)
            for p, m in walk.instances(r, root, target)
        ]
        assert got == want
