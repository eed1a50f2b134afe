"""Pods on one node: a network namespace per pod, linked to the run's own namespace.

Every pod of a mesh binds the same ports (its sidecar 0.0.0.0:15001 and :15008, its
application :3000), dials its own 127.0.0.1 for the sidecar's inbound cluster, and has
its outbound traffic captured by rules only it obeys. One network stack cannot hold
two of them, so each pod gets a network namespace of its own, as in a cluster, and the
run's namespace (``verifier.live.netns``: nothing in it reaches the host) plays the
node they run on:

- **links**: a veth pair per pod, ``eth0`` in the pod (its IP as /32, a default route
  via ``GATEWAY``) and ``vp<N>`` on the node (``GATEWAY`` on it, a /32 route to the
  pod), Calico's layout; the node forwards between pods.
- **kube-proxy** (its nftables mode): a connection to a Service's ClusterIP and port
  arriving from a pod is DNATed to one of the Service's ready endpoints, at random;
  one a pod makes to a Service that sends it back to that same pod is masqueraded
  (hairpin), as kube-proxy does. A ClusterIP without a ready endpoint has no rule:
  the connection fails (no route), as kube-proxy rejects it.
- **capture** (``capture``): in a pod, its application's outbound TCP to the captured
  destinations is REDIRECTed to the sidecar's :15001; the sidecar runs in the group
  ``PROXY_GID`` and its own connections are never captured (Istio's istio-proxy
  convention), nor are connections to the pod's loopback.

The namespaces are held by file descriptors of this process (no ``ip netns`` name, no
process in them but the pod's own Envoy): they, and every nft table in them, go when
the run's process ends. Entering one is per thread (``setns``): ``entered`` switches
the calling thread for the length of a synchronous block, so a socket made there
(``listen``, ``connect``) lives in the pod whatever thread later uses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from verifier.live.envoy_process import listening_sockets
from verifier.live.netns import CLONE_NEWNET, IP, NamespaceRunError, made_here
from verifier.orphans import die_with_parent

# The sidecar's group: its own connections are never captured. Istio excludes its
# proxy's uid and gid 1337; the group alone lets the sidecar keep root's access to its
# binary and files wherever they are (a venv in a directory closed to other users).
PROXY_GID = 1337
CAPTURE_PORT = 15001  # where captured connections are redirected (docs/mesh.md)
GATEWAY = "169.254.1.1"  # the node's address on every pod link
LINK_PREFIX = "vp"  # the node's end of each pod's link: vp0, vp1...
NFT = "nft"

_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _setns(fd: int) -> None:
    if _LIBC.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")


def _this_namespace() -> int:
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


@dataclass(frozen=True)
class ServiceRule:
    """kube-proxy's view of one Service port: its frontend and its ready endpoints."""

    cluster_ip: str
    port: int
    endpoints: tuple[tuple[str, int], ...]  # (pod IP, target port)


async def _run(argv: Sequence[str], stdin: str, preexec: Callable[[], None] | None) -> None:
    """One short program (``ip``, ``nft``), in a pod when ``preexec`` enters it."""
    leash = die_with_parent()

    def start() -> None:
        if preexec is not None:
            preexec()
        if leash is not None:
            leash()

    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=start,
    )
    _, err = await proc.communicate(stdin.encode())
    if proc.returncode != 0:
        what = " ".join(argv)
        raise NamespaceRunError("PodNetworkError", f"{what} failed: {err.decode().strip()}")


@dataclass
class Pod:
    """One pod's network namespace: ``ip`` on its ``eth0``, ``link`` the node's end."""

    name: str
    ip: str
    fd: int
    node: int
    link: str

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """This thread in the pod's namespace for the block (keep it synchronous)."""
        _setns(self.fd)
        try:
            yield
        finally:
            _setns(self.node)

    def preexec(self) -> Callable[[], None]:
        """For a program started in the pod: enter it between fork and exec."""
        fd = self.fd

        def enter() -> None:
            if _LIBC.setns(fd, CLONE_NEWNET) != 0:
                os._exit(126)

        return enter

    def listen(self, ip: str, port: int, reuse_port: bool = False) -> socket.socket:
        """A listening socket in the pod (``verifier.live.echo.bind_listener``)."""
        from verifier.live.echo import bind_listener

        with self.entered():
            return bind_listener(ip, port, reuse_port)

    def socket(self, info: tuple[Any, ...]) -> socket.socket:
        """A socket made in the pod, for ``info`` (a getaddrinfo entry): what the pod's
        application connects with (aiohttp's ``socket_factory``), so that its
        connections leave from the pod and the pod's capture sees them."""
        with self.entered():
            return socket.socket(info[0], info[1], info[2])

    def listening(self, port: int) -> bool:
        """Something listens on the pod's ``port`` (its wildcard or its IP), read from
        the pod's /proc/net/tcp: no connection is made (one to a capture listener
        would be passed through to itself)."""
        with self.entered():
            return bool(listening_sockets(self.ip, port) or listening_sockets("0.0.0.0", port))

    async def connect(
        self, address: str, port: int, source_port: int, timeout: float
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection the pod's application makes, from ``source_port`` (chosen
        by the caller: it names the connection in the sidecar's access log)."""
        with self.entered():
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.ip, source_port))
            sock.setblocking(False)
            loop = asyncio.get_running_loop()
            await asyncio.wait_for(loop.sock_connect(sock, (address, port)), timeout)
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock)

    async def capture(self, destinations: Sequence[str] | None) -> None:
        """Redirect the application's outbound TCP to ``destinations`` (every address
        when None) to the sidecar's :15001."""
        scope = "" if destinations is None else f"ip daddr {{ {', '.join(destinations)} }} "
        if destinations is not None and not destinations:
            return
        rules = f"""
table ip aether_capture {{
  chain output {{
    type nat hook output priority -100; policy accept;
    meta skgid {PROXY_GID} return
    ip daddr 127.0.0.0/8 return
    meta l4proto tcp {scope}redirect to :{CAPTURE_PORT}
  }}
}}
"""
        await _run([NFT, "-f", "-"], rules, self.preexec())


@dataclass
class Node:
    """The run's own namespace as the node the pods run on."""

    fd: int = field(default_factory=_this_namespace)
    pods: list[Pod] = field(default_factory=list)

    async def add_pods(self, wanted: Sequence[tuple[str, str]]) -> list[Pod]:
        """A namespace, a link and routes for each (name, IP); returns them in order.
        Only in a run's own namespace: links, routes and forwarding are never added
        to the host's (init's)."""
        if not made_here(os.fstat(self.fd).st_ino):
            raise NamespaceRunError(
                "PodNetworkError",
                "pods are made only inside a run's own network namespace "
                "(verifier.live.netns.run_in_namespace), never in the host's",
            )
        made: list[Pod] = []
        for name, ip in wanted:
            if _LIBC.unshare(CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")
            fd = _this_namespace()
            _setns(self.fd)
            made.append(Pod(name, ip, fd, self.fd, f"{LINK_PREFIX}{len(self.pods) + len(made)}"))
        pid = os.getpid()
        lines = ["link set lo up"]
        for pod in made:
            lines += [
                f"link add {pod.link} type veth peer name eth0 netns /proc/{pid}/fd/{pod.fd}",
                f"address add {GATEWAY}/32 dev {pod.link}",
                f"link set {pod.link} up",
                f"route add {pod.ip}/32 dev {pod.link}",
            ]
        await _run([IP, "-batch", "-"], "\n".join(lines) + "\n", None)
        with open("/proc/sys/net/ipv4/ip_forward", "w", encoding="ascii") as out:
            out.write("1\n")
        inside = "\n".join(
            [
                "link set lo up",
                "link set eth0 up",
                "address add {ip}/32 dev eth0",
                f"route add {GATEWAY}/32 dev eth0 scope link",
                f"route add default via {GATEWAY} dev eth0",
            ]
        )
        await asyncio.gather(
            *(_run([IP, "-batch", "-"], inside.format(ip=p.ip) + "\n", p.preexec()) for p in made)
        )
        self.pods += made
        return made

    async def kube_proxy(self, services: Sequence[ServiceRule]) -> None:
        """kube-proxy's rules for ``services`` (module docstring)."""
        chains, elements = [], []
        for i, rule in enumerate(s for s in services if s.endpoints):
            targets = ", ".join(
                f"{n} : {ip} . {port}" for n, (ip, port) in enumerate(rule.endpoints)
            )
            chains.append(
                f"  chain svc{i} {{\n    meta l4proto tcp dnat to numgen random mod "
                f"{len(rule.endpoints)} map {{ {targets} }}\n  }}"
            )
            elements.append(f"{rule.cluster_ip} . tcp . {rule.port} : jump svc{i}")
        hairpins = ", ".join(f"{p.ip} . {p.ip}" for p in self.pods)
        rules = "\n".join(
            [
                "table ip kube_proxy {",
                "  map services { type ipv4_addr . inet_proto . inet_service : verdict; }",
                "  set hairpin { type ipv4_addr . ipv4_addr; }",
                *chains,
                "  chain prerouting {",
                "    type nat hook prerouting priority dstnat; policy accept;",
                "    ip daddr . meta l4proto . th dport vmap @services",
                "  }",
                "  chain postrouting {",
                "    type nat hook postrouting priority srcnat; policy accept;",
                "    ct status dnat ip saddr . ip daddr @hairpin masquerade",
                "  }",
                "}",
                *(
                    [f"add element ip kube_proxy services {{ {', '.join(elements)} }}"]
                    if elements
                    else []
                ),
                *([f"add element ip kube_proxy hairpin {{ {hairpins} }}"] if self.pods else []),
            ]
        )
        await _run([NFT, "-f", "-"], rules + "\n", None)

    def inode(self) -> int:
        """The node's namespace, by inode (what a leak check looks for in /proc)."""
        return os.fstat(self.fd).st_ino

    def close(self) -> None:
        """Let go of every pod namespace: each goes once its last process has ended."""
        for pod in self.pods:
            with contextlib.suppress(OSError):
                os.close(pod.fd)
        self.pods = []
        with contextlib.suppress(OSError):
            os.close(self.fd)
