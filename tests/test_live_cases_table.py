"""``live`` and ``run`` on cases tables issue 34 found them failing on.

The live-only fields (``samples``, the ratios, mirrors) were read by the live pass
alone, late and unchecked: ``samples: many``, ``samples`` as a list, a status ratio
of ``abc`` and a ``mirrored_to`` without a namespace were tracebacks, and ``samples``
in the billions ran the machine out of memory. Now every field is checked when the
table is read: ``file:line: field: message [case]``, exit 2, before anything starts.

And a table of 10,000 valid cases failed every case: each case's budget ran from
the start of the run while its requests queued behind every other case's. Here
1,000 cases with a 0.3 s budget, each answered at once by a real echo backend
standing in for a cluster's Gateway (``live --kubeconfig``: no Envoy, no root): on
fa34526 most of them fail on their budget; now every one passes.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import threading
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from conftest import BASE, FIXTURES, MINIMAL_YAML
from hostile import run_tool, warm
from k8s_standin import StandIn, fixture_objects

from verifier.cli import main
from verifier.live.echo import EchoBackend, EchoPort

CASE = "- name: {name}\n  gateway: {{namespace: web, name: edge}}\n  request: {{path: /}}\n"
# name -> (the case's body after its request, the field named, the line of the error)
BAD = {
    "samples-many": ("  samples: many\n  expect: {status: 200}\n", "[0].samples", 5),
    "samples-list": ("  samples: [1, 2]\n  expect: {status: 200}\n", "[0].samples", 5),
    "samples-billions": ("  samples: 5000000000\n  expect: {status: 200}\n", "[0].samples", 5),
    "status-ratio-abc": (
        "  samples: 20\n  expect:\n    status: 200\n    status_ratio: {'200': abc}\n",
        "[0].expect.status_ratio.200",
        8,
    ),
    "mirror-without-namespace": (
        "  expect:\n    status: 200\n    mirrored_to: [{name: echo}]\n",
        "[0].expect.mirrored_to[0].namespace",
        7,
    ),
}


@pytest.fixture(scope="module")
def warm_live(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The live pass imported and a check run here, so that the children are warm."""
    import verifier.live.runner  # noqa: F401

    world = tmp_path_factory.mktemp("warm") / "world.yaml"
    world.write_text(MINIMAL_YAML)
    warm(["check", str(world), "-o", os.devnull])


@pytest.mark.parametrize("command", ["live", "run"])
@pytest.mark.parametrize("name", list(BAD))
def test_a_wrong_live_only_field_is_an_input_error_at_its_line(
    command: str, name: str, tmp_path: Path, warm_live: None
) -> None:
    (tmp_path / "world.yaml").write_text(MINIMAL_YAML)
    body, field, line = BAD[name]
    cases = tmp_path / "cases.yaml"
    cases.write_text("# a table\n" + CASE.format(name="one") + body)
    ran = run_tool([command, str(tmp_path / "world.yaml"), "--cases", str(cases)], 20.0)
    assert ran.problem(10.0, lie=True) is None, ran.err
    assert f"{cases}:{line}: {field}:" in ran.err and "[case]" in ran.err, ran.err


SCENARIO = "httproute-simple-same-namespace"
GATEWAY = "conformance-infra/same-namespace"
PORT = 8191  # the Gateway's listener


@pytest.fixture
def echo_gateway() -> Iterator[int]:
    """A real echo backend (as ``infra-backend-v1``) standing in for the cluster's
    Gateway; its port."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    echo = EchoBackend("conformance-infra", "infra-backend-v1", "127.0.0.1", [EchoPort(0)])
    asyncio.run_coroutine_threadsafe(echo.start(), loop).result(30)
    try:
        yield echo.bound[0]
    finally:
        asyncio.run_coroutine_threadsafe(echo.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)


def test_a_thousand_cases_each_get_their_own_budget(echo_gateway: int, tmp_path: Path) -> None:
    standin = StandIn(fixture_objects([BASE, FIXTURES / SCENARIO])).start()
    try:
        config = standin.kubeconfig(tmp_path / "kubeconfig")
        cases = tmp_path / "cases.yaml"
        one = (
            "- name: case-{i}\n  gateway: {{namespace: conformance-infra, name: same-namespace}}\n"
            "  request: {{path: /}}\n  expect: {{status: 200, backend: infra-backend-v1}}\n"
        )
        cases.write_text("".join(one.format(i=i) for i in range(1000)))
        argv = ["live", "--kubeconfig", str(config), "--gateway", GATEWAY, "--cases", str(cases)]
        argv += ["--gateway-address", f"{GATEWAY}=127.0.0.1:{PORT}>{echo_gateway}"]
        argv += ["--successes", "2", "--consistency-budget", "0.3", "--format", "json"]
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(io.StringIO()):
            main(argv)
    finally:
        standin.stop()
    results = json.loads(out.getvalue())["cases"]
    assert len(results) == 1000
    failed = [r for r in results if not r["passed"]]
    assert not failed, f"{len(failed)} failed, the first: {failed[0]['problems']}"
