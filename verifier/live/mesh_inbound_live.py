"""A backend sidecar's :15008, live: does it admit exactly mutual TLS from its trust domain?

A mesh case shows what a client's sidecar does; it cannot show what a backend's
sidecar lets in, because every client of the harness holds a certificate of the trust
domain. A sidecar that admits a client of another trust domain (its SAN check
widened or gone) answers every case as it should. So, with ``--witnesses``, the live
mesh also sends ``check``'s own probes (``rules/mesh_inbound.py``: a mesh peer's
connection, one without a client certificate, one with a certificate of another trust
domain, cleartext, an SNI no port has) to each backend sidecar's :15008, from the node,
with certificates the run's CA issues for exactly the identities the probes name, and
judges each three ways as a case is:

- **the spec**: admitted only when it is a mesh peer's connection (docs/mesh.md);
- **the Envoy model**, on the sidecar's served xDS (``mesh_inbound.port_probes``);
- **real Envoy**: admitted when the application behind the sidecar answers an
  HTTP/1.1 request sent over the connection; refused when the handshake fails, the
  connection is closed or nothing answers.

A probe real Envoy and the Envoy model both admit where the spec refuses it is the
xDS's mistake, confirmed (EV803), at the Service port as ``check``'s EV924 is.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.live.mesh_pods import MeshPod
from verifier.live.results import WITNESS, CaseResult
from verifier.live.verdict import ODD_ENVOY, ODD_LIVE, ODD_XDS
from verifier.rules.mesh_inbound import PortProbe
from verifier.semantics.directory import MESH_PORT

PROBE_TIMEOUT = 3.0
CODES = {ODD_LIVE: "EV802", ODD_XDS: "EV803", ODD_ENVOY: "EV805"}


@dataclass(frozen=True)
class InboundProbe:
    """One probe, sent to one pod of the workload whose sidecar it judges."""

    pod: MeshPod
    probe: PortProbe


def identities(probes: Sequence[InboundProbe]) -> set[str]:
    """Every SPIFFE ID a probe's client certificate names (issued by the run's CA)."""
    out: set[str] = set()
    for p in probes:
        cert = p.probe.probe.request.client_cert
        out.update(cert.uri_sans or () if cert is not None else ())
    return out


def write_certificates(
    directory: Path, issued: Mapping[str, tuple[str, str]], wanted: set[str]
) -> dict[str, tuple[Path, Path]]:
    """The issued PEMs of ``wanted`` as files (``ssl`` loads a chain from files only)."""
    out = {}
    for i, identity in enumerate(sorted(wanted)):
        cert, key = directory / f"probe-{i}.crt", directory / f"probe-{i}.key"
        cert.write_text(issued[identity][0], encoding="utf-8")
        key.write_text(issued[identity][1], encoding="utf-8")
        out[identity] = (cert, key)
    return out


async def admitted(ip: str, p: PortProbe, certs: Mapping[str, tuple[Path, Path]]) -> bool:
    """Whether the sidecar at ``ip``:15008 lets the probe's connection reach the
    application (module docstring). The server's certificate is not judged: the
    question is what the sidecar admits."""
    request = p.probe.request
    tls: ssl.SSLContext | None = None
    if request.scheme == "https":
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
        cert = request.client_cert
        if cert is not None and cert.uri_sans:
            tls.load_cert_chain(*certs[cert.uri_sans[0]])
    head = f"GET / HTTP/1.1\r\nHost: {request.host}\r\nConnection: close\r\n\r\n".encode()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                ip, MESH_PORT, ssl=tls, server_hostname=request.sni if tls else None
            ),
            PROBE_TIMEOUT,
        )
    except (OSError, TimeoutError, ssl.SSLError):
        return False
    try:
        writer.write(head)
        line = await asyncio.wait_for(reader.readline(), PROBE_TIMEOUT)
    except (OSError, TimeoutError, ssl.SSLError, asyncio.IncompleteReadError):
        return False
    finally:
        writer.close()
        with suppress(OSError, ssl.SSLError, TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), PROBE_TIMEOUT)
    return line.startswith(b"HTTP/")


def _odd(spec: bool, model: bool, live: bool) -> str | None:
    if spec == model == live:
        return None
    if model == live:
        return ODD_XDS
    if spec == live:
        return ODD_ENVOY
    return ODD_LIVE


def _say(admits: bool) -> str:
    return "admitted" if admits else "refused"


def judge(
    ctx: Context, scenario: str, rule: str, sent: InboundProbe, live: bool, seconds: float
) -> tuple[CaseResult, list[Finding]]:
    """One probe's three answers; a finding at the Service port where they differ."""
    p, pod = sent.probe, sent.pod
    spec, model = p.probe.admit, p.reached is not None
    svc = p.service
    port = svc.ports[p.index].port
    name = f"{svc.meta.namespace}/{svc.meta.name}:{port}, inbound of {pod.workload}: {p.probe.what}"
    odd = _odd(spec, model, live)
    findings = []
    if odd is not None:
        where = svc.meta.where(f"spec.ports[{p.index}]")
        note = f"{p.probe.what}, sent to the sidecar of pod {pod.name} on :{MESH_PORT}"
        findings.append(
            new(
                CODES[odd],
                rule,
                file=where.file,
                line=where.line,
                resource=f"Service {svc.meta.namespace}/{svc.meta.name}",
                xds_path="listeners[inbound]",
                request=p.probe.request.to_json(),
                note=note,
                spec=_say(spec),
                envoy=_say(model),
                live=_say(live),
            )
        )
    problems = () if odd is None else (f"live {_say(live)}, the spec says {_say(spec)}",)
    result = CaseResult(
        scenario=scenario,
        name=name,
        kind=WITNESS,
        passed=odd is None,
        attempts=1,
        request=f"to pod {pod.name} ({pod.ip}):{MESH_PORT}: {p.probe.what}",
        expected={"admitted": spec},
        observed={"admitted": live},
        spec_agrees=spec == live,
        envoy_model_agrees=model == live,
        xds_route="",
        problems=problems,
        odd_one_out=odd,
        seconds=seconds,
    )
    return result, findings


async def send_all(
    ctx: Context,
    scenario: str,
    rule: str,
    probes: Sequence[InboundProbe],
    certs: Mapping[str, tuple[Path, Path]],
) -> list[tuple[CaseResult, list[Finding]]]:
    async def one(sent: InboundProbe) -> tuple[CaseResult, list[Finding]]:
        began = time.monotonic()
        live = await admitted(sent.pod.ip, sent.probe, certs)
        return judge(ctx, scenario, rule, sent, live, time.monotonic() - began)

    return list(await asyncio.gather(*(one(p) for p in probes)))
