"""Child processes and temporary directories that end with the tool, even on SIGKILL.

A SIGKILLed parent cannot clean up, and its children are re-parented to init: an
embedded Envoy then keeps listening (seen 23 s later on this machine). Linux lets a
child ask to be killed when its parent dies (``prctl(PR_SET_PDEATHSIG)``), which it
must do itself, between fork and exec. The signal follows the *thread* that started
the child, so this is for children started from a long-lived thread (the asyncio
loop of the live pass), not from short-lived worker threads.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name, use_errno=True) if name else None


_LIBC = _libc()


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child killed (SIGKILL) when the tool dies, or
    None where the platform cannot do it (the tool's own cleanup still runs). The
    function only calls prctl (no import, no lock), so it is safe after a fork from
    a process with idle helper threads (asyncio's resolver pool)."""
    libc = _LIBC
    if libc is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def follow_parent(sig: signal.Signals) -> None:
    """Have this process (a forked worker) sent ``sig`` when its parent dies, so its
    own cleanup runs and it does not work on for a tool that is gone."""
    libc = _LIBC
    if libc is None:
        return
    parent = os.getppid()
    libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), sig)


# --- directories and programs that outlive no run ----------------------------------------

# The reaper: a tiny process that reads lines until its standard input closes, then
# removes the directories and kills the programs they name. Its input is a pipe only
# the tool (and its forked children) hold, so it closes when the last of them ends,
# however that happens: a normal exit, an exception, Ctrl-C, or SIGKILL, which runs
# no cleanup. A line is a directory's path, or (after a NUL, which no path holds) ``+``
# or ``-`` and a leash: the value of ``LEASH_VAR`` in the environment of a program the
# tool started (``verifier.children``), which its descendants inherit, daemons that
# left its process group and session included. Killed by that mark, never by a
# process id or group, which the system may have given to someone else since.
LEASH_VAR = "EDGE_VERIFY_LEASH"
_REAPER = """\
import os, shutil, signal, sys
dirs, leashes = [], set()
for line in sys.stdin.buffer:
    if not line.endswith(b"\\n"):
        break
    if line.startswith(b"\\0+"):
        leashes.add(line[2:-1])
    elif line.startswith(b"\\0-"):
        leashes.discard(line[2:-1])
    else:
        dirs.append(line[:-1])
marks = [b"LEASH_VAR=" + m + b"\\0" for m in leashes]
for _ in range(50 if marks else 0):
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/" + pid + "/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if any(m in env for m in marks):
            found += 1
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
    if not found:
        break
for p in dirs:
    shutil.rmtree(p, ignore_errors=True)
""".replace("LEASH_VAR", LEASH_VAR)
_reaper: subprocess.Popen[bytes] | None = None


def _reaper_input() -> IO[bytes] | None:
    global _reaper
    if _reaper is None or _reaper.stdin is None or _reaper.stdin.closed:
        try:
            _reaper = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _REAPER],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                # Its own session: the terminal's Ctrl-C, sent to the tool's process
                # group, must not end it before the tool's input to it closes.
                start_new_session=True,
                close_fds=True,
            )
        except OSError:
            return None  # the tool's own cleanup still runs
    return _reaper.stdin


def _tell_reaper(line: bytes) -> bool:
    pipe = _reaper_input()
    if pipe is None:
        return False
    try:
        pipe.write(line + b"\n")
        pipe.flush()
    except OSError:
        return False
    return True


def reap_leash(leash: str) -> None:
    """Have every process that carries ``leash`` (see ``LEASH_VAR``) killed when the
    tool ends, even by SIGKILL; the caller still kills them when done (``release_leash``
    then). Before the program starts: no instant in which it runs and nobody would."""
    _tell_reaper(b"\0+" + leash.encode())


def release_leash(leash: str) -> None:
    """The processes carrying ``leash`` are gone: the reaper forgets it."""
    _tell_reaper(b"\0-" + leash.encode())


# sockaddr_un.sun_path holds 108 bytes with its NUL: a longer socket path cannot be
# bound at all (Envoy refuses its bootstrap), so where sockets live must leave room.
UNIX_PATH_MAX = 107


def private_dir(prefix: str, *, reap: bool = True, room: int = 0) -> Path:
    """A new directory of mode 0700 (``mkdtemp``) that is removed when the tool ends,
    even by SIGKILL (unless ``reap`` is False: kept for a person to read). The caller
    still removes it when done; this is the backstop.

    ``room``: the longest path the caller will put under it that must fit in a Unix
    socket's address. Where the temporary directory (``TMPDIR``, pytest's deep
    ``tmp_path``) leaves less than that, the directory goes in ``/tmp`` instead."""
    parent = tempfile.gettempdir()
    if room and len(os.fsencode(parent)) + 1 + len(prefix) + 12 + room > UNIX_PATH_MAX:
        parent = "/tmp"
    while True:
        # Named and handed to the reaper before it exists: no instant in which the
        # directory is there and nobody would remove it.
        path = os.path.join(parent, prefix + secrets.token_hex(6))
        if reap:
            _tell_reaper(os.fsencode(path))
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return Path(path)
