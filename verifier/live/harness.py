"""An embedded live data plane: real Envoy, our xDS, echo backends, no cluster.

This is the oracle for "the Envoy model's decision equals real Envoy's": a
snapshot runs unmodified in its routing semantics (the few machine-local
rewrites, and why each is safe, are in ``bootstrap``), every Service a
cluster reaches is an echo backend that reports what it received, and
``to_outcome`` turns what came back into the shared ``Outcome``.

Start-up runs the independent parts concurrently (DNS, PKI, every echo
backend), then Envoy; a scenario is up in about 0.1 s plus Envoy's own start.
"""

from __future__ import annotations

import asyncio
import errno
import random
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from verifier.destinations import Destinations
from verifier.gatewayapi.addresses import Addressing
from verifier.gatewayapi.attach import DEFAULT_CONTROLLER
from verifier.gatewayapi.resources import Resources
from verifier.gatewayapi.workloads import service_account
from verifier.live.bootstrap import (
    BackendPlan,
    EndpointMapping,
    ServiceKey,
    listener_secrets,
    local_bootstrap,
    plan_backends,
    sds_secrets,
)
from verifier.live.client import LiveResponse, send
from verifier.live.dns import DnsServer
from verifier.live.echo import EchoBackend, EchoPort
from verifier.live.envoy_process import EnvoyProcess
from verifier.live.pki import Pki
from verifier.orphans import private_dir
from verifier.semantics.request import (
    Backend,
    Forwarded,
    Headers,
    Outcome,
    RedirectTarget,
    Request,
    host_header,
    normalize_headers,
)
from verifier.semantics.witness import UNTRUSTED_ISSUER
from verifier.xds.snapshot import Snapshot

# cases.yaml: "host: ... default: the Gateway address". A documentation address
# (RFC 5737), the same literal the Envoy model assumes, so both see one request.
GATEWAY_ADDRESS = "192.0.2.1"
EDGE_IDENTITY = "ns/edge-system/sa/aether-edge"  # the edge's own SPIFFE path (SDS "default")
DEFAULT_PORTS = {"http": 80, "https": 443}
# Request headers Envoy adds on its own; the Outcome does not model them.
ENVOY_REQUEST_PREFIXES = ("x-forwarded-", "x-envoy-")
# ... and the namespace harness's correlation header (``served.CORRELATION_HEADER``).
ENVOY_REQUEST_HEADERS = frozenset({"x-request-id", "x-edge-verify-id"})
# Response headers every answer carries whatever the configuration says.
TRANSPORT_RESPONSE_HEADERS = frozenset(
    {
        "date",
        "server",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "x-envoy-upstream-service-time",
    }
)
MIRROR_WEIGHT = 1_000_000  # Outcome.mirrors weight (ppm) for "observed on this request"
_used_ips: set[str] = set()


MESH_PORT = 15008


class HarnessError(RuntimeError):
    """The harness could not build or run the data plane (not a verdict on the config)."""


def _random_loopback() -> str:
    """A fresh 127.x.y.z (Linux routes all of 127/8 to lo); 127.0.x.x is left to the host."""
    while True:
        ip = f"127.{random.randint(1, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"
        if ip not in _used_ips:
            _used_ips.add(ip)
            return ip


class EmbeddedHarness:
    """DNS + echo backends + one Envoy running ``snapshot``; an async context manager.

    ``send`` replays a ``Request`` on the listener its destination reaches, as
    Envoy would pick it (the exact address, else the wildcard one on the port);
    ``to_outcome`` turns the answer into the shared ``Outcome``. The explicit
    maps of the machine-local rewrites: ``gateway_ports`` ((address, port) the
    xDS binds -> the loopback address Envoy really listens on; nothing is ever
    sent to a Gateway's own address), ``endpoint_mappings`` (pod IP -> loopback
    IP), ``service_ips`` (Service -> the IP its DNS name resolves to);
    ``destinations`` says where each Gateway is reached (``for_gateway`` aims a
    request there, as check does).
    """

    def __init__(
        self,
        resources: Resources,
        snapshot: Snapshot,
        *,
        trust_domain: str = "cluster.local",
        log_level: str = "warning",
        keep_workdir: bool = False,
        addressing: Addressing | None = None,
    ) -> None:
        self.res = resources
        self.destinations = Destinations.of(
            resources, DEFAULT_CONTROLLER, addressing or Addressing()
        )
        self.snapshot = snapshot
        self.trust_domain = trust_domain
        self.log_level = log_level
        self.keep_workdir = keep_workdir
        self.workdir: Path | None = None
        self.dns = DnsServer()
        self.backends: dict[ServiceKey, EchoBackend] = {}
        self.pods: dict[tuple[str, str], ServiceKey] = {}  # (namespace, pod) -> Service
        self.service_ips: dict[ServiceKey, str] = {}
        self.gateway_ports: dict[tuple[str, int], tuple[str, int]] = {}
        self.endpoint_mappings: list[EndpointMapping] = []
        self.notes: list[str] = []
        self.envoy: EnvoyProcess | None = None
        # Client certificates by issuer fingerprint (from cases), for requests that
        # name only the issuer (witnesses); see ``with_client_files``.
        self.client_certs: dict[str, tuple[str, str]] = {}
        self._untrusted: asyncio.Task[tuple[Path, Path]] | None = None

    async def __aenter__(self) -> EmbeddedHarness:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> EmbeddedHarness:
        self.workdir = private_dir("edge-live-", reap=not self.keep_workdir)
        plans, self.notes = plan_backends(self.res, self.snapshot)
        mesh = any(tls for p in plans.values() for _, tls in p.ports.values())
        pki = Pki(self.workdir / "pki") if mesh else None
        await asyncio.gather(self.dns.start(), pki.create() if pki else asyncio.sleep(0))
        started = await asyncio.gather(*(self._start_backend(p, pki) for p in plans.values()))
        for plan, backend in zip(plans.values(), started, strict=True):
            self.service_ips[plan.key] = backend.ip if backend else _random_loopback()
            for name in plan.dns_names:
                self.dns.add(name, self.service_ips[plan.key])
            if backend is not None:
                self.backends[plan.key] = backend
                self.pods[(plan.namespace, backend.pod)] = plan.key
        secrets = await self._secrets(pki)
        boot = local_bootstrap(
            self.snapshot,
            plans,
            self.backends,
            (self.dns.host, self.dns.port),
            secrets,
            self.workdir,
        )
        self.endpoint_mappings = boot.endpoint_mappings
        self.notes += boot.notes
        self.envoy = EnvoyProcess(boot.config, self.workdir, log_level=self.log_level)
        await self.envoy.start()
        for name, bound in boot.listener_ports.items():
            self.gateway_ports[bound] = self.envoy.listeners[name]
        return self

    async def _start_backend(self, plan: BackendPlan, pki: Pki | None) -> EchoBackend | None:
        """Bind the Service's ports on a fresh loopback IP (retrying if one is taken)."""
        if not plan.has_endpoints:
            return None  # no ready pod: the name resolves, nothing answers (503), as in a cluster
        ports = await self._echo_ports(plan, pki)
        for _attempt in range(50):
            backend = EchoBackend(plan.namespace, plan.service, _random_loopback(), ports)
            try:
                return await backend.start()
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
        raise HarnessError(f"no free loopback address for {plan.namespace}/{plan.service}")

    async def _echo_ports(self, plan: BackendPlan, pki: Pki | None) -> list[EchoPort]:
        """The Service's ports as its pods speak them (mesh ports with the SPIFFE
        identity of the pods' ServiceAccount)."""
        ports = []
        for port, (h2c, tls) in sorted(plan.ports.items()):
            ctx = None
            if tls:
                assert pki is not None
                sa = service_account(self.res, plan.namespace, plan.service)
                ident = f"spiffe://{self.trust_domain}/ns/{plan.namespace}/sa/{sa}"
                ctx = pki.server_context(
                    *await pki.issue(f"{plan.service}.{plan.namespace}", ident)
                )
            ports.append(EchoPort(port, h2c, ctx))
        return ports

    async def _secrets(self, pki: Pki | None) -> list[dict[str, Any]]:
        served = listener_secrets(self.snapshot)
        if pki is None:
            return served
        cert, key = await pki.issue("edge", f"spiffe://{self.trust_domain}/{EDGE_IDENTITY}")
        return served + sds_secrets(
            self.snapshot, cert.read_text(), key.read_text(), pki.ca_cert.read_text()
        )

    async def stop(self) -> None:
        if self.envoy is not None:
            await self.envoy.stop()
        await asyncio.gather(*(b.stop() for b in self.backends.values()))
        await self.dns.stop()
        for ip in self.service_ips.values():
            _used_ips.discard(ip)
        if self.workdir is not None and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # --- traffic ------------------------------------------------------------------------------

    @property
    def gateway_addresses(self) -> Mapping[tuple[str, str], str]:
        return self.destinations.addresses

    def for_gateway(self, gateway: tuple[str, str], request: Request) -> Request:
        """``request`` as it reaches ``gateway`` (``Destinations.sent``, as check aims it)."""
        return self.destinations.sent(gateway, request)

    def effective_request(self, request: Request) -> Request:
        """The request as sent: an empty Host becomes the destination address, or
        ``GATEWAY_ADDRESS`` when the request has none.

        Model cross-checks should evaluate this request, not the case's, so
        that both sides saw the same Host.
        """
        if request.host:
            return request
        return replace(
            request,
            host=host_header(request.address, request.port, request.scheme) or GATEWAY_ADDRESS,
        )

    def target(self, address: str, port: int) -> tuple[str, int] | None:
        """Where Envoy really listens for a connection to ``address``:``port``: the
        listener bound to that address, else the wildcard one; with no address, the
        port's only (or wildcard) listener."""
        on_port = {a: t for (a, p), t in self.gateway_ports.items() if p == port}
        wild = "::" if ":" in address else "0.0.0.0"
        if address:
            return on_port.get(address) or on_port.get(wild)
        if len(on_port) == 1:
            return next(iter(on_port.values()))
        return on_port.get("0.0.0.0") or on_port.get("::")

    async def send(
        self,
        request: Request,
        *,
        protocol: str = "http1",
        websocket_messages: Sequence[str] = (),
        timeout: float = 10.0,
    ) -> LiveResponse:
        req = await self.with_client_files(self.effective_request(request))
        target = self.target(req.address, req.port)
        if target is None:  # no listener for that destination: the connection is refused
            where = f"{req.address}:{req.port}" if req.address else f"port {req.port}"
            return LiveResponse(req, 0, protocol=protocol, error=f"no listener for {where}")
        how = {"protocol": protocol, "websocket_messages": websocket_messages, "timeout": timeout}
        return await self._transmit(req, target, **how)

    async def _transmit(self, req: Request, target: tuple[str, int], **how: Any) -> LiveResponse:
        """The request on the wire as it is (the namespace harness tags it)."""
        return await send(req, target, **how)

    async def with_client_files(self, request: Request) -> Request:
        """A request whose client certificate names only its issuer gets files: those
        registered in ``client_certs`` for that issuer, or, for the issuer no
        configuration trusts (``UNTRUSTED_ISSUER``), a certificate of a throw-away CA
        made for this run. Any other issuer without files is an error: sending
        another certificate would test something else."""
        cert = request.client_cert
        if cert is None or cert.cert_file:
            return request
        files = self.client_certs.get(cert.issuer)
        if files is None and cert.issuer == UNTRUSTED_ISSUER:
            if self._untrusted is None:
                self._untrusted = asyncio.ensure_future(self._untrusted_client())
            crt, key = await self._untrusted
            files = (str(crt), str(key))
        if files is None:
            raise ValueError(
                f"no client certificate of CA {cert.issuer[:12]} to send; "
                "register one in EmbeddedHarness.client_certs"
            )
        return replace(request, client_cert=replace(cert, cert_file=files[0], key_file=files[1]))

    async def _untrusted_client(self) -> tuple[Path, Path]:
        assert self.workdir is not None, "start the harness first"
        pki = await Pki(self.workdir / "untrusted-client-ca").create()
        return await pki.issue("untrusted-client", "spiffe://untrusted.invalid/client")

    async def attribute(self, responses: Sequence[LiveResponse]) -> list[LiveResponse]:
        """``responses`` with Envoy's access-log line each, where the harness has one
        (this one adds no access log to the xDS: unchanged)."""
        return list(responses)

    def _record_count(self) -> int:
        return sum(len(b.records) for b in self.backends.values())

    async def settle(self, quiet: float = 0.3, limit: float = 3.0) -> None:
        """Wait until no backend has logged anything for ``quiet`` s (mirrors are async)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        last, since = self._record_count(), loop.time()
        while loop.time() < deadline:
            await asyncio.sleep(0.05)
            now = self._record_count()
            if now != last:
                last, since = now, loop.time()
            elif loop.time() - since >= quiet:
                return

    def observe_mirrors(self, resp: LiveResponse) -> LiveResponse:
        """Attach the mirrored copies of ``resp``'s request (call after ``settle``).

        Envoy gives the shadow the primary's x-request-id; copies are found by
        it in every backend's log, minus the primary's own record.
        """
        rid = _echo_header(resp.echo, "x-request-id")
        if rid is None or resp.echo is None:
            return resp
        seen: Counter[tuple[str, str, int]] = Counter()
        for (ns, svc), backend in self.backends.items():
            for rec in backend.records:
                if rid in rec.header("x-request-id"):
                    seen[(ns, svc, rec.service_port)] += 1
        primary = self.pods.get((str(resp.echo.get("namespace")), str(resp.echo.get("pod"))))
        if primary is not None:
            key = (*primary, self._port_of(resp.echo, primary))
            seen[key] -= 1
        mirrors = [(ns, svc, port) for (ns, svc, port), n in seen.items() if n > 0]
        return replace(resp, mirrored=tuple(sorted(mirrors)))

    def _port_of(self, echo: Mapping[str, Any], service: ServiceKey) -> int:
        port = echo.get("servicePort")
        svc = self.res.services.get(service)
        if isinstance(port, int) and port != MESH_PORT:
            if svc is not None and all(p.port != port for p in svc.ports):
                # xDS that dials pod IPs reaches the targetPort: name the Service
                # port behind it (the lowest, when several share one targetPort). A
                # named targetPort is the number its EndpointSlices publish for it.
                published = {
                    name
                    for sl in self.res.endpoint_slices.values()
                    if (sl.meta.namespace, sl.service_name) == service
                    for name, number in sl.ports
                    if number == port
                }
                behind = sorted(
                    p.port for p in svc.ports if p.target_port == str(port) or p.name in published
                )
                return behind[0] if behind else port
            return port
        # The mesh path dials the workload's :15008, which names no Service
        # port; the identity is the Service, so a one-port Service is unambiguous.
        if svc is not None and len(svc.ports) == 1:
            return svc.ports[0].port
        if isinstance(port, int):
            return port
        backend = self.backends.get(service)
        ports = sorted(backend.bound) if backend else []
        return ports[0] if len(ports) == 1 else 0

    def to_outcome(self, resp: LiveResponse) -> Outcome:
        """The shared Outcome for a live answer (``answer_outcome``), ``backends`` = the
        one Service that answered (weight 1), named by the echo's pod."""
        notes: tuple[str, ...] = ()
        backends: tuple[Backend, ...] = ()
        echo = resp.echo
        if echo is not None and 200 <= resp.status < 300:
            key = self.pods.get((str(echo.get("namespace")), str(echo.get("pod"))))
            if key is None:
                notes = (f"echo pod {echo.get('pod')!r} is not one of ours",)
            else:
                backends = (Backend(key[0], key[1], self._port_of(echo, key)),)
        return answer_outcome(resp, backends, notes)


def answer_outcome(
    resp: LiveResponse, backends: tuple[Backend, ...] = (), notes: tuple[str, ...] = ()
) -> Outcome:
    """The shared Outcome for a live answer; fields a wire cannot show stay default.

    Live outcomes carry: ``status``; ``backends`` as the caller names them (who
    answered is the harness's knowledge); ``request`` = what the echo saw, minus
    headers Envoy adds itself; ``response_headers`` = all but transport headers
    (the backend's own included: the wire cannot tell who set them); ``redirect``
    from Location; ``mirrors`` = copies observed (weight 1 000 000 = seen on this
    request). Timeouts, ``invalid_weight`` and ``response_headers_removed`` are
    configuration, not observable.
    """
    notes = (resp.error, *notes) if resp.error else notes
    forwarded = None
    echo = resp.echo
    if echo is not None and 200 <= resp.status < 300:
        forwarded = Forwarded(
            method=str(echo.get("method", "")),
            host=str(echo.get("host", "")),
            path=str(echo.get("path", "")),
            headers=_client_headers(echo.get("headers") or {}),
        )
    return Outcome(
        status=resp.status,
        backends=backends,
        request=forwarded,
        response_headers=normalize_headers(
            (k, v) for k, v in resp.headers if k.lower() not in TRANSPORT_RESPONSE_HEADERS
        ),
        redirect=_redirect(resp) if 300 <= resp.status < 400 else None,
        mirrors=tuple(Backend(ns, svc, port, MIRROR_WEIGHT) for ns, svc, port in resp.mirrored),
        notes=notes,
    )


def _echo_header(echo: Mapping[str, Any] | None, name: str) -> str | None:
    for key, values in ((echo or {}).get("headers") or {}).items():
        if key.lower() == name and values:
            return str(values[0])
    return None


def _client_headers(headers: Mapping[str, Any]) -> Headers:
    pairs = []
    for name, values in headers.items():
        lname = str(name).lower()
        if lname in ENVOY_REQUEST_HEADERS or lname.startswith(ENVOY_REQUEST_PREFIXES):
            continue
        for value in values if isinstance(values, list) else [values]:
            pairs.append((lname, str(value)))
    return normalize_headers(pairs)


def _redirect(resp: LiveResponse) -> RedirectTarget | None:
    """Location as scheme/host/effective port/path; relative references resolve on the request."""
    location = resp.location
    if location is None:
        return None
    parts = urlsplit(location)
    scheme = parts.scheme or resp.request.scheme
    host, port = authority(parts.netloc) if parts.netloc else (resp.request.hostname, None)
    if port is None:
        port = DEFAULT_PORTS.get(scheme)
    return RedirectTarget(scheme, host or "", port, parts.path or "/")


def authority(netloc: str) -> tuple[str, int | None]:
    """(host, port) of a URL's authority as Envoy writes a redirect's: the port is what
    follows the last colon (outside IPv6 brackets), and the host keeps anything before
    it, a Host that already carried a port included ("h:8080" redirected to 8083 is
    "h:8080:8083", which ``urlsplit`` cannot read). Lower-cased, an IPv6 address
    without its brackets, as ``urlsplit``'s ``hostname``."""
    host = netloc.rpartition("@")[2]
    if host.startswith("["):
        name, _, rest = host.partition("]")
        name = name[1:]
        digits = rest[1:] if rest.startswith(":") else ""
    else:
        name, colon, digits = host.rpartition(":")
        if not colon or (digits and not digits.isdigit()):
            name, digits = host, ""
    return name.lower(), int(digits) if digits.isdigit() else None
