"""``check --baseline DIR|REF``: the baseline of a previous configuration that is not
a saved file but the inputs themselves, as a directory holds them or as git holds
them at a ref (``main``, ``origin/main``, a commit).

What agreed there is learnt by asking both models about every request of the
previous configuration (no other rule runs, and Envoy is not started), which costs
about a full check. So the digests are kept in a cache keyed by what was read
(the previous inputs' bytes, the options that shape the models, the checker's own
source): the next pull request against the same ``main`` reads them back instead,
and a CI job that keeps the cache directory between runs pays the full check once
per change of ``main``. The cache holds what ``--save-baseline`` writes: digests only.

Each input (PATHs, ``--xds``, ``--cases``, ``--mesh-registry``) is read at the same
place in the previous tree: relative to the current directory under DIR, relative
to the repository's top under REF. An input the previous tree does not have was
added since; the previous configuration is checked without it. Only a missing
``--xds`` makes the run a full check: without it there is nothing to compare with.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from hashlib import blake2b
from pathlib import Path
from typing import TYPE_CHECKING

from verifier import baseline
from verifier.errors import InputError, InputErrors

if TYPE_CHECKING:
    from verifier.pipeline import CheckOptions

GIT_TIMEOUT_S = 120.0
CACHE_ENV = "EDGE_VERIFY_CACHE"


def _bad(given: str, message: str, code: str = "invalid") -> InputErrors:
    return InputErrors([InputError(given, 0, "--baseline", code, message)])


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes] | None:
    """git's answer, or None where there is no git (or it hangs): then nothing is a ref."""
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def commit_of(ref: str, cwd: Path) -> str | None:
    """The commit ``ref`` names in the repository around ``cwd``, if it names one."""
    if ref.startswith("-"):
        return None  # never an option to git
    found = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd)
    if found is None or found.returncode != 0:
        return None
    return found.stdout.decode().strip() or None


def is_previous(given: str) -> bool:
    """Whether ``--baseline GIVEN`` names a previous configuration rather than a saved
    file: a directory, or (when no such file exists) a git ref. A file wins over a ref
    of the same name, as git itself prefers a path to a ref in ``git log NAME``."""
    if given == "-" or Path(given).is_file():
        return False
    if Path(given).is_dir() or commit_of(given, Path.cwd()) is not None:
        return True
    if not Path(given).exists():
        raise _bad(given, "no such file or directory, and not a git ref here", "not-found")
    return False  # something else (a device, a pipe): read as a file, or refused there


@dataclass(frozen=True)
class _Tree:
    """Where the inputs are now (``now``) and where the previous tree holds them."""

    now: Path
    then: Path
    what: str  # for messages: "DIR" or "REF (commit)"
    commit: str | None  # REF's, whose tree is written to ``then`` as needed

    def has(self, rel: str) -> bool:
        """Whether the previous tree holds this path (relative to ``now``)."""
        if self.commit is None:
            return (self.then / rel).exists()
        if rel == ".":
            return True
        found = _git(["cat-file", "-e", f"{self.commit}:{Path(rel).as_posix()}"], self.now)
        return found is not None and found.returncode == 0


def _relative(path: str, tree: _Tree, given: str) -> str:
    rel = os.path.relpath(Path(path).resolve(), tree.now.resolve())
    if rel == ".." or rel.startswith(".." + os.sep) or os.path.isabs(rel):
        raise _bad(
            given,
            f"input {path} is outside {tree.now}: --baseline {given} reads each input at the "
            "same place in the previous tree, so the inputs must lie inside it",
            "not-applicable",
        )
    return rel


@contextmanager
def _tree(given: str) -> Iterator[_Tree]:
    """The previous tree: DIR as it is, or REF's tree written to a temporary directory
    (only the inputs' paths, see ``_export``)."""
    here = Path.cwd()
    if Path(given).is_dir():
        yield _Tree(here, Path(given), given, None)
        return
    commit = commit_of(given, here)
    if commit is None:
        raise _bad(given, "expected a baseline file, a directory or a git ref", "not-found")
    top_out = _git(["rev-parse", "--show-toplevel"], here)
    if top_out is None or top_out.returncode != 0:
        raise _bad(given, "the current directory is not in a git work tree", "not-applicable")
    top = Path(top_out.stdout.decode().strip())
    tmp = Path(tempfile.mkdtemp(prefix="edge-verify-baseline-"))
    try:
        yield _Tree(top, tmp, f"{given} ({commit[:12]})", commit)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _export(tree: _Tree, given: str, rels: list[str]) -> None:
    """Write the given paths of REF's tree under ``tree.then``."""
    if tree.commit is None or not rels:
        return
    posix = [Path(rel).as_posix() for rel in rels]
    found = _git(["archive", "--format=tar", tree.commit, "--", *posix], tree.now)
    if found is None or found.returncode != 0:
        why = found.stderr.decode(errors="replace").strip() if found is not None else "no git"
        raise _bad(given, f"git archive failed: {why[-500:]}", "unreadable")
    with tarfile.open(fileobj=io.BytesIO(found.stdout)) as tar:
        tar.extractall(tree.then, filter="data")


@dataclass(frozen=True)
class Previous:
    """The previous configuration's inputs, as paths in the previous tree."""

    paths: tuple[str, ...]
    xds: str | None
    cases: tuple[str, ...]
    mesh_registry: str | None
    left_out: tuple[str, ...]  # inputs added since (not in the previous tree)


def _previous(tree: _Tree, given: str, opts: CheckOptions, paths: list[str]) -> Previous:
    """Each input's place in the previous tree (written there first, under REF)."""
    left_out: list[str] = []
    wanted: list[str] = []

    def then(path: str | None) -> str | None:
        if path is None:
            return None
        rel = _relative(path, tree, given)
        if not tree.has(rel):
            left_out.append(path)
            return None
        wanted.append(rel)
        return str(tree.then / rel)

    old_paths = tuple(p for p in map(then, paths) if p is not None)
    old_xds = then(opts.xds)
    old_cases = tuple(c for c in map(then, opts.cases) if c is not None)
    old_registry = then(opts.mesh_registry)
    _export(tree, given, wanted)
    return Previous(old_paths, old_xds, old_cases, old_registry, tuple(left_out))


def _files(path: Path) -> Iterator[Path]:
    if path.is_dir():
        yield from sorted(p for p in path.rglob("*") if p.is_file())
    elif path.is_file():
        yield path


def _key(prev: Previous, opts: CheckOptions, root: Path) -> str:
    """What the previous configuration's agreements depend on: the checker's source,
    the options that shape either model, and every byte of every input read (with its
    place, since a directory's files are scenarios or parts of one by name)."""
    h = blake2b(digest_size=baseline.DIGEST_BYTES)

    def put(part: str | bytes) -> None:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)

    put(baseline.tool_digest())
    for option in (
        opts.translator or "",
        opts.profile,
        opts.controller_name,
        opts.trust_domain,
        repr(opts.addressing),
    ):
        put(option)
    for role, group in (
        ("path", prev.paths),
        ("xds", (prev.xds,) if prev.xds else ()),
        ("cases", prev.cases),
        ("registry", (prev.mesh_registry,) if prev.mesh_registry else ()),
    ):
        for given in group:
            put(role)
            put(os.path.relpath(given, root))
            for f in _files(Path(given)):
                put(os.path.relpath(f, root))
                put(f.read_bytes())
    return h.hexdigest()


def cache_dir() -> Path:
    """``$EDGE_VERIFY_CACHE``, else ``$XDG_CACHE_HOME/edge-verify`` (``~/.cache``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "edge-verify"


def load(
    given: str, opts: CheckOptions, paths: list[str]
) -> tuple[baseline.Baseline | None, list[str]]:
    """The baseline of the configuration ``given`` holds: from the cache when it was
    worked out before, else by asking the models there (and kept in the cache)."""
    from verifier import pipeline

    if opts.cluster is not None or "-" in paths or opts.xds == "-":
        raise _bad(
            given,
            "a directory or git ref is read at the inputs' paths: give a baseline file "
            "(--save-baseline) when the inputs come from a cluster or standard input",
            "not-applicable",
        )
    notes: list[str] = []
    with _tree(given) as tree:
        prev = _previous(tree, given, opts, paths)
        if prev.left_out:
            notes.append(
                f"baseline {tree.what} has no {', '.join(prev.left_out)}: "
                "the previous configuration is checked without it"
            )
        if opts.xds and prev.xds is None:
            return None, [
                f"baseline {tree.what} has no {opts.xds}: every request is asked (a full check)"
            ]
        if not prev.paths:
            return None, [f"baseline {tree.what} has none of the inputs: a full check"]
        key = _key(prev, opts, tree.then)
        cached = cache_dir() / f"baseline-{key}.json"
        if cached.is_file():
            try:
                found, _ = baseline.load(str(cached))
            except InputErrors:
                found = None  # damaged: worked out again below, and written afresh
            if found is not None:
                return found, notes
        old = replace(
            opts,
            xds=prev.xds,
            cases=prev.cases,
            mesh_registry=prev.mesh_registry,
            baseline=None,
            save_baseline=True,
        )
        agreed, problems = pipeline.agreements(list(prev.paths), old)
        # Messages name the previous tree's own paths, which are gone after the run.
        notes += [
            f"baseline {tree.what}: {p.replace(str(tree.then) + os.sep, '')}" for p in problems
        ]
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        baseline.save(str(cached), agreed)
    except (OSError, InputErrors) as exc:
        why = exc.errors[0].message if isinstance(exc, InputErrors) else str(exc)
        notes.append(f"baseline not cached in {cached.parent}: {why}")
    else:
        print(f"edge-verify: baseline {given}: cached as {cached}", file=sys.stderr)
    return baseline.Baseline(agreed), notes
