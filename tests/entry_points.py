"""Every way into the CLI, each fed a damaged copy of one valid input, in a forked child.

Shared by tests/test_fuzz_entry_points.py (a few thousand derandomized examples on
every run) and benchmarks/fuzz_inputs.py (a longer random campaign). An entry point
is a command line with one input in it damaged: a resources file, the xDS (a
config_dump or one file of a per-type directory), a cases table, a mesh registry,
a CA certificate, standard input, or an option's value.

Each run is a fork of the test process, so the parent keeps its warm caches and
imports (an example costs milliseconds, not an interpreter start) and the child
can be bounded: an address-space limit, a wall-clock timeout, and its own process
group so a hang takes its forked helpers down with it. The child runs ``main``
with real file descriptors and the encodings CPython gives a console script
(strict UTF-8 on stdout and stdin, backslashreplace on stderr), so an exception
that escapes, an exit code outside 0/1/2, a crash by signal and an exit 2 that
does not name the damaged input are all seen as they would be by a user.
"""

from __future__ import annotations

import io
import json
import os
import re
import resource
import select
import shlex
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from conftest import BASE, FIXTURES, MINIMAL_YAML, REPO_ROOT
from damage import (
    BYTES_ONLY,
    DAMAGE,
    Damage,
    damaged,
    json_document,
    yaml_document,
    yaml_documents,
)
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from verifier.cli import main

TIMEOUT_S = 20.0  # a small input that takes longer is a hang
MEMORY = 2 << 30  # address space of a child: a small input that needs more is a leak
MAX_BYTES = 1 << 20  # damage that grows a file past this is a size test, not a fuzz test
ESCAPED = 70  # a child's exit code when an exception escaped main (EX_SOFTWARE)
EXITS = (0, 1, 2)

DATABASE = REPO_ROOT / ".hypothesis" / "entry-points"  # ignored by git, kept across runs
CLIENT_CERT = FIXTURES / "gateway-frontend-client-certificate-validation"

# How many inputs each entry point was fed, and the seconds that took, this session.
COUNTS: Counter[str] = Counter()
SECONDS: defaultdict[str, float] = defaultdict(float)

CASES_YAML = """\
- name: root
  gateway: {namespace: web, name: edge, port: 80}
  request:
    method: GET
    host: a.example
    path: '/x?y=1'
    headers: {X-A: one}
  expect:
    status: 200
    backend: echo
    namespace: web
    request: {host: a.example, path: '/x?y=1', headers: {x-a: one}}
- name: head
  gateway: {namespace: web, name: edge}
  request: {method: HEAD, path: /}
  expect: {statuses: [200], backends: [echo]}
"""
REGISTRY_YAML = "services:\n  - namespace: web\n    name: echo\n  - web/other\n"


@dataclass(frozen=True)
class Run:
    """How one child ended: its exit code (None when it did not exit), its output,
    what went wrong outside the exit code (a timeout or a signal), if anything, and
    its peak resident memory in KiB (what it shares with the parent included)."""

    code: int | None
    out: str
    err: str
    killed: str
    max_rss_kib: int = 0


def _child(
    argv: list[str],
    files: tuple[int, int, int],
    memory: int,
    prepare: Callable[[], None] | None = None,
) -> None:
    """In the forked child: bound it, give it fresh standard streams, run ``main``,
    and leave with its exit code without running the parent's exit handlers.
    ``prepare`` runs first (a hostile-peer test's own reaper, say)."""
    code = ESCAPED
    try:
        os.setpgid(0, 0)
        if prepare is not None:
            prepare()
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        for fd, target in enumerate(files):
            os.dup2(target, fd)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        _without_envoy()
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse refusing the command line: exit 2 by design
            code = exc.code if isinstance(exc.code, int) else ESCAPED
        except BaseException:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        with suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(code)


def _without_envoy() -> None:
    """No ``envoy --mode validate`` in the child: it is the same binary on every
    input and would triple the cost of an example; what it is fed is built by the
    code under test, which still runs. envoy-accepts-config then gives no verdict,
    as documented for a machine without Envoy."""
    from verifier.rules import envoy_accepts_config

    envoy_accepts_config.find_envoy = lambda: None  # type: ignore[assignment]


def run_forked(
    argv: list[str],
    stdin: bytes = b"",
    timeout_s: float = TIMEOUT_S,
    memory: int = MEMORY,
    prepare: Callable[[], None] | None = None,
) -> Run:
    """``main(argv)`` in a bounded child process."""
    with (
        tempfile.TemporaryFile() as inp,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        inp.write(stdin)
        inp.seek(0)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(argv, (inp.fileno(), out.fileno(), err.fileno()), memory, prepare)
        with suppress(OSError):  # the child may already have done it (or be gone)
            os.setpgid(pid, pid)
        pidfd = os.pidfd_open(pid)
        try:
            ended = select.select([pidfd], [], [], timeout_s)[0]
        finally:
            os.close(pidfd)
        # Its forked helpers too: the child is at most a zombie, so the group is its own.
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    rss = usage.ru_maxrss
    if not ended:
        return Run(None, stdout, stderr, f"no exit after {timeout_s:g} s", rss)
    if os.WIFSIGNALED(status):
        signame = signal.Signals(os.WTERMSIG(status)).name
        return Run(None, stdout, stderr, f"killed by {signame}", rss)
    return Run(os.WEXITSTATUS(status), stdout, stderr, "", rss)


def problem(run: Run, names: tuple[str, ...]) -> str | None:
    """What is wrong with how a damaged input ended, or None: the contract is exit
    0, 1 or 2, no traceback, in bounded time and memory, and an exit 2 that says
    where the damage is (``names``: the file's path, or the option; any one)."""
    if run.killed:
        return run.killed
    if "Traceback (most recent call last)" in run.err or run.code == ESCAPED:
        return "an exception escaped main"
    if run.code not in EXITS:
        return f"exit code {run.code}"
    if run.code == 2 and not any(n in run.err for n in names):
        return f"exit 2 without naming {' or '.join(names)}"
    return None


# ------------------------------------------------------------------ the entry points

Parse = Callable[[bytes], Any]


def _yaml_all(data: bytes) -> Any:
    return [d for d in yaml.safe_load_all(data) if d is not None]


@dataclass(frozen=True)
class EntryPoint:
    """A command line with one damaged input in it.

    ``argv`` gets the workspace (valid inputs) and the damaged input: a path, or the
    damaged value itself for an option (``target`` None). ``parse``/``encode`` make
    the input a document to edit; without them only its bytes are damaged.
    """

    name: str
    valid: Callable[[Path], bytes]
    argv: Callable[[Path, str], list[str]]
    examples: int
    target: str | None = None  # the damaged file's name; None: an option value or stdin
    parse: Parse | None = None
    encode: Callable[[Any], bytes] | None = None
    min_depth: int = 1
    stdin: bool = False
    option: tuple[str, ...] = ()  # what an exit 2 must name when the input is no file
    within: str | None = None  # the damaged file is one file of this workspace directory

    @property
    def damage(self) -> st.SearchStrategy[Damage]:
        return DAMAGE if self.parse is not None else BYTES_ONLY


def _text(value: str) -> Callable[[Path], bytes]:
    return lambda _ws: value.encode()


def _read(name: str) -> Callable[[Path], bytes]:
    return lambda ws: (ws / name).read_bytes()


def workspace(root: Path) -> Path:
    """The valid inputs every entry point damages a copy of: the minimal world, its
    xDS as a config_dump and as a per-type directory, a cases table, a registry."""
    from verifier.xds.snapshot import load_path, split_by_type

    (root / "world.yaml").write_text(MINIMAL_YAML, encoding="utf-8")
    (root / "cases.yaml").write_text(CASES_YAML, encoding="utf-8")
    (root / "registry.yaml").write_text(REGISTRY_YAML, encoding="utf-8")
    assert main(["translate", str(root / "world.yaml"), "-o", str(root / "xds.json")]) == 0
    world, saved = str(root / "world.yaml"), str(root / "baseline.json")
    assert main(["check", world, "--save-baseline", saved, "-o", os.devnull]) == 0
    (root / "per-type").mkdir()
    snap, _ = load_path(root / "xds.json")
    for kind, doc in split_by_type(snap).items():
        (root / "per-type" / f"xds.{kind}.json").write_text(json.dumps(doc), encoding="utf-8")
    return root


W = "world.yaml"
OUT = "-o", os.devnull
YAML_DOCS = {"parse": _yaml_all, "encode": yaml_documents, "min_depth": 2}
YAML_DOC = {"parse": yaml.safe_load, "encode": yaml_document}
JSON_DOC = {"parse": json.loads, "encode": json_document, "min_depth": 2}
CERT_ARGS = [str(BASE), str(CLIENT_CERT), "--gateway", "edge-infra/client-validation"]

ENTRY_POINTS: dict[str, EntryPoint] = {
    ep.name: ep
    for ep in [
        EntryPoint(
            "translate",
            _read(W),
            lambda _ws, d: ["translate", d, *OUT],
            270,
            target=W,
            **YAML_DOCS,
        ),
        EntryPoint(
            "status",
            _read(W),
            lambda _ws, d: ["status", d, "--format", "yaml", *OUT],
            250,
            target=W,
            **YAML_DOCS,
        ),
        EntryPoint(
            "status (stdin)",
            _read(W),
            lambda _ws, _d: ["status", "-", *OUT],
            140,
            stdin=True,
            option=("<stdin>", "-: "),  # a parse error, or the path given
            **YAML_DOCS,
        ),
        EntryPoint(
            "check",
            _read(W),
            lambda _ws, d: ["check", d, *OUT],
            130,
            target=W,
            **YAML_DOCS,
        ),
        EntryPoint(
            "check --xds (config_dump)",
            _read("xds.json"),
            lambda ws, d: ["check", str(ws / W), "--xds", d, *OUT],
            130,
            target="xds.json",
            **JSON_DOC,
        ),
        EntryPoint(
            "check --xds - (stdin)",
            _read("xds.json"),
            lambda ws, _d: ["check", str(ws / W), "--xds", "-", *OUT],
            60,
            stdin=True,
            option=("<stdin>",),
            **JSON_DOC,
        ),
        EntryPoint(
            "check --baseline",
            _read("baseline.json"),
            lambda ws, d: ["check", str(ws / W), "--baseline", d, *OUT],
            80,
            target="baseline.json",
            **JSON_DOC,
        ),
        EntryPoint(
            "check --xds (per-type directory)",
            _read("per-type/xds.routes.json"),
            lambda ws, d: ["check", str(ws / W), "--xds", str(Path(d).parent), *OUT],
            80,
            target="xds.routes.json",
            within="per-type",
            **JSON_DOC,
        ),
        EntryPoint(
            "check --cases",
            _read("cases.yaml"),
            lambda ws, d: ["check", str(ws / W), "--cases", d, *OUT],
            130,
            target="cases.yaml",
            **YAML_DOC,
        ),
        EntryPoint(
            "explain --cases",
            _read("cases.yaml"),
            lambda ws, d: ["explain", str(ws / W), "--cases", d],
            130,
            target="cases.yaml",
            **YAML_DOC,
        ),
        EntryPoint(
            "explain --request",
            _text("GET http://a.example/x?y=1"),
            lambda ws, v: ["explain", str(ws / W), f"--request={v}", "-H", "X-A: one"],
            160,
            option=("--request",),
        ),
        EntryPoint(
            "explain -H",
            _text("Version: two"),
            lambda ws, v: ["explain", str(ws / W), "--request", "GET http://a/", f"--header={v}"],
            120,
            option=("-H",),
        ),
        EntryPoint(
            "explain --client-cert-issuer",
            lambda _ws: (CLIENT_CERT / "client-ca-a.crt").read_bytes(),
            lambda _ws, d: [
                "explain",
                *CERT_ARGS,
                "--request=GET https://secure.example.com:8451/",
                "--client-cert-issuer",
                d,
            ],
            60,
            target="ca.crt",
        ),
        EntryPoint(
            "translate --mesh-registry",
            _read("registry.yaml"),
            lambda ws, d: ["translate", str(ws / W), "--mesh-registry", d, *OUT],
            140,
            target="registry.yaml",
            **YAML_DOC,
        ),
        EntryPoint(
            "--gateway-address",
            _text("web/edge=10.0.0.5:80>10080"),
            lambda ws, v: ["translate", str(ws / W), f"--gateway-address={v}", *OUT],
            320,
            option=("--gateway-address",),
        ),
        EntryPoint(
            "--gateway-cidr",
            _text("192.0.2.0/24"),
            lambda ws, v: ["translate", str(ws / W), f"--gateway-cidr={v}", *OUT],
            160,
            option=("--gateway-cidr",),
        ),
        EntryPoint(
            "mutate --xds",
            _read("xds.json"),
            lambda ws, d: ["mutate", str(ws / W), "--xds", d, *OUT],
            20,
            target="xds.json",
            **JSON_DOC,
        ),
    ]
}


@dataclass(frozen=True)
class Outcome:
    """One example: the command line, how it ended, and what was wrong, if anything."""

    argv: list[str]
    run: Run
    problem: str | None


def _command(ep: EntryPoint, ws: Path, data: bytes) -> tuple[list[str], bytes, tuple[str, ...]]:
    """(argv, stdin, what an exit 2 must name) with ``data`` as the damaged input,
    written to the entry point's own folder of ``ws`` when it is a file (the same
    file each time: a fresh folder per example cost more than most examples)."""
    if ep.target is None:
        if ep.stdin:
            return ep.argv(ws, "-"), data, ep.option
        value = data.decode("utf-8", "surrogateescape")  # as CPython decodes argv
        return ep.argv(ws, value), b"", ep.option
    where = ws / "damaged" / re.sub(r"[^a-z]+", "-", ep.name).strip("-")
    if ep.within is not None:
        where /= ep.within
        if not where.exists():
            shutil.copytree(ws / ep.within, where)
    where.mkdir(parents=True, exist_ok=True)
    path = where / ep.target
    path.write_bytes(data)
    return ep.argv(ws, str(path)), b"", (str(path),)


def feed(ep: EntryPoint, ws: Path, data: bytes) -> Outcome:
    """Run ``ep`` with ``data`` as its damaged input, in a child; count it."""
    argv, stdin, names = _command(ep, ws, data)
    start = time.perf_counter()
    run = run_forked(argv, stdin)
    SECONDS[ep.name] += time.perf_counter() - start
    COUNTS[ep.name] += 1
    return Outcome(argv, run, problem(run, names))


def warm(ws: Path) -> None:
    """Run every entry point once here, on its valid input, so that the children
    forked later inherit the imports and caches instead of each paying for them."""
    from verifier.rules import envoy_accepts_config

    find_envoy = envoy_accepts_config.find_envoy
    try:
        _without_envoy()  # as in the children; and validate mode is seconds here
        for ep in ENTRY_POINTS.values():
            if ep.stdin:
                continue
            argv, _, _ = _command(ep, ws, ep.valid(ws))
            with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
                code = main(argv)
            assert code == 0, f"{ep.name} fails on its valid input"
    finally:
        envoy_accepts_config.find_envoy = find_envoy  # type: ignore[assignment]


_VALID: dict[tuple[str, Path], tuple[bytes, Any]] = {}


def damaged_input(ep: EntryPoint, ws: Path, damage: Damage) -> bytes:
    """``ep``'s valid input with ``damage``; the valid input is read and parsed once
    (parsing it again for every example cost as much as running most of them)."""
    if (ep.name, ws) not in _VALID:
        valid = ep.valid(ws)
        _VALID[(ep.name, ws)] = valid, None if ep.parse is None else ep.parse(valid)
    valid, doc = _VALID[(ep.name, ws)]
    return damaged(valid, damage, doc, ep.encode, ep.min_depth)


def fuzz_settings(name: str, examples: int, derandomize: bool, shrink: bool = True) -> settings:
    """Hypothesis settings for one entry point. Derandomized (CI), a failure is the
    same failure on every machine and run; otherwise (a developer, the benchmark
    campaign) the draws differ each run and a failure is kept in ``.hypothesis/``
    and replayed first next time. Hypothesis refuses both at once: derandomize
    implies no database."""
    database = None if derandomize else DirectoryBasedExampleDatabase(DATABASE / name)
    return settings(
        max_examples=examples,
        deadline=None,  # each example is bounded by TIMEOUT_S instead, in the child
        derandomize=derandomize,
        database=database,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        phases=tuple(Phase) if shrink else tuple(p for p in Phase if p is not Phase.shrink),
    )


def failure(outcome: Outcome, data: bytes) -> str:
    """What a developer needs to reproduce a failed example from the log alone."""
    run = outcome.run
    return (
        f"{outcome.problem}\n$ edge-verify {shlex.join(outcome.argv)}\n"
        f"exit {run.code}; stderr (tail):\n{run.err[-3000:]}\n"
        f"damaged input ({len(data):,} bytes), head: {data[:400]!r}"
    )


def survives_damage(
    name: str, valid: Path, examples: int, derandomize: bool, shrink: bool = True
) -> Callable[[], None]:
    """The property, for ``examples`` damaged inputs of entry point ``name``: every
    one ends as ``problem`` requires. Calling it runs Hypothesis."""
    ep = ENTRY_POINTS[name]

    @fuzz_settings(name, examples, derandomize, shrink)
    @given(damage=ep.damage)
    def survives(damage: Damage) -> None:
        data = damaged_input(ep, valid, damage)
        assume(len(data) <= MAX_BYTES)
        outcome = feed(ep, valid, data)
        assert outcome.problem is None, failure(outcome, data)

    return survives


def summary() -> list[str]:
    """One line per entry point fed this session, and the total."""
    lines = [f"{name}: {COUNTS[name]:,} inputs in {SECONDS[name]:.1f} s" for name in sorted(COUNTS)]
    total = sum(COUNTS.values())
    lines.append(f"total: {total:,} inputs in {sum(SECONDS.values()):.1f} s")
    return lines
