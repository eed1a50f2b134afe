"""``--kubeconfig`` against API servers and kubeconfigs that lie, stall or flood.

Each case is one issue 34 found (a traceback, a hang killed from outside, a process
left running, or an exit 0 having checked no route), now exit 2 naming what failed,
within its bound, with nothing left behind. The tool runs in a bounded forked child
(tests/hostile.py), so that a hang is a failure here and not a hung test run; the
server is tests/hostile_k8s.py, which tells each lie to the kind the case names.
tests/test_hostile_cluster.py draws hundreds more such peers.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import MINIMAL_YAML
from hostile import Ran, hostile_server, kubeconfig, run_tool, warm
from k8s_standin import TOKEN


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    world = tmp_path_factory.mktemp("world")
    (world / "world.yaml").write_text(MINIMAL_YAML)
    with hostile_server([world]) as base:
        warm(["check", "--kubeconfig", str(kubeconfig(world / "kc", base)), "-o", os.devnull])
        yield base


def check(config: Path, *extra: str, timeout_s: float = 20.0) -> Ran:
    return run_tool(["check", "--kubeconfig", str(config), "-o", os.devnull, *extra], timeout_s)


def ok(ran: Ran, bound_s: float, *, lie: bool = True) -> None:
    problem = ran.problem(bound_s, lie)
    assert problem is None, f"{problem}\nexit {ran.code}; stderr:\n{ran.err[-2000:]}"


def test_an_honest_server_is_read_and_checked(server: str, tmp_path: Path) -> None:
    ran = check(kubeconfig(tmp_path / "kc", server))
    ok(ran, 15.0, lie=False)
    assert ran.code == 0


@pytest.mark.parametrize(
    ("lie", "said"),
    [
        ({"how": "items", "value": "routes"}, "items is a string"),
        ({"how": "items", "value": None}, "items is a null"),
        ({"how": "items", "value": {"metadata": {"name": "echo"}}}, "items is a object"),
        ({"how": "items", "drop": True}, "has no items"),
        ({"how": "status", "code": 200, "message": "etcd is down"}, "a Status (etcd is down)"),
    ],
    ids=["string", "null", "object", "missing", "status"],
)
def test_an_httproute_list_without_its_shape_is_never_a_green(
    server: str, tmp_path: Path, lie: dict[str, Any], said: str
) -> None:
    """It was exit 0, having checked no route at all."""
    ran = check(kubeconfig(tmp_path / "kc", server, behaviour={"plural": "httproutes", **lie}))
    ok(ran, 10.0)
    assert "HTTPRoute" in ran.err and said in ran.err and server in ran.err


def test_an_object_nested_5000_deep_is_an_input_error(server: str, tmp_path: Path) -> None:
    """It was a RecursionError."""
    deep = {"plural": "httproutes", "how": "deep", "depth": 5000}
    ran = check(kubeconfig(tmp_path / "kc", server, behaviour=deep))
    ok(ran, 10.0)
    assert "[too-deep]" in ran.err


@pytest.mark.parametrize("with_items", [True, False], ids=["with-items", "empty"])
@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-tokens", "one-token"])
def test_a_continue_token_that_never_ends_is_bounded(
    server: str, tmp_path: Path, with_items: bool, fresh: bool
) -> None:
    """It paged for ever."""
    lie = {"plural": "httproutes", "how": "pages", "with_items": with_items, "fresh": fresh}
    ran = check(kubeconfig(tmp_path / "kc", server, behaviour=lie), "--max-list-length", "1000")
    ok(ran, 10.0)
    assert ("[too-long]" if fresh else "repeats an earlier continue token") in ran.err


def test_an_answer_trickled_at_one_byte_a_second_meets_the_timeout(
    server: str, tmp_path: Path
) -> None:
    """Each byte came within the per-read timeout, so none fired: a hang."""
    trickle = {"plural": "gateways", "how": "trickle", "pause": 1.0}
    ran = check(kubeconfig(tmp_path / "kc", server, behaviour=trickle), "--cluster-timeout", "0.5")
    ok(ran, 5.0)
    assert "no complete answer within 0.5s" in ran.err and "--cluster-timeout" in ran.err


def test_the_whole_read_has_a_deadline(server: str, tmp_path: Path) -> None:
    slow = {"plural": "*", "how": "slow", "pause": 0.2}
    config = kubeconfig(tmp_path / "kc", server, behaviour=slow)
    ran = check(config, "--cluster-timeout", "2", "--cluster-deadline", "0.5")
    ok(ran, 6.0)
    assert "--cluster-deadline" in ran.err


# ------------------------------------------------------------------ the kubeconfig file


def _yaml_error(path: Path) -> None:
    path.write_text("apiVersion: v1\nclusters: [{name: c\n")


def _python_tag(path: Path) -> None:
    path.write_text("apiVersion: v1\nclusters: !!python/object/apply:os.system ['true']\n")


def _deep(path: Path) -> None:
    path.write_text("clusters: " + "[" * 10_000 + "]" * 10_000 + "\n")


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _comments(path: Path) -> None:
    line = b"# " + b"c" * 1021 + b"\n"
    with path.open("wb") as f:
        for _ in range(300):  # 300 MiB
            f.write(line * 1024)


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (_yaml_error, "[yaml-syntax]"),
        (_python_tag, "[yaml-syntax]"),
        (_deep, "[yaml-depth]"),
        (_fifo, "[not-a-file]"),
        (_comments, "[too-large]"),
    ],
    ids=["yaml-error", "python-tag", "10000-deep", "fifo", "300MiB-of-comments"],
)
def test_a_kubeconfig_the_tool_cannot_read_is_one_clear_error(
    tmp_path: Path, make: Any, code: str
) -> None:
    config = tmp_path / "kubeconfig"
    make(config)
    try:
        ran = check(config)
    finally:
        config.unlink()
    ok(ran, 10.0)
    assert f"{config}" in ran.err and code in ran.err


def test_dev_zero_as_kubeconfig_is_refused_at_once() -> None:
    ran = check(Path("/dev/zero"))
    ok(ran, 5.0)
    assert "/dev/zero" in ran.err and "[not-a-file]" in ran.err


def test_a_token_file_ending_in_a_newline_is_stripped_as_kubectl_does(
    server: str, tmp_path: Path
) -> None:
    """It was ValueError: Invalid header value."""
    (tmp_path / "token").write_text(f"{TOKEN}\n")
    config = kubeconfig(tmp_path / "kc", server, user={"tokenFile": "token"})
    ran = check(config)
    ok(ran, 15.0, lie=False)
    assert ran.code == 0


# ------------------------------------------------------------------ exec credential plugins


def plugin(tmp_path: Path, body: str) -> dict[str, Any]:
    """A kubeconfig user whose exec credential plugin is the shell script ``body``."""
    script = tmp_path / "plugin.sh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    version = "client.authentication.k8s.io/v1"
    return {"exec": {"apiVersion": version, "command": str(script), "interactiveMode": "Never"}}


CREDENTIAL = (
    'printf \'%s\' \'{"apiVersion": "client.authentication.k8s.io/v1", '
    f'"kind": "ExecCredential", "status": {{"token": "{TOKEN}"}}}}\''
)


def test_an_exec_plugin_gives_its_token(server: str, tmp_path: Path) -> None:
    ran = check(kubeconfig(tmp_path / "kc", server, user=plugin(tmp_path, CREDENTIAL)))
    ok(ran, 15.0, lie=False)
    assert ran.code == 0


def test_an_exec_plugin_that_never_exits_meets_its_timeout(server: str, tmp_path: Path) -> None:
    user = plugin(tmp_path, "sleep 300")
    ran = check(kubeconfig(tmp_path / "kc", server, user=user), "--exec-timeout", "0.5")
    ok(ran, 5.0)
    assert "did not finish within 0.5s" in ran.err and "--exec-timeout" in ran.err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_an_exec_plugin_dies_with_a_sigkilled_tool(server: str, tmp_path: Path) -> None:
    """The plugin, and a daemon it detached, were still running after the tool died."""
    pids = tmp_path / "pids"
    body = f"setsid sleep 301 </dev/null >/dev/null 2>&1 &\necho $$ $! > {pids}.tmp\n"
    body += f"mv {pids}.tmp {pids}\nsleep 302"
    config = kubeconfig(tmp_path / "kc", server, user=plugin(tmp_path, body))
    from verifier import orphans
    from verifier.cli import main

    child = os.fork()
    if child == 0:  # the tool, with a reaper of its own
        orphans._reaper = None
        os.setpgid(0, 0)
        os._exit(main(["check", "--kubeconfig", str(config), "-o", os.devnull]))
    try:
        until = time.monotonic() + 15
        while not pids.exists() and time.monotonic() < until:
            time.sleep(0.02)
        started = [int(p) for p in pids.read_text().split()]
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    until = time.monotonic() + 5
    while any(_alive(p) for p in started) and time.monotonic() < until:
        time.sleep(0.05)
    assert not [p for p in started if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.parametrize("flag", ["--cluster-timeout", "--cluster-deadline", "--exec-timeout"])
@pytest.mark.parametrize("value", ["inf", "nan", "0"])
def test_a_bound_is_a_finite_number_of_seconds(
    server: str, tmp_path: Path, flag: str, value: str
) -> None:
    ran = check(kubeconfig(tmp_path / "kc", server), flag, value)
    ok(ran, 5.0)
    assert f"argument {flag}: expected a number of seconds above 0" in ran.err
