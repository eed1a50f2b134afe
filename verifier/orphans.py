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


# --- directories that outlive no run ------------------------------------------------------

# The reaper: a tiny process that reads directory paths, one per line, until its
# standard input closes, then removes them. Its input is a pipe only the tool (and
# its forked children) hold, so it closes when the last of them ends, however that
# happens: a normal exit, an exception, Ctrl-C, or SIGKILL, which runs no cleanup.
_REAPER = (
    "import shutil, sys\n"
    "paths = [line[:-1] for line in sys.stdin if line.endswith('\\n')]\n"
    "for p in paths:\n"
    "    shutil.rmtree(p, ignore_errors=True)\n"
)
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


def private_dir(prefix: str, *, reap: bool = True) -> Path:
    """A new directory of mode 0700 (``mkdtemp``) that is removed when the tool ends,
    even by SIGKILL (unless ``reap`` is False: kept for a person to read). The caller
    still removes it when done; this is the backstop."""
    pipe = _reaper_input() if reap else None
    while True:
        # Named and handed to the reaper before it exists: no instant in which the
        # directory is there and nobody would remove it.
        path = os.path.join(tempfile.gettempdir(), prefix + secrets.token_hex(6))
        if pipe is not None:
            try:
                pipe.write(os.fsencode(path) + b"\n")
                pipe.flush()
            except OSError:
                pass
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return Path(path)
