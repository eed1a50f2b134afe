"""A network namespace of its own for one live run, and a forked process living in it.

Envoy must bind the listener addresses the checked xDS names (0.0.0.0:80,
192.0.2.7:443, ...) and dial the pod IPs its endpoints name, unchanged. On the
host that would collide with whatever else listens there (another run, a web
server on :80) and could send test traffic to real pods. A fresh network
namespace has neither: only its own loopback, to which we add every address
the run needs, so the xDS is run as written and no packet can leave (there is
no other interface and no route).

The namespace belongs to a forked child (``unshare(CLONE_NEWNET)`` changes the
namespace of the calling thread only, and a forked child has one thread); the
asyncio harness (DNS, echo backends, ADS server, client) runs inside it, and
Envoy, started by it, inherits it. The namespace disappears with the last
process in it: the child exits on every path (``os._exit`` after sending its
answer, SIGTERM when the tool closes it or dies, see ``verifier.forked``), and
Envoy is killed when the child ends (``die_with_parent``), so nothing is left
to remove: no ``ip netns`` name is ever created.

It needs root or CAP_SYS_ADMIN; where ``unshare`` says no, ``NamespaceUnavailable``
says what was needed and the caller falls back to the rewriting harness.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import errno
import gc
import ipaddress
import os
import pickle
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from verifier.forked import child_signals
from verifier.orphans import die_with_parent

CLONE_NEWNET = 0x40000000  # <linux/sched.h>
IP = "/usr/sbin/ip"
NEEDS = "a network namespace of its own needs root or CAP_SYS_ADMIN (unshare(CLONE_NEWNET))"
CHILD_GRACE_S = 10.0  # for a stopped child to stop Envoy and remove its directory

T = TypeVar("T")


class NamespaceUnavailable(OSError):
    """No network namespace can be made here; the message says what is needed."""


class NamespaceRunError(RuntimeError):
    """The run inside the namespace failed; ``kind`` is the exception class it raised
    there (``EnvoyError``, ``HarnessError``...), the message is its own."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class InNamespace(Generic[T]):
    """What the child sends back: its value and what making the namespace cost."""

    value: T
    setup_seconds: float  # unshare + loopback up + every address added
    addresses: tuple[str, ...]


def _libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c")
    if name is None:
        raise NamespaceUnavailable(errno.ENOSYS, f"no C library to call unshare; {NEEDS}")
    return ctypes.CDLL(name, use_errno=True)


def unshare_network() -> None:
    """Move this (single-threaded) process into a new, empty network namespace."""
    if not hasattr(os, "fork") or not os.path.exists("/proc/self/ns/net"):
        raise NamespaceUnavailable(errno.ENOSYS, f"not Linux; {NEEDS}")
    if _libc().unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise NamespaceUnavailable(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}; {NEEDS}")


def local_addresses(candidates: Iterable[str]) -> list[str]:
    """The addresses to add to the namespace's loopback: unique IP literals, minus
    what loopback already answers (127/8, ::1) and wildcards; an IPv4-mapped address
    as its IPv4 one."""
    out: dict[str, None] = {}
    for text in candidates:
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            continue
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # ::ffff:A is A on the wire: the IPv4 address is the one to have
        if not (ip.is_loopback or ip.is_unspecified):
            out[str(ip)] = None
    return list(out)


def bring_up(addresses: Iterable[str]) -> None:
    """``lo`` up and every address on it (/32, /128), in one ``ip -batch`` run."""
    lines = ["link set lo up"]
    for addr in addresses:
        bits = 128 if ":" in addr else 32
        lines.append(f"address add {addr}/{bits} dev lo" + (" nodad" if bits == 128 else ""))
    done = subprocess.run(
        [IP, "-batch", "-"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=die_with_parent(),
    )
    if done.returncode != 0:
        raise NamespaceRunError("NamespaceError", f"ip -batch failed: {done.stderr.strip()}")


def namespace_id() -> int:
    """The inode of this process's network namespace (two runs never share one)."""
    return os.stat("/proc/self/ns/net").st_ino


_made: int | None = None  # the namespace this process (a run's child) made for itself


def made_here(inode: int) -> bool:
    """Whether ``inode`` is the namespace ``run_in_namespace`` made for this process:
    what may be changed freely (links, routes, forwarding, nft), unlike the host's."""
    return _made is not None and inode == _made


# --- the child ------------------------------------------------------------------------------


def _child(
    write_fd: int, addresses: list[str], work: Callable[[], Awaitable[T]], unshare: bool
) -> None:
    """Never returns: sends ('ok', InNamespace) / ('unavailable', why) / ('error', kind,
    message) and ends with ``os._exit``, so no parent state (its event loop, pytest)
    is ever run or finalised here."""
    status = 0
    try:
        child_signals()
        data = pickle.dumps(_answer(addresses, work, unshare))
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view) :]
    except BaseException:
        status = 1
    finally:
        with contextlib.suppress(OSError):
            os.close(write_fd)
        os._exit(status)


def _answer(
    addresses: list[str], work: Callable[[], Awaitable[T]], unshare: bool
) -> tuple[object, ...]:
    started = time.perf_counter()
    try:
        if unshare:
            unshare_network()
            global _made
            _made = namespace_id()
        bring_up(addresses)
    except NamespaceUnavailable as exc:
        return ("unavailable", str(exc.strerror or exc))
    except NamespaceRunError as exc:
        return ("error", exc.kind, str(exc))
    setup = time.perf_counter() - started
    # The fork copied the parent's "running loop" marker; this process has no loop
    # yet, so asyncio.run must not think it is nested.
    asyncio.events._set_running_loop(None)
    try:
        value = asyncio.run(_awaited(work))
    except Exception as exc:  # sent to the parent, which raises it
        return ("error", type(exc).__name__, str(exc))
    return ("ok", InNamespace(value, setup, tuple(addresses)))


async def _awaited(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


async def _read_all(fd: int) -> bytes:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 30)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    try:
        return await reader.read()
    finally:
        transport.close()


async def _reap(pid: int, *, stop: bool) -> None:
    """End (SIGTERM, then SIGKILL after the grace) and wait for the child, without
    holding up the other runs on the event loop."""
    if stop:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + CHILD_GRACE_S
    while True:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return
        await asyncio.sleep(0.01)


async def run_in_namespace(
    work: Callable[[], Awaitable[T]], addresses: Iterable[str], *, unshare: bool = True
) -> InNamespace[T]:
    """``await work()`` in a forked child inside a new network namespace whose loopback
    carries ``addresses``; its value comes back pickled.

    Raises ``NamespaceUnavailable`` when no namespace can be made, and
    ``NamespaceRunError`` (with the child's exception class and message) when
    ``work`` failed. Cancelling the caller stops the child, which stops Envoy.
    ``unshare=False`` runs in the current namespace (for tests of this plumbing).
    """
    wanted = local_addresses(addresses)
    read_fd, write_fd = os.pipe()
    # The child's collector must not walk (and so copy, page by page) every object
    # it inherited: frozen objects are never scanned. The parent thaws at once.
    gc.freeze()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        os.close(read_fd)
        _child(write_fd, wanted, work, unshare)
    gc.unfreeze()
    os.close(write_fd)
    answered = False
    try:
        data = await _read_all(read_fd)
        answered = True
    finally:
        await _reap(pid, stop=not answered)
    if not data:
        raise NamespaceRunError("ChildDied", "the live run's process ended without an answer")
    payload = pickle.loads(data)
    if payload[0] == "unavailable":
        raise NamespaceUnavailable(errno.EPERM, payload[1])
    if payload[0] == "error":
        raise NamespaceRunError(payload[1], payload[2])
    result: InNamespace[T] = payload[1]
    return result
