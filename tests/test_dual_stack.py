"""Which listener takes a connection, and what the HCM makes of its request, held to Envoy 1.40.

Envoy binds as Linux does: ``[::]`` with ``ipv4_compat`` takes IPv4 connections to any
local address, without it only IPv6 ones; beside ``0.0.0.0`` on the same port it gets
only IPv6; an IPv4-mapped destination is an IPv4 connection (binding.py). Before
routing, the HCM decides whether a request is internal and what x-forwarded-proto and
:scheme it has (origin.py), and a route's ``grpc`` condition reads the content-type.

One real Envoy, in a network namespace of its own, runs the probe listeners below
beside a fixture's xDS; every probe is sent over IPv4 or IPv6 to a local address, and
the Envoy model must predict exactly what happened, or say that its answer rests on
something it cannot know (then the live answer shows why it cannot). Then `check`
judges another implementation's xDS that binds ``[::]`` as it judges ours.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, REPO_ROOT, rel, translate_scenario
from conftest import load_scenario as load_fixture
from foreign import dual_stack, reencode
from test_model_vs_live import decision_mismatches
from verifier.rules import RULES

from verifier.live import netns
from verifier.live.echo_model import echo_reply
from verifier.live.envoy_process import envoy_available
from verifier.live.harness import EmbeddedHarness
from verifier.live.isolated import with_isolated_harness
from verifier.pipeline import CheckOptions, check_scenario, discover
from verifier.semantics.directory import backend_directory_from
from verifier.semantics.envoy.model import EnvoyModel
from verifier.semantics.request import Outcome, Request, normalize_headers
from verifier.xds.snapshot import Snapshot, dumps, from_config_dump, to_config_dump

SCENARIO = FIXTURES / "httproute-exact-path-matching"
V4, V6, OTHER_V4 = "192.0.2.250", "2001:db8::250", "127.0.0.1"
MAPPED = f"::ffff:{V4}"
TYPES = "type.googleapis.com/envoy"
HCM = f"{TYPES}.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = {
    "name": "envoy.filters.http.router",
    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
}
V1, V2 = "k8s/edge-infra/infra-backend-v1/8080", "k8s/edge-infra/infra-backend-v2/8080"
INTERNAL = {"cidr_ranges": [{"address_prefix": "10.0.0.0", "prefix_len": 8}]}
OURS = {"cidr_ranges": [{"address_prefix": "192.0.2.0", "prefix_len": 24}]}

Json = dict[str, Any]


@pytest.fixture(scope="module", autouse=True)
def _repo_cwd() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO_ROOT)
        yield


def _answer(status: int) -> Json:
    # Not 201 or 3xx: Envoy gives those direct responses a Location.
    return {"match": {"prefix": "/"}, "direct_response": {"status": status}}


def _listener(
    name: str,
    address: str,
    port: int,
    routes: list[Json],
    *,
    compat: bool | None = None,
    hcm: Json | None = None,
    vhost: Json | None = None,
) -> Json:
    sock: Json = {"address": address, "port_value": port}
    if compat is not None:
        sock["ipv4_compat"] = compat
    config = {
        "@type": HCM,
        "stat_prefix": name,
        "route_config": {
            "name": f"probe-{name}",
            "virtual_hosts": [{"name": name, "domains": ["*"], "routes": routes, **(vhost or {})}],
        },
        "http_filters": [ROUTER],
        **(hcm or {}),
    }
    return {
        "@type": f"{TYPES}.config.listener.v3.Listener",
        "name": f"probe-{name}",
        "address": {"socket_address": sock},
        "filter_chains": [{"filters": [{"name": "hcm", "typed_config": config}]}],
    }


INTERNAL_ROUTES = [
    {
        "match": {"prefix": "/", "headers": [{"name": "x-envoy-internal", "present_match": True}]},
        "direct_response": {"status": 231},
    },
    _answer(232),
]
PROBE_LISTENERS = [
    # Binding: which listener, if any, takes a connection to each destination.
    _listener("dual", "::", 9001, [_answer(241)], compat=True),
    _listener("v6-unset", "::", 9002, [_answer(242)]),
    _listener("v6-only", "::", 9003, [_answer(243)], compat=False),
    _listener("wild4", "0.0.0.0", 9004, [_answer(244)]),
    _listener("wild6", "::", 9004, [_answer(245)], compat=True),
    _listener("mapped", MAPPED, 9005, [_answer(246)], compat=True),
    _listener("mapped-wild4", "0.0.0.0", 9005, [_answer(247)]),
    _listener("exact", V4, 9006, [_answer(248)]),
    _listener("exact-dual", "::", 9006, [_answer(249)], compat=True),
    # Origin: internal or external, x-forwarded-proto, :scheme.
    _listener("edge", V4, 9010, INTERNAL_ROUTES, hcm={"use_remote_address": True}),
    _listener(
        "edge-ranges",
        V4,
        9011,
        INTERNAL_ROUTES,
        hcm={"use_remote_address": True, "internal_address_config": OURS},
    ),
    _listener("xff", V4, 9012, INTERNAL_ROUTES, hcm={"internal_address_config": INTERNAL}),
    _listener(
        "xff-hop",
        V4,
        9013,
        INTERNAL_ROUTES,
        hcm={"internal_address_config": INTERNAL, "xff_num_trusted_hops": 1},
    ),
    _listener(
        "tls-external",
        V4,
        9014,
        [_answer(235)],
        hcm={"use_remote_address": True},
        vhost={"require_tls": "EXTERNAL_ONLY"},
    ),
    _listener("tls-all", V4, 9015, [_answer(235)], vhost={"require_tls": "ALL"}),
    _listener(
        "tls-xff",
        V4,
        9016,
        [_answer(235)],
        hcm={"internal_address_config": INTERNAL},
        vhost={"require_tls": "EXTERNAL_ONLY"},
    ),
    _listener(
        "tls-ranges",
        V4,
        9017,
        [_answer(235)],
        hcm={"use_remote_address": True, "internal_address_config": OURS},
        vhost={"require_tls": "EXTERNAL_ONLY"},
    ),
    _listener(
        "redirect", V4, 9018, [{"match": {"prefix": "/"}, "redirect": {"path_redirect": "/moved"}}]
    ),
    # gRPC: the route condition, and Envoy's own reply to a gRPC client.
    _listener(
        "grpc",
        V4,
        9020,
        [
            {"match": {"prefix": "/", "grpc": {}}, "route": {"cluster": V1}},
            {"match": {"prefix": "/"}, "route": {"cluster": V2}},
        ],
    ),
    _listener("grpc-local", V4, 9021, [_answer(404)]),
]


def _probe(address: str, port: int, **headers: str) -> Request:
    pairs = [(k.replace("_", "-"), v) for k, v in headers.items()]
    return Request(
        host="probe.example", port=port, address=address, headers=normalize_headers(pairs)
    )


BINDING = [_probe(a, p) for p in range(9001, 9007) for a in (V4, OTHER_V4, V6, MAPPED)]
# (request, judged: whether the model can know the answer)
ORIGIN: list[tuple[Request, bool]] = [
    (_probe(V4, 9010), True),
    (_probe(V4, 9010, x_envoy_internal="true"), True),
    (_probe(V4, 9011), False),  # internal only if the client's address is in the ranges
    (_probe(V4, 9011, x_forwarded_for="192.0.2.9"), True),
    (_probe(V4, 9012, x_forwarded_for="10.1.2.3"), True),
    (_probe(V4, 9012, x_forwarded_for="10.1.2.3, 10.1.2.4"), True),
    (_probe(V4, 9012, x_forwarded_for="10.1.2.3,"), True),
    (_probe(V4, 9012), True),
    (_probe(V4, 9013, x_forwarded_for="10.1.2.3, 10.9.9.9"), True),
    (_probe(V4, 9014), True),
    (_probe(V4, 9014, x_forwarded_proto="https"), True),
    (_probe(V4, 9015), True),
    (_probe(V4, 9015, x_forwarded_proto="https"), True),
    (_probe(V4, 9016, x_forwarded_for="10.1.2.3"), True),
    (_probe(V4, 9016), True),
    (_probe(V4, 9017), False),
    (_probe(V4, 9018, x_forwarded_proto="https"), True),
    (_probe(V4, 9018, x_forwarded_proto="foo"), True),
    (_probe(V4, 9020, content_type="application/grpc"), True),
    (_probe(V4, 9020, content_type="application/grpc+proto"), True),
    (_probe(V4, 9020, content_type="application/grpc-web"), True),
    (_probe(V4, 9020, content_type="APPLICATION/GRPC"), True),
    (_probe(V4, 9020), True),
    (_probe(V4, 9021, content_type="application/grpc"), False),  # Envoy's reply to gRPC
    (_probe(V4, 9021), True),
]


def _with_probes(snap: Snapshot) -> Snapshot:
    doc = copy.deepcopy(to_config_dump(snap))
    section = next(c for c in doc["configs"] if c["@type"].endswith(".ListenersConfigDump"))
    section["dynamic_listeners"] += [
        {"name": li["name"], "active_state": {"listener": li}} for li in PROBE_LISTENERS
    ]
    out, skipped = from_config_dump(doc, "probes")
    assert not skipped, skipped
    return dataclasses.replace(out, secrets=snap.secrets)


def _model_and_snapshot() -> tuple[Any, EnvoyModel, Snapshot]:
    res, _ = load_fixture(SCENARIO)
    snap = _with_probes(translate_scenario(SCENARIO))
    return res, EnvoyModel(snap, backend_directory_from(res)), snap


def _predicted(model: EnvoyModel, request: Request) -> Outcome:
    return model.evaluate(request, echo_reply(request)).outcome


def test_the_model_binds_as_linux_does() -> None:
    """The same table the real binary answers below, from the model alone: which
    probe listener's status each destination gets (0: refused)."""
    _res, model, _snap = _model_and_snapshot()
    got = {(r.port, r.address): _predicted(model, r).status for r in BINDING}
    assert got == {
        **{(9001, a): 241 for a in (V4, OTHER_V4, V6, MAPPED)},
        **{(p, a): 0 for p in (9002, 9003) for a in (V4, OTHER_V4, MAPPED)},
        (9002, V6): 242,
        (9003, V6): 243,
        **{(9004, a): 244 for a in (V4, OTHER_V4, MAPPED)},
        (9004, V6): 245,
        (9005, V4): 246,
        (9005, MAPPED): 246,
        (9005, OTHER_V4): 247,
        (9005, V6): 0,
        (9006, V4): 248,
        (9006, MAPPED): 248,
        (9006, OTHER_V4): 249,
        (9006, V6): 249,
    }


def test_a_v6_only_listener_says_why_it_refuses_ipv4() -> None:
    _res, model, _snap = _model_and_snapshot()
    trace = model.evaluate(_probe(V4, 9002)).trace
    assert "[::] without ipv4_compat refuses IPv4 (IPV6_V6ONLY)" in trace[0]


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(os.geteuid() != 0, reason=netns.NEEDS)
def test_the_model_predicts_what_envoy_does_with_each_probe() -> None:
    res, model, snap = _model_and_snapshot()
    probes = BINDING + [r for r, _ in ORIGIN]

    async def work(harness: EmbeddedHarness) -> list[Outcome]:
        return [harness.to_outcome(await harness.send(r)) for r in probes]

    done = asyncio.run(
        with_isolated_harness(res, snap, work, destinations=[V4, V6], fallback=False)
    )
    lives = dict(zip(probes, done.value, strict=True))
    judged = dict(ORIGIN) | {r: True for r in BINDING}
    wrong = []
    for request, live in lives.items():
        predicted = _predicted(model, request)
        if not judged[request]:
            # The model must say it cannot know, and the live answer must show why:
            # the assumption it states (external, a plain HTTP reply) is not what
            # happened here.
            if not predicted.unjudged or live.status == predicted.status:
                wrong.append(f"{request.line()}: model {predicted}, live {live.status}")
            continue
        problems = decision_mismatches(predicted, live)
        if predicted.unjudged or predicted.status != live.status or problems:
            wrong.append(
                f"{request.line()}: model {predicted.status}, live {live.status} {problems}"
            )
    assert wrong == []


def _check(xds: Snapshot, tmp_path: Path, name: str) -> list[tuple[str, str]]:
    path = tmp_path / f"{name}.json"
    path.write_text(dumps(xds), encoding="utf-8")
    opts = CheckOptions(xds=str(path), profile="gateway-api")
    (scenario,) = [s for s in discover([rel(FIXTURES)], opts) if s.name == SCENARIO.name]
    result = check_scenario(scenario, opts, RULES)
    assert result.input_errors == []
    return sorted((f.code, f.xds_path) for f in result.findings)


def test_check_judges_xds_that_binds_the_dual_stack_wildcard(tmp_path: Path) -> None:
    """Another implementation's encoding with every listener on [::] (ipv4_compat), as
    implementations that bind dual-stack write it: nothing is found, as on ours. The
    same xDS without ipv4_compat refuses every IPv4 client, and check says so."""
    res, _ = load_fixture(SCENARIO)
    foreign = reencode(translate_scenario(SCENARIO), res)
    assert _check(dual_stack(foreign), tmp_path, "dual") == []
    refused = _check(dual_stack(foreign, ipv4_compat=False), tmp_path, "v6only")
    assert refused and {code for code, _ in refused} >= {"EV104"}
