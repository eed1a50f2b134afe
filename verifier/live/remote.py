"""The live pass against a Gateway someone else runs: a cluster's, reached over the network.

The nightly question is whether the cluster's edge does what its resources say, so
here nothing is started: no Envoy, no echo backends, no DNS. Requests go to the
Gateway's published address (``Gateway.status.addresses``, or ``--gateway-address``)
on the case's port, with the case's Host, and answers are judged by the runner's own
code, so a case means the same here as against the embedded data plane. That is
why ``RemoteTarget`` keeps ``EmbeddedHarness``'s interface (``send``,
``for_gateway``, ``to_outcome``, ``observe_mirrors``, ``settle``): the runner cannot
tell them apart, except through ``remote`` (cases that need our own backends' logs,
mirrors, are skipped with the reason).

Which pod answered is told by the backend's echo JSON, as in the conformance suite:
its ``namespace`` and ``pod``, and the Service from ``service`` (echo-basic and ours
write it) or, failing that, the Service whose name starts the pod's name.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from verifier.gatewayapi.addresses import Addressing
from verifier.gatewayapi.resources import Resources
from verifier.live.client import LiveResponse
from verifier.live.harness import EmbeddedHarness
from verifier.orphans import private_dir
from verifier.semantics.request import Outcome
from verifier.xds.snapshot import Snapshot

MIRRORS_SKIPPED = (
    "remote target: mirrors are seen in our own echo backends' request logs, and a "
    "cluster's backends are not ours to read"
)


@dataclass(frozen=True)
class Remote:
    """Where the cluster's Gateway is reached: its address, and where its ports are
    served from here when that differs (``--gateway-address NS/NAME=IP:80>8080``: a
    port-forward, a NodePort)."""

    gateway: tuple[str, str]
    address: str
    ports: tuple[tuple[int, int], ...] = ()

    def port(self, port: int) -> int:
        return dict(self.ports).get(port, port)

    @property
    def note(self) -> str:
        return f"remote: {self.gateway[0]}/{self.gateway[1]} at {self.address}"


class RemoteTarget(EmbeddedHarness):
    """``EmbeddedHarness``'s interface, with the cluster's Gateway as the data plane.

    Nothing of the embedded data plane is started; the inherited parts used are
    the pure ones: ``for_gateway`` and ``effective_request`` (the request as the
    models see it, so three-way verdicts compare like with like) and ``to_outcome``
    (the echo answer as an ``Outcome``). A work directory is made only for the
    throw-away client CA some cases ask for.
    """

    rewritten = False

    def __init__(
        self,
        resources: Resources,
        snapshot: Snapshot,
        target: Remote,
        *,
        addressing: Addressing | None = None,
    ) -> None:
        super().__init__(resources, snapshot, addressing=addressing)
        self.target_gateway = target
        self.notes = [target.note]

    async def start(self) -> RemoteTarget:
        self.workdir = private_dir("edge-remote-", reap=True)
        return self

    async def stop(self) -> None:
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def target(self, address: str, port: int) -> tuple[str, int] | None:
        """Every request goes to the Gateway, whatever address the models gave it
        (``send`` keeps that address in the request, so the models see it)."""
        return self.target_gateway.address, self.target_gateway.port(port)

    async def settle(self, quiet: float = 0.3, limit: float = 3.0) -> None:
        """No backend log to wait on: mirror cases are skipped in remote mode."""

    def observe_mirrors(self, resp: LiveResponse) -> LiveResponse:
        return resp

    def to_outcome(self, resp: LiveResponse) -> Outcome:
        """As the embedded harness's, once the answering pod is known by its Service
        (the embedded harness knows its pods because it started them)."""
        echo = resp.echo
        if echo is not None:
            ns, pod = str(echo.get("namespace")), str(echo.get("pod"))
            service = self._service_of(ns, pod, echo.get("service"))
            if service is not None:
                self.pods[(ns, pod)] = service
        return super().to_outcome(resp)

    def _service_of(self, ns: str, pod: str, named: object) -> tuple[str, str] | None:
        if isinstance(named, str) and (ns, named) in self.res.services:
            return ns, named
        # The longest Service name the pod's name starts with (Deployment pods are
        # named <deployment>-<hash>-<id>, and the conformance suite names its
        # Deployments after their Services).
        names = sorted(
            (name for (sns, name) in self.res.services if sns == ns and pod.startswith(name)),
            key=len,
        )
        return (ns, names[-1]) if names else None
