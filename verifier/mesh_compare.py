"""The mesh's comparisons: each mesh request answered where its client's traffic goes.

A mesh request (``Request.source``: the client workload) goes one of two ways, and
which is deployment data (docs/mesh.md, "Which traffic the sidecar sees"), read here
from the input layer (``verifier.gatewayapi.workloads``), never from the controller's
decisions (``mesh_attach``):

* **captured**: the client has a sidecar (its namespace is mesh-registered) and the
  capture covers the destination (``capture.aether.io/redirect-all``, or the ClusterIP
  of a mesh-registered Service). The Envoy model answers on *that client's* sidecar
  xDS, the connection redirected to the capture port (``Redirect(15001)``).
* **not captured**: kube-proxy sends the connection, unchanged, to a ready endpoint
  of the Service whose ClusterIP and port it was sent to, and refuses it when there
  is none. No xDS takes part and the Envoy model is not asked: ``kube_proxy`` answers,
  from the directory (``verifier.semantics.directory``), and that answer is held to
  the spec model's like any other (rule ``mesh-no-route-kube-proxy`` owns a
  disagreement).

Either answer is compared with the spec model's as the edge's are (``check.verdict``);
disagreements are ``Comparison`` objects, attributed to rules by ``rules/ownership.py``
as the edge's are. ``judge_sidecar`` is the reusable part: given the resources, a
workload and its sidecar's snapshot, the comparisons of that workload's requests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

from verifier.check import Assumed, Comparison, verdict
from verifier.gatewayapi import model as m
from verifier.gatewayapi import workloads as wl
from verifier.gatewayapi.resources import Resources
from verifier.semantics import witness as wt
from verifier.semantics.directory import (
    DEFAULT_TRUST_DOMAIN,
    BackendDirectory,
    backend_directory_from,
)
from verifier.semantics.envoy.model import BackendReply, EnvoyModel, ModelError, Redirect
from verifier.semantics.request import (
    Backend,
    Evaluation,
    Forwarded,
    Outcome,
    Request,
    RouteRef,
    Source,
    evolve,
)
from verifier.semantics.spec.mesh import spec_evaluate_mesh
from verifier.xds.snapshot import Snapshot

CAPTURED = Redirect(wl.CAPTURE_PORT)
KUBE_PROXY = "kube-proxy"
NO_RESPONSE = 0
FORWARDED = 200

SpecAnswer = Callable[[Request], Evaluation]


def sidecar_label(source: Source) -> str:
    """How a comparison names who answered: the client's sidecar."""
    return f"sidecar {source.line()}"


@dataclass
class Deployment:
    """Which way each mesh request goes: the input's deployment facts, as
    ``verifier.gatewayapi.workloads`` states them (``registry``: ``--mesh-registry``)."""

    res: Resources
    registry: frozenset[tuple[str, str]] = frozenset()
    _frontends: dict[tuple[str, int], m.Service] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for key in sorted(self.res.services):
            svc = self.res.services[key]
            if svc.cluster_ip and svc.cluster_ip != "None":
                for p in svc.ports:
                    self._frontends.setdefault((svc.cluster_ip, p.port), svc)

    def service(self, request: Request) -> m.Service | None:
        """The Service whose ClusterIP and port the request is sent to."""
        return self._frontends.get((request.address, request.port))

    def sidecar(self, source: Source) -> m.Workload | None:
        """The client workload, when it runs a sidecar."""
        found = wl.workload(self.res, source.namespace, source.workload)
        return found if found is not None and wl.has_sidecar(self.res, found) else None

    def captured(self, request: Request) -> bool:
        """Whether the client's sidecar sees the connection (else kube-proxy does)."""
        return self.capture(request)[0]

    def capture(self, request: Request) -> tuple[bool, str]:
        """Whether the client's sidecar sees the connection, and why (explain's trace)."""
        if request.source is None:
            return False, "not a mesh request"
        client = request.source.line()
        found = self.sidecar(request.source)
        if found is None:
            return False, f"client {client} has no sidecar: kube-proxy sends the connection"
        if wl.captures_all(found):
            return True, f"client {client}: its sidecar captures all outbound TCP"
        svc = self.service(request)
        if svc is not None and wl.mesh_service(self.res, self.registry, *svc.meta.key):
            ns, name = svc.meta.key
            return True, f"client {client}: its sidecar captures mesh-registered {ns}/{name}"
        return False, (
            f"client {client}: its sidecar captures mesh-registered Services only: "
            "kube-proxy sends the connection"
        )


def kube_proxy(
    directory: BackendDirectory, request: Request, reply: BackendReply | None = None
) -> Evaluation:
    """What kube-proxy does with a connection to a ClusterIP and port: the request
    reaches a ready endpoint of that Service as it was sent; with no ready endpoint,
    or no Service there, the connection is refused (no HTTP response). ``reply``: how
    the backend answers (its status and headers), as for the Envoy model."""
    trace = [f"kube-proxy: {request.line()}"]
    refs = sorted(
        r
        for r in directory.by_ip(request.address, request.port)
        if directory.services[(r.namespace, r.service)].cluster_ip == request.address
    )
    if not refs:
        trace.append(f"no Service has ClusterIP {request.address} port {request.port}: refused")
        return Evaluation(Outcome(NO_RESPONSE), tuple(trace))
    ref = refs[0]
    if not directory.ready(ref.namespace, ref.service):
        trace.append(f"Service {ref.namespace}/{ref.service} has no ready endpoint: refused")
        return Evaluation(Outcome(NO_RESPONSE), tuple(trace))
    headers = tuple((k, v) for k, v in request.headers if k != "host")
    forwarded = Forwarded(request.method, request.host, request.path, headers)
    trace.append(
        f"DNAT to a ready endpoint of Service {ref.namespace}/{ref.service}:{ref.port}; "
        "the request passes unchanged"
    )
    status = (reply.status if reply is not None else None) or FORWARDED
    answered = reply.headers if reply is not None else ()
    backend = Backend(ref.namespace, ref.service, ref.port)
    outcome = Outcome(status, (backend,), request=forwarded, response_headers=answered)
    return Evaluation(outcome, tuple(trace))


@dataclass
class SidecarJudgement:
    """What one sidecar's answers gave: the disagreements, the answers resting on an
    assumption, how many requests were asked, and, for each xDS route that answered
    (its xDS path), the first request it answered, pointed at the HTTPRoute match the
    route was made from when the xDS names one (where a finding about what the route
    dials can point, with a request that goes there)."""

    found: list[Comparison] = field(default_factory=list)
    assumed: list[Assumed] = field(default_factory=list)
    asked: int = 0
    seen: dict[str, wt.Witness] = field(default_factory=dict)


def judge_sidecar(
    res: Resources,
    source: Source,
    snapshot: Snapshot,
    witnesses: Iterable[wt.Witness],
    *,
    registry: frozenset[tuple[str, str]] = frozenset(),
    trust_domain: str = DEFAULT_TRUST_DOMAIN,
    spec: SpecAnswer | None = None,
    directory: BackendDirectory | None = None,
    model: EnvoyModel | None = None,
) -> SidecarJudgement:
    """The comparisons of ``source``'s captured requests among ``witnesses``, answered
    by the Envoy model on ``snapshot`` (its sidecar's xDS) and by the spec model.
    Raises ``ModelError`` when the Envoy model cannot read the snapshot."""
    deployment = Deployment(res, registry)
    if model is None:
        directory = directory or backend_directory_from(
            res, trust_domain=trust_domain, registry=registry
        )
        model = EnvoyModel(snapshot, directory)
    if spec is None:

        def spec(r: Request) -> Evaluation:
            return spec_evaluate_mesh(res, r, registry=registry, trace=False)

    answer = spec
    label = sidecar_label(source)
    out = SidecarJudgement()
    for w in witnesses:
        if w.request.source != source or not deployment.captured(w.request):
            continue
        out.asked += 1
        e = model.evaluate(w.request, trace=False, redirect=CAPTURED)
        route = e.outcome.route
        if route is not None and route.xds_path and route.xds_path not in out.seen:
            out.seen[route.xds_path] = _made_from(w, route)
        c = verdict(w, e, partial(answer, w.request), label)
        if isinstance(c, Assumed):
            out.assumed.append(c)
        elif c is not None:
            out.found.append(c)
    return out


def _made_from(w: wt.Witness, route: RouteRef) -> wt.Witness:
    """``w`` pointed at the HTTPRoute match ``route`` was made from, when it says."""
    if not route.httproute or "/" not in route.httproute:
        return w
    ns, name = route.httproute.split("/", 1)
    return evolve(w, route=(ns, name), rule=route.rule, match=route.match)


@dataclass
class SidecarXds:
    """Where each client's sidecar xDS comes from: ``given`` ones (``check --xds FILE
    --proxy NS/WORKLOAD``: only that workload's), or ``translate``d per workload, once
    (the reference translator; made by the pipeline, which may import it)."""

    given: Mapping[Source, Snapshot] = field(default_factory=dict)
    translate: Callable[[Source], Snapshot] | None = None
    _made: dict[Source, Snapshot] = field(default_factory=dict, repr=False)

    def of(self, source: Source) -> Snapshot | None:
        """The sidecar xDS of ``source``; None when there is none to judge."""
        if source in self.given:
            return self.given[source]
        if self.translate is None:
            return None
        found = self._made.get(source)
        if found is None:
            found = self._made[source] = self.translate(source)
        return found

    def why_not(self, source: Source | None = None) -> str:
        """Why ``source``'s sidecar xDS (or, with None, their clients') is not judged."""
        whose = source.line() if source is not None else "their clients"
        if self.given:
            named = ", ".join(s.line() for s in sorted(self.given))
            return f"--xds is the sidecar of {named} (--proxy), not of {whose}"
        return f"no sidecar xDS was given for {whose}"


@dataclass
class MeshAnswer:
    """Who answers a mesh request in the Envoy model's place, and what: the client's
    sidecar (the Envoy model on its xDS), kube-proxy, or nobody check can ask
    (``evaluation`` None: ``why``)."""

    evaluation: Evaluation | None
    by: str
    why: str = ""


@dataclass
class MeshJudgement:
    """Every mesh request's comparison: the disagreements, the unjudged answers
    (``assumed``), how many were asked, those whose client's sidecar xDS is not there
    (``unjudged``), each judged sidecar's xDS, each xDS route's first request
    (``SidecarJudgement.seen``), and the sidecars the Envoy model could not read."""

    found: list[Comparison] = field(default_factory=list)
    assumed: list[Assumed] = field(default_factory=list)
    asked: int = 0
    unjudged: list[wt.Witness] = field(default_factory=list)
    sidecars: dict[Source, Snapshot] = field(default_factory=dict)
    seen: dict[tuple[Source, str], wt.Witness] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # Why ``unjudged`` requests are (``SidecarXds.why_not`` of their first client).
    why: str = ""


@dataclass
class MeshPlane:
    """The mesh as check sees it: the deployment facts, the directory, the sidecars'
    xDS, and one Envoy model per sidecar (built once, when first asked)."""

    res: Resources
    sidecars: SidecarXds | None
    registry: frozenset[tuple[str, str]] = frozenset()
    trust_domain: str = DEFAULT_TRUST_DOMAIN
    _models: dict[Source, EnvoyModel] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.deployment = Deployment(self.res, self.registry)
        self.directory = backend_directory_from(
            self.res, trust_domain=self.trust_domain, registry=self.registry
        )

    def snapshot(self, source: Source) -> Snapshot | None:
        return None if self.sidecars is None else self.sidecars.of(source)

    def model(self, source: Source) -> EnvoyModel | None:
        """The Envoy model on ``source``'s sidecar xDS (``ModelError`` if unreadable)."""
        found = self._models.get(source)
        if found is None:
            snap = self.snapshot(source)
            if snap is None:
                return None
            found = self._models[source] = EnvoyModel(snap, self.directory)
        return found

    def answer(
        self, request: Request, reply: BackendReply | None = None, *, trace: bool = True
    ) -> MeshAnswer:
        """The answer check holds the spec model's to, for one mesh request."""
        captured, why = self.deployment.capture(request)
        if not captured:
            found = kube_proxy(self.directory, request, reply)
            if trace:
                found = Evaluation(found.outcome, (why, *found.trace))
            return MeshAnswer(found, KUBE_PROXY, why)
        assert request.source is not None
        label = sidecar_label(request.source)
        try:
            model = self.model(request.source)
        except ModelError as exc:
            return MeshAnswer(None, label, f"the Envoy model cannot read its xDS: {exc}")
        if model is None:
            reason = (
                self.sidecars.why_not(request.source)
                if self.sidecars is not None
                else "no sidecar xDS is judged here"
            )
            return MeshAnswer(None, label, reason)
        found = model.evaluate(request, reply, trace=trace, redirect=CAPTURED)
        if trace:
            found = Evaluation(found.outcome, (why, *found.trace))
        return MeshAnswer(found, label, why)

    def judge(self, witnesses: list[wt.Witness], spec: SpecAnswer) -> MeshJudgement:
        """Every witness answered (kube-proxy's, or its client's sidecar's) and compared
        with the spec's; a sidecar given (``--proxy``) is judged even if no witness is
        sent from it, so its xDS is read by the rules."""
        out = MeshJudgement()
        by_source: dict[Source, list[wt.Witness]] = {}
        for w in witnesses:
            source = w.request.source
            assert source is not None
            if self.deployment.captured(w.request):
                by_source.setdefault(source, []).append(w)
                continue
            out.asked += 1
            e = kube_proxy(self.directory, w.request)
            c = verdict(w, e, partial(spec, w.request), KUBE_PROXY)
            if isinstance(c, Comparison):
                out.found.append(c)
        given = self.sidecars.given if self.sidecars is not None else {}
        for source in sorted({*by_source, *given}):
            self._judge_sidecar(source, by_source.get(source, []), spec, out)
        return out

    def _judge_sidecar(
        self, source: Source, witnesses: list[wt.Witness], spec: SpecAnswer, out: MeshJudgement
    ) -> None:
        try:
            model = self.model(source)
        except ModelError as exc:
            out.problems.append(f"the sidecar of {source.line()}: {exc}")
            out.unjudged += witnesses
            return
        snapshot = self.snapshot(source)
        if model is None or snapshot is None:
            if witnesses and not out.why:
                out.why = (
                    self.sidecars.why_not()
                    if self.sidecars is not None
                    else "no sidecar xDS was given (--xds is the edge's)"
                )
            out.unjudged += witnesses
            return
        out.sidecars[source] = snapshot
        found = judge_sidecar(
            self.res, source, snapshot, witnesses, registry=self.registry, spec=spec, model=model
        )
        out.found += found.found
        out.assumed += found.assumed
        out.asked += found.asked
        out.seen.update(((source, path), w) for path, w in found.seen.items())
