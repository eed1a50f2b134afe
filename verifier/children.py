"""Programs the tool runs for the user, on a leash: an external translator
(``check --translator``, ``fuzz --translator``) and a kubeconfig's credential plugin.

Such a program is someone else's code, and may never answer, print without end,
leave a daemon behind, or keep its output open from a background child after it
exited (each seen: a hang, 8 GB of memory, a process running after the tool ended).
So every one runs:

- with a **deadline** for the whole call, from start to the last byte read: past
  it, the program and everything it started are killed and the call is an error
  naming the bound;
- with a **byte budget** on its standard output (the document the tool reads) and
  only the tail of its standard error kept;
- in a **session and process group of its own**, with standard input closed, and
  marked: ``LEASH_VAR`` in its environment, which its descendants inherit (a
  daemon that made a session of its own keeps it);
- **killed at the end of the call**, whatever the outcome: its process group, then
  every process carrying its mark; and when the tool itself dies, even by SIGKILL,
  the program by its parent-death signal and every marked descendant by the reaper
  (``verifier.orphans``), as the live pass's Envoys and directories are.

A program that must outlive one call (a translator's warm server) is started by
the user, not by this tool: the command the tool runs is a client of it.
"""

from __future__ import annotations

import os
import secrets
import selectors
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass

from verifier.orphans import LEASH_VAR, die_with_parent, reap_leash, release_leash
from verifier.peers import printable as one_line
from verifier.secrets import redact_text

STDERR_TAIL = 64 * 1024  # what is kept of a program's standard error: its last words
KILL_ROUNDS = 50  # a marked process that forks as fast as it is killed is given up on
_READ = 64 * 1024
_POLL_S = 0.05
_WAIT_S = 3600.0  # one wait at most: a deadline far off (1e300 s) is waited in pieces


class ChildError(Exception):
    """A program that could not be run to the end: ``code`` is one of ``bad-command``,
    ``not-found``, ``cannot-start``, ``timeout``, ``too-much-output``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Ended:
    """A program that exited: its exit code (negative: the signal that ended it), its
    whole standard output, and the tail of its standard error, made printable."""

    returncode: int
    stdout: bytes
    stderr: str

    def last_words(self) -> str:
        """Its last line on standard error, to quote in an error."""
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else "(no output on stderr)"


def printable(text: str) -> str:
    """A child's words as they may be printed: any private key redacted (a PEM block
    spans lines, so the whole text first), then each line as ``verifier.peers``
    makes a peer's words (control characters, an ANSI escape or a carriage return
    that rewrites the line before, written as escapes); the lines kept apart."""
    text = redact_text(text)
    return "\n".join(one_line(line, len(line) + 1) for line in text.split("\n"))


def parse_command(command: str, flag: str) -> list[str]:
    """A command line split as a shell would split it (no shell runs it)."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ChildError("bad-command", f"{flag}: cannot split {command!r}: {exc}") from None
    if not argv:
        raise ChildError("bad-command", f"{flag}: the command is empty")
    return argv


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    max_output: int,
    env: Mapping[str, str] | None = None,
    flags: tuple[str, str] = ("", ""),
) -> Ended:
    """Run ``argv`` to its end within ``timeout`` seconds and ``max_output`` bytes of
    standard output; ChildError otherwise. ``flags``: the options that raise the two
    bounds, named in the errors. Whatever happens, nothing it started is left."""
    time_flag, output_flag = flags
    leash = secrets.token_hex(8)
    environment = dict(os.environ if env is None else env)
    environment[LEASH_VAR] = leash
    reap_leash(leash)
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
    except FileNotFoundError:
        release_leash(leash)
        raise ChildError("not-found", f"no such program: {argv[0]}") from None
    except OSError as exc:
        release_leash(leash)
        why = exc.strerror or str(exc)
        raise ChildError("cannot-start", f"cannot run {argv[0]}: {why}") from None
    try:
        out, err, within = _collect(proc, time.monotonic() + timeout, max_output)
    finally:
        _kill_all(proc, leash)
        release_leash(leash)
    tail = printable(err.decode("utf-8", "replace"))
    if within == "timeout":
        raise ChildError("timeout", _bound(f"did not finish within {timeout:g}s", time_flag, tail))
    if within == "output":
        what = f"printed more than {max_output:,} bytes on stdout"
        raise ChildError("too-much-output", _bound(what, output_flag, tail))
    assert proc.returncode is not None
    return Ended(proc.returncode, out, tail)


def _bound(what: str, flag: str, tail: str) -> str:
    raise_it = f" (raise it with {flag})" if flag else ""
    said = tail.strip().splitlines()
    return f"{what}{raise_it}; it was stopped" + (f"; its last words: {said[-1]}" if said else "")


def _collect(
    proc: subprocess.Popen[bytes], deadline: float, budget: int
) -> tuple[bytes, bytes, str]:
    """(stdout, stderr's tail, how it ended: ``done``, ``timeout`` or ``output``).

    Done when the program has exited and its pipes are closed. When it exits, its
    process group is killed at once: a background child holding stdout open would
    otherwise keep the call waiting for an end of file that never comes."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    pipes = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    sel = selectors.DefaultSelector()
    for fd in pipes:
        sel.register(fd, selectors.EVENT_READ)
    pidfd: int | None = None
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pass  # an older kernel: its exit is polled for instead
    else:
        sel.register(pidfd, selectors.EVENT_READ)
    exited = False
    try:
        while pipes or not exited:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out), bytes(err[-STDERR_TAIL:]), "timeout"
            for key, _ in sel.select(min(left, _WAIT_S if pidfd is not None else _POLL_S)):
                if key.fd == pidfd:
                    sel.unregister(pidfd)
                    exited = True
                    _kill_group(proc)
                    continue
                chunk = os.read(key.fd, _READ)
                if not chunk:
                    sel.unregister(key.fd)
                    del pipes[key.fd]
                    continue
                buffer = pipes[key.fd]
                buffer += chunk
                if buffer is out and len(out) > budget:
                    return bytes(out), bytes(err[-STDERR_TAIL:]), "output"
                if buffer is err and len(err) > 2 * STDERR_TAIL:
                    del err[:-STDERR_TAIL]
            if pidfd is None and not exited and _has_exited(proc.pid):
                exited = True
                _kill_group(proc)
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
    return bytes(out), bytes(err[-STDERR_TAIL:]), "done"


def _has_exited(pid: int) -> bool:
    """Whether the program has exited, leaving it unreaped (its id still its own)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """The program's process group (the program included, if it still runs). Only
    while the program is unreaped: its zombie holds the group's id until then."""
    if proc.returncode is None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def marked(entry: str) -> list[int]:
    """The processes whose environment holds ``entry`` (``NAME=value``); zombies hold
    none. Through /proc: where there is none, nothing is found."""
    mark = f"{entry}\0".encode()
    found = []
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def leashed(leash: str) -> list[int]:
    """The processes that carry ``leash``: the program and what it started."""
    return marked(f"{LEASH_VAR}={leash}")


def _kill_all(proc: subprocess.Popen[bytes], leash: str) -> None:
    """The program, its process group and every process with its mark, until none is
    left; then the program reaped. Its group first, while the program's zombie
    still holds the group's id; the marks by content, never by a number the system
    may have reused."""
    _kill_group(proc)
    quiet = 0
    for _ in range(KILL_ROUNDS):
        found = leashed(leash)
        if not found:
            # A process caught in execve shows no environment for an instant (seen in
            # CI: a daemon `setsid`-ed by a credential plugin outlived one empty scan):
            # done only after two empty scans a moment apart.
            quiet += 1
            if quiet == 2:
                break
            time.sleep(0.005)
            continue
        quiet = 0
        for pid in found:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    if proc.returncode is None:
        with suppress(ProcessLookupError, PermissionError):
            proc.kill()
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
