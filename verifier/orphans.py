"""Child processes that die with the tool, even when it is killed with SIGKILL.

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
import signal
import sys
from collections.abc import Callable

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
