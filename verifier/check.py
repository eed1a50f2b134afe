"""The check context: both models, the witness comparisons, and where things are.

Rules stay small because the expensive, shared work happens here once: every
witness request is evaluated by the spec model and the Envoy model, and every
disagreement is attributed to exactly one owning rule, so one wrong
behaviour yields one finding, from the rule whose feature it breaks.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from verifier.destinations import Destinations
from verifier.features import DEFAULT_PROFILE, PROFILES
from verifier.findings import Finding, new
from verifier.forked import map_forked
from verifier.gatewayapi import addresses as addr
from verifier.gatewayapi import model as m
from verifier.gatewayapi.resources import Resources
from verifier.semantics import witness as wt
from verifier.semantics.cases import Case, possible_statuses
from verifier.semantics.directory import DEFAULT_TRUST_DOMAIN, backend_directory_from
from verifier.semantics.envoy.model import BackendReply, EnvoyModel, ModelError
from verifier.semantics.request import (
    Backend,
    Caveat,
    ClientCert,
    Evaluation,
    Outcome,
    Request,
    RouteRef,
    apply_response_ops,
    evolve,
)
from verifier.semantics.shares import INVALID_STATUS, UNAVAILABLE_STATUS, status_shares
from verifier.semantics.spec.mesh import spec_evaluate_mesh
from verifier.semantics.spec.model import spec_evaluate
from verifier.semantics.witness_mesh import MESH
from verifier.xds.snapshot import Snapshot

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import Route, RouteConfiguration, VirtualHost

if TYPE_CHECKING:
    from verifier.baseline import Baseline, Digests
    from verifier.mesh_compare import MeshAnswer, MeshJudgement, MeshPlane, SidecarXds
    from verifier.rules.support.other_routes import Unjudged
    from verifier.structural import Structural

DEFAULT_CONTROLLER = "gateway.aether.io/edge"
# The spec_cache's key for mesh answers (a mesh request has no Gateway; it carries
# its client as ``source``).
MESH_KEY = ("", "mesh")


def outcome_diff(spec: Outcome, envoy: Outcome) -> tuple[str, ...]:
    """The decision fields on which two outcomes differ."""
    if envoy.may_refuse and spec.status == 0:
        return ()  # Envoy may refuse the handshake too: nothing after it to compare
    diffs = []
    envoy_statuses = possible_statuses(envoy) - ({0} if envoy.may_refuse else set())
    if possible_statuses(spec) != envoy_statuses or spec.status != envoy.status:
        diffs.append("status")
    envoy_backends = named_as(spec.backends, envoy.backends)
    if spec.backends != envoy_backends:
        diffs.append("backends")
    # Shares are relative: compare the invalid (500) and unavailable (503) shares
    # normalised, as a client counts them (shares.status_shares).
    if spec.invalid_weight != envoy.invalid_weight and _share(spec) != _share(envoy):
        diffs.append("invalid_weight")
    if (spec.unavailable_weight or envoy.unavailable_weight) and status_shares(spec).get(
        UNAVAILABLE_STATUS
    ) != status_shares(envoy).get(UNAVAILABLE_STATUS):
        diffs.append("unavailable_weight")
    sr, er = spec.request, envoy.request
    if (sr is None) != (er is None):
        diffs.append("forwarded")
    elif sr is not None and er is not None:
        for f in ("host", "path", "method", "headers"):
            if getattr(sr, f) != getattr(er, f):
                diffs.append(f"request.{f}")
    if _nonempty(spec.response_headers) != _nonempty(envoy.response_headers) or not (
        _same_response_ops(spec, envoy)
    ):
        diffs.append("response_headers")
    if set(spec.response_headers_removed) != set(envoy.response_headers_removed):
        diffs.append("response_headers_removed")
    if spec.redirect != envoy.redirect:
        if spec.redirect is None or envoy.redirect is None:
            diffs.append("redirect")
        else:
            for f in ("scheme", "host", "port", "path"):
                a, b = getattr(spec.redirect, f), getattr(envoy.redirect, f)
                if f == "host":  # host names compare case-insensitively
                    a, b = a.lower(), b.lower()
                if a != b:
                    diffs.append(f"redirect.{f}")
    if spec.mirrors != named_as(spec.mirrors, envoy.mirrors):
        diffs.append("mirrors")
    if spec.request is not None and envoy.request is not None and deadline(spec) != deadline(envoy):
        diffs.append("timeouts")
    if "backends" in diffs and _shares(spec) == _shares(
        dataclasses.replace(envoy, backends=envoy_backends)
    ):
        diffs.remove("backends")  # same proportions, other scale: equivalent
    return tuple(diffs)


def named_as(wanted: tuple[Backend, ...], found: tuple[Backend, ...]) -> tuple[Backend, ...]:
    """``found`` with each backend called by the name ``wanted`` uses for it, when the
    xDS cannot tell them apart (its ``aliases``: Services sharing the pods it dials)."""
    if not any(b.aliases for b in found):
        return found
    names = {(b.namespace, b.name, b.port) for b in wanted}
    merged: dict[tuple[str, str, int], int] = {}
    for b in found:
        key = (b.namespace, b.name, b.port)
        if key not in names:
            key = next((a for a in sorted(b.aliases) if a in names), key)
        merged[key] = merged.get(key, 0) + b.weight
    return tuple(sorted(Backend(*key, weight=w) for key, w in merged.items()))


DEFAULT_TIMEOUT_MS = 15_000  # Envoy's route timeout when none is set


def deadline(o: Outcome) -> float:
    """How long the client may wait for the backend before a 504.

    With no retries the overall and the per-attempt timeouts act as one
    deadline, so a route timeout equal to the backendRequest timeout and a
    longer request timeout behave the same; 0 disables a timeout.
    """
    overall = DEFAULT_TIMEOUT_MS if o.request_timeout_ms is None else o.request_timeout_ms
    limits = [t for t in (overall, o.backend_timeout_ms) if t]
    return float(min(limits)) if limits else float("inf")


def _nonempty(headers: tuple[tuple[str, tuple[str, ...]], ...]) -> dict[str, tuple[str, ...]]:
    """An empty header value says nothing (list-valued CORS headers: an empty list)."""
    return {k: v for k, v in headers if any(v)}


def _same_response_ops(a: Outcome, b: Outcome) -> bool:
    """Equal effect on a backend response that already carries every touched header."""
    if not a.response_header_ops and not b.response_header_ops:
        return True
    names = {n for _, n, _ in a.response_header_ops + b.response_header_ops}
    probes: list[tuple[tuple[str, tuple[str, ...]], ...]] = [()]
    if a.request is not None and b.request is not None:
        # Only a forwarded request has a backend response for the ops to act on.
        probes.append(tuple((n, ("upstream",)) for n in sorted(names)))
    for upstream in probes:
        if _nonempty(apply_response_ops(upstream, a.response_header_ops)) != _nonempty(
            apply_response_ops(upstream, b.response_header_ops)
        ):
            return False
    return True


def _share(o: Outcome) -> float:
    total = _total(o)
    return o.invalid_weight / total if total else 0.0


def _total(o: Outcome) -> int:
    """The scale of ``o``'s weights: every share, forwarded or answered by the proxy."""
    return sum(b.weight for b in o.backends) + o.invalid_weight + o.unavailable_weight


def _shares(o: Outcome) -> tuple[tuple[str, str, int, float], ...]:
    """Each Service port's share of the traffic. Two backendRefs to one Service add
    up (found by the fuzzer: the spec lists both, a translator may send one weighted
    cluster), since what a client sees is only where its requests go."""
    total = _total(o)
    merged: dict[tuple[str, str, int], int] = {}
    for b in o.backends:
        key = (b.namespace, b.name, b.port)
        merged[key] = merged.get(key, 0) + b.weight
    return tuple((*key, w / total) for key, w in sorted(merged.items()) if total)


@dataclass(frozen=True)
class Comparison:
    witness: wt.Witness
    spec: Evaluation
    envoy: Evaluation
    diffs: tuple[str, ...]
    # Set when Envoy's likelier answer agrees but a route with a runtime_fraction
    # passes the rest of such requests on: ``envoy`` is then what they get.
    fraction_of: RouteRef | None = None
    # Who answered in ``envoy``'s place: "" the edge's Envoy; for a mesh request, the
    # client's sidecar ("sidecar NS/WORKLOAD") or kube-proxy (verifier.mesh_compare).
    answered_by: str = ""

    @property
    def request(self) -> Request:
        return self.witness.request

    def describe(self) -> str:
        spec, envoy = brief(self.spec.outcome), brief(self.envoy.outcome)
        if self.fraction_of is not None:
            name = self.fraction_of.xds_name or "route"
            envoy += f" (for the requests the runtime_fraction of {name!r} passes on)"
        return f"{self.request.line()}: spec {spec}; Envoy {envoy}"


@dataclass(frozen=True)
class Assumed:
    """A witness whose Envoy answer rests on an assumption that decides it (a Caveat:
    a route condition the model does not model, a runtime key at 0% or 100%, the
    client's address). Comparing it would judge the assumption, not the xDS, so it
    is counted apart: neither agreeing nor disagreeing. (A runtime_fraction share
    between 0 and 100% is judged: the model gives every answer, first_difference
    compares each.)"""

    witness: wt.Witness
    caveats: tuple[Caveat, ...]
    xds_path: str = ""  # the xDS route that answered, if one did


def first_difference(spec: Outcome, envoy: Outcome) -> tuple[tuple[str, ...], Outcome]:
    """How ``spec`` differs from the first of Envoy's possible outcomes that differs
    (a route with a runtime_fraction answers a request one way or another), and
    that outcome; no fields and ``envoy`` itself when every possibility agrees."""
    for possible in envoy.possibilities():
        diffs = outcome_diff(spec, possible)
        if diffs:
            return diffs, possible
    return (), envoy


def brief(o: Outcome) -> str:
    if o.redirect is not None:
        r = o.redirect
        return f"{o.status} -> {r.scheme}://{r.host}:{r.port}{r.path}"
    if o.request is not None and o.backends:
        # Weights only when traffic is split: they are what EV218 is about.
        split = len(o.backends) > 1 or bool(o.invalid_weight or o.unavailable_weight)
        names = ",".join(
            f"{b.namespace}/{b.name}:{b.port}" + (f" (weight {b.weight})" if split else "")
            for b in o.backends
        )
        return (
            f"{o.status} {names}{_answered_shares(o)} path {o.request.path} host {o.request.host}"
        )
    if len(status_shares(o)) > 1:
        return f"{o.status}{_answered_shares(o)}"
    return str(o.status)


def _answered_shares(o: Outcome) -> str:
    """The shares the proxy answers itself: " +500 share (weight 20)"."""
    return "".join(
        f" +{status} share (weight {weight})"
        for status, weight in (
            (INVALID_STATUS, o.invalid_weight),
            (UNAVAILABLE_STATUS, o.unavailable_weight),
        )
        if weight
    )


Owner = Callable[[Comparison, "Context"], str]


@dataclass
class Context:
    """Everything a rule may read. Built once per scenario; nothing here is written."""

    res: Resources
    snapshot: Snapshot
    profile: str = DEFAULT_PROFILE
    controller_name: str = DEFAULT_CONTROLLER
    extra_witnesses: list[wt.Witness] = field(default_factory=list)
    cases: list[Case] = field(default_factory=list)
    # The mesh cases among ``cases`` (sent from a client workload to a Service): moved
    # here as the context is made, so that no edge rule or model is asked about them;
    # their client's sidecar (or kube-proxy) answers them (``mesh``).
    mesh_cases: list[Case] = field(default_factory=list)
    # Where each mesh client's sidecar xDS comes from (verifier.mesh_compare.SidecarXds,
    # made by the pipeline); None: none is judged, mesh requests captured by a sidecar
    # are left unjudged.
    sidecars: SidecarXds | None = None
    # False when ``snapshot`` is a sidecar's (check --xds FILE --proxy NS/WORKLOAD): the
    # edge's xDS is not there, so no edge request or case is judged.
    edge_xds: bool = True
    # Services on the mesh path besides labelled namespaces (--mesh-registry).
    mesh_registry: frozenset[tuple[str, str]] = frozenset()
    # The SPIFFE trust domain mesh workloads' certificates name (--trust-domain).
    trust_domain: str = DEFAULT_TRUST_DOMAIN
    # Spec answers depend on the resources only; contexts over the same
    # resources (mutants of one scenario) may share them.
    # None: no caching (a single check, where each witness is asked once).
    spec_cache: dict[tuple[tuple[str, str], Request], Evaluation] | None = None
    case_locations: dict[str, tuple[str, int]] = field(default_factory=dict)
    # Where each Gateway is reached (verifier.gatewayapi.addresses); the user's
    # --gateway-address entries win over the addresses the edge would assign.
    addressing: addr.Addressing = field(default_factory=addr.Addressing)
    # check --baseline: the witnesses an earlier check found the models agree on,
    # which are not asked again (verifier.baseline); None: every witness is asked.
    baseline: Baseline | None = None
    # check --save-baseline: keep the digests of the witnesses the models agree on.
    record_agreement: bool = False
    # Set by ``comparisons``: how many witnesses the models were asked about (all but
    # those the baseline vouched for), and the digests of those they agree on.
    asked: int = field(default=0, init=False)
    # ... and how many the decision lists answered without asking (verifier.structural),
    # ``settled`` of them before they were made (``to_ask``).
    proven: int = field(default=0, init=False)
    settled: int = field(default=0, init=False)
    agreed: frozenset[bytes] = field(default=frozenset(), init=False, repr=False)
    # ... and those whose Envoy answer rests on an assumption (Outcome.caveats):
    # neither agreeing nor disagreeing, so not judged.
    assumed: list[Assumed] = field(default_factory=list, init=False, repr=False)
    # The edge cases not judged because the xDS is a sidecar's (``edge_xds`` False).
    edge_cases_unjudged: list[Case] = field(default_factory=list, init=False, repr=False)
    # What rules work out once per context and share (rules/support), by their key.
    rule_cache: dict[str, object] = field(default_factory=dict, init=False, repr=False)
    _digests: Digests | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        # A case is sent as a client sends it: to its Gateway's address, and with
        # that address as Host when the case names none (a mesh case: to its Service's
        # ClusterIP, with the Service's name as Host).
        cases = [
            dataclasses.replace(c, request=self.sent(c.parent_key, c.request)) for c in self.cases
        ]
        self.cases = [c for c in cases if not c.mesh]
        self.mesh_cases = [*self.mesh_cases, *(c for c in cases if c.mesh)]
        if not self.edge_xds:
            self.edge_cases_unjudged, self.cases = self.cases, []

    @cached_property
    def destinations(self) -> Destinations:
        """Where each Gateway's requests go (the one way every command aims them)."""
        return Destinations.of(self.res, self.controller_name, self.addressing)

    @property
    def addresses(self) -> Mapping[tuple[str, str], str]:
        """Gateway (namespace, name) -> the address its requests are sent to."""
        return self.destinations.addresses

    def sent(self, gateway: tuple[str, str], request: Request) -> Request:
        """``request`` as it reaches ``gateway`` (``Destinations.sent``)."""
        return self.destinations.sent(gateway, request)

    @cached_property
    def envoy(self) -> EnvoyModel:
        directory = backend_directory_from(
            self.res, trust_domain=self.trust_domain, registry=self.mesh_registry
        )
        return EnvoyModel(self.snapshot, directory)

    @cached_property
    def unjudged(self) -> Unjudged:
        """The xDS serving route kinds the edge does not read (GRPCRoute, ...): no model
        says what it should do, so no rule judges it (rules/support/other_routes.py)."""
        from verifier.rules.support.other_routes import attribute

        return attribute(self.res, self.snapshot, self.controller_name)

    @cached_property
    def models_problem(self) -> str | None:
        """Why the Envoy model cannot answer requests on this snapshot, or None.

        An xDS Envoy refuses (a route match without a path specifier, a regex RE2
        cannot compile) has no behaviour to compare: Envoy keeps its previous
        configuration. The rules that ask the models are then skipped with this
        reason, and envoy-invalid-values reports what Envoy refuses.
        """
        try:
            _ = self.envoy
        except ModelError as exc:
            return str(exc)
        return None

    def spec(self, gateway: tuple[str, str], request: Request, *, trace: bool = True) -> Evaluation:
        """The spec's answer; with ``trace=False`` (outcomes only) it may come
        from ``spec_cache``."""
        shared = self.addressing.shared
        if trace or self.spec_cache is None:
            return spec_evaluate(
                self.res,
                gateway,
                request,
                controller_name=self.controller_name,
                trace=trace,
                shared_address=shared,
            )
        key = (gateway, request)
        found = self.spec_cache.get(key)
        if found is None:
            found = spec_evaluate(
                self.res,
                gateway,
                request,
                controller_name=self.controller_name,
                trace=False,
                shared_address=shared,
            )
            self.spec_cache[key] = found
        return found

    def mesh_spec(self, request: Request, *, trace: bool = True) -> Evaluation:
        """The spec's answer to a mesh request (``request.source`` set), with this
        context's mesh registry; with ``trace=False`` it may come from ``spec_cache``."""
        if trace or self.spec_cache is None:
            return spec_evaluate_mesh(self.res, request, registry=self.mesh_registry, trace=trace)
        key = (MESH_KEY, request)
        found = self.spec_cache.get(key)
        if found is None:
            found = spec_evaluate_mesh(self.res, request, registry=self.mesh_registry, trace=False)
            self.spec_cache[key] = found
        return found

    @property
    def mesh_claimed(self) -> bool:
        """Whether the profile claims the mesh (MESH-HTTP's core feature): without it,
        mesh requests are not compared, and mesh cases are judged by the spec alone."""
        return "Mesh" in PROFILES[self.profile]

    @cached_property
    def mesh_plane(self) -> MeshPlane:
        """The mesh's deployment facts, directory and sidecars (verifier.mesh_compare)."""
        from verifier.mesh_compare import MeshPlane

        return MeshPlane(self.res, self.sidecars, self.mesh_registry, self.trust_domain)

    def mesh_answer(
        self, request: Request, reply: BackendReply | None = None, *, trace: bool = True
    ) -> MeshAnswer:
        """What the client's sidecar (the Envoy model on its xDS) or kube-proxy does with
        a mesh request, or why check has no such answer (``MeshAnswer.evaluation``)."""
        return self.mesh_plane.answer(request, reply, trace=trace)

    def mesh_judges(self, request: Request) -> bool:
        """Whether check holds the spec's answer to this mesh request to another: the
        profile claims the mesh, and kube-proxy answers it or its client's sidecar xDS
        is there to answer it."""
        if not self.mesh_claimed:
            return False
        plane = self.mesh_plane
        return (
            not plane.deployment.captured(request)
            or request.source is None
            or plane.snapshot(request.source) is not None
        )

    @cached_property
    def mesh_requests(self) -> list[wt.Witness]:
        """What the mesh is asked: the mesh witnesses, the mesh cases, and a request to
        every other Service frontend from each client whose sidecar is judged. None
        when the input has neither a mesh route nor a mesh case, and no sidecar xDS
        was given: the edge's check is then as it was."""
        from verifier.mesh_compare import sidecar_clients
        from verifier.semantics.witness_mesh import frontend_witnesses

        cases = [wt.Witness(c.parent_key, c.request, wt.CASE, note=c.name) for c in self.mesh_cases]
        given = sorted(self.sidecars.given) if self.sidecars is not None else []
        found = self.mesh_witnesses + cases
        if not found and not given:
            return []
        clients = given or sidecar_clients(self.res)
        return found + frontend_witnesses(self.res, clients, sent=self.sent)

    @cached_property
    def mesh(self) -> MeshJudgement:
        """Every mesh request compared (verifier.mesh_compare): its answer, on its
        client's sidecar xDS or kube-proxy's, against the spec model's."""
        from verifier.mesh_compare import MeshJudgement

        if not self.mesh_claimed:
            return MeshJudgement()
        return self.mesh_plane.judge(self.mesh_requests, lambda r: self.mesh_spec(r, trace=False))

    @cached_property
    def witnesses(self) -> list[wt.Witness]:
        if not self.edge_xds:
            return []  # the xDS is a sidecar's: the edge's requests are not judged
        from_cases = [wt.Witness(c.parent_key, c.request, wt.CASE, note=c.name) for c in self.cases]
        generated = wt.witnesses(self.res, self.controller_name, sent=self.sent)
        extra = [self._sent(w) for w in self.extra_witnesses]
        return generated + self._xds_client_cas(generated) + extra + from_cases

    @cached_property
    def to_ask(self) -> list[wt.Witness]:
        """``witnesses`` less the generated ones the decision lists prove (counted in
        ``settled``), which are never made into witnesses: generating, stamping and
        handing them to workers cost about as much as the rest of the comparisons at
        10,000 rules. Every witness when they are made already (a test, the fuzzer,
        the live pass, a rule that reads them), the lists are off, or the agreements
        are recorded (--save-baseline: a proven witness's digest is recorded too)."""
        made = "witnesses" in self.__dict__
        if made or self.record_agreement or not self.edge_xds or self.structural is None:
            return self.witnesses
        from_cases = [wt.Witness(c.parent_key, c.request, wt.CASE, note=c.name) for c in self.cases]
        generated, self.settled = wt.to_ask(
            self.res, self.controller_name, sent=self.sent, settle=self.structural
        )
        extra = [self._sent(w) for w in self.extra_witnesses]
        return generated + self._xds_client_cas(generated) + extra + from_cases

    @property
    def requests(self) -> int:
        """How many witness requests this check judges, asked or not."""
        return len(self.to_ask) + self.settled

    @cached_property
    def mesh_witnesses(self) -> list[wt.Witness]:
        """The mesh routes' witnesses (``verifier.semantics.witness_mesh``), each sent from
        a client workload to its Service's frontend. Apart from ``witnesses``: the edge's
        Envoy model is never asked about them; the sidecar's will be."""
        from verifier.semantics.witness_mesh import mesh_witnesses

        return mesh_witnesses(self.res, sent=self.sent)

    def _sent(self, w: wt.Witness) -> wt.Witness:
        request = self.sent(w.gateway, w.request)
        return w if request is w.request else evolve(w, request=request)

    def _xds_client_cas(self, generated: list[wt.Witness]) -> list[wt.Witness]:
        """A certificate of each CA the xDS trusts on a Gateway port that the resources
        do not name there: witnesses come from the resources, so without these an xDS
        that trusts one CA too many would go unseen."""
        if self.models_problem is not None:
            return []
        named = {
            (w.request.address, w.request.port, w.request.client_cert.issuer)
            for w in generated
            if w.feature == wt.FRONTEND and w.request.client_cert is not None
        }
        probes = {
            (w.request.address, w.request.port): w
            for w in generated
            if w.feature == wt.FRONTEND and not w.request.client_cert
        }
        out = []
        for (address, port), base in sorted(probes.items()):
            for fp in sorted(self.envoy.trusted_client_cas(address, port)):
                if (address, port, fp) not in named:
                    request = dataclasses.replace(base.request, client_cert=ClientCert(fp))
                    note = (
                        f"port {port}: client certificate of CA {fp[:12]}, trusted only by the xDS"
                    )
                    out.append(dataclasses.replace(base, request=request, note=note))
        return out

    @cached_property
    def comparisons(self) -> list[Comparison]:
        """The witnesses on which the models disagree (agreeing ones are not kept:
        at 10,000 rules there are ~140,000 witnesses). Large sets are split across
        the machine's cores: each witness is independent of the others."""
        witnesses = self.to_ask
        if self.baseline is not None or self.record_agreement:
            from verifier.baseline import Digests

            self._digests = Digests(self)
        if len(witnesses) < PARALLEL_MIN_WITNESSES:
            share = self._compare_run(range(len(witnesses)))
        else:
            # Build both models' indexes once, before the children inherit them.
            self.compare(witnesses[0])
            workers = min(os.cpu_count() or 1, MAX_WORKERS)  # map_forked: serially if it must
            share = _Share.joined(
                map_forked(self._compare_run, _runs(len(witnesses), workers), max_workers=workers)
            )
        self.asked, self.proven = share.asked, share.proven + self.settled
        self.assumed = share.assumed
        if self._digests is not None and self._digests.usable:
            self.agreed = frozenset(share.agreed)
        return share.found

    def _compare_run(self, run: range) -> _Share:
        """The disagreements among a run of consecutive witnesses. Witnesses come
        route by route, so a worker that takes a run works out only its routes'
        upstreams, regexes and references (each is worked out once per process): with
        every other witness instead, each worker worked out every route's, and the
        comparisons took about 10% longer (2 workers, 10,000 rules). With a baseline,
        a witness whose digest it holds is not asked (verifier.baseline); the digests
        are worked out here too, so that the workers share that work as well."""
        out = _Share()
        digests = self._digests
        usable = digests is not None and digests.usable
        skip = self.baseline.agreed if self.baseline is not None and usable else frozenset()
        structural = self.structural
        for i in run:
            w = self.to_ask[i]
            # The lists first: cheaper than a digest, which a proven witness needs only
            # when this run's agreements are kept (--save-baseline).
            if structural is not None and structural.proven(w):
                out.proven += 1
                if digests is not None and self.record_agreement:
                    out.agreed.append(digests.of(w))
                continue
            digest = digests.of(w) if digests is not None else b""
            if digest in skip:
                out.agreed.append(digest)
                continue
            out.asked += 1
            c = self._judged(w)
            if isinstance(c, Assumed):
                out.assumed.append(c)
            elif c is not None:
                out.found.append(c)
            elif digests is not None:
                out.agreed.append(digest)
        return out

    @cached_property
    def structural(self) -> Structural | None:
        """The decision lists that answer witnesses without the models; None when every
        witness is asked (the switch, a shared address, xDS the model refuses)."""
        from verifier import structural

        if not structural.enabled() or self.addressing.shared or self.models_problem:
            return None
        return structural.Structural(self)

    def compare(self, w: wt.Witness) -> Comparison | None:
        """Both models' answers to one witness, when they disagree (an answer that
        rests on an assumption is not judged: None)."""
        c = self._judged(w)
        return None if isinstance(c, Assumed) else c

    def _judged(self, w: wt.Witness) -> Comparison | Assumed | None:
        """The disagreement on one witness; ``Assumed`` when Envoy's answer rests on
        what the model assumes (check.Assumed), None when the models agree."""
        e = self.envoy.evaluate(w.request, trace=False)
        return verdict(w, e, lambda: self.spec(w.gateway, w.request, trace=False))

    @cached_property
    def disagreements(self) -> dict[str, list[Comparison]]:
        """Disagreeing comparisons by owning rule, one per HTTPRoute match.

        Several witnesses of one broken match disagree at once (the match
        itself, its boundary neighbours, a port in Host, an overlap): the
        match is reported once, by the most specific rule that owns any of
        them, so one wrong behaviour is one finding.
        """
        from verifier.rules.ownership import OWNER_PRIORITY, attribute

        best: dict[tuple[object, ...], tuple[int, str, Comparison]] = {}
        for c in [*self.comparisons, *self.mesh.found]:
            if self._unjudged_answer(c):
                continue
            rule, about = attribute(c, self)
            rank = OWNER_PRIORITY.index(rule) if rule in OWNER_PRIORITY else len(OWNER_PRIORITY)
            if about is not None:
                c = self._about(c, about)
            key = about or _culprit(c) or (rule, c.witness.gateway, c.diffs, c.witness.note)
            found = best.get(key)
            if found is None or rank < found[0]:
                best[key] = (rank, rule, c)
        by_rule: dict[str, list[Comparison]] = {}
        for _rank, rule, c in best.values():
            by_rule.setdefault(rule, []).append(c)
        return by_rule

    def _about(self, c: Comparison, about: tuple[object, ...]) -> Comparison:
        """``c`` pointed at what it is about: an HTTPRoute match (a consumer route that
        leaked into a client's route table, not the match whose request showed it), or,
        for a mesh request, a Service frontend (no route is to blame)."""
        key = about[0]
        if isinstance(key, tuple) and key in self.res.httproutes:
            rule, match = (x if isinstance(x, int) else None for x in about[1:3])
            return replace(c, witness=evolve(c.witness, route=key, rule=rule, match=match))
        if c.request.source is not None and key in self.res.services:
            return replace(c, witness=evolve(c.witness, route=None, rule=None, match=None))
        return c

    def _unjudged_answer(self, c: Comparison) -> bool:
        """Envoy answers with a route serving a kind the edge does not read (a GRPCRoute's
        virtual host, say) where no HTTPRoute is the spec's answer: no model says what
        that request should get."""
        route = c.envoy.outcome.route
        return (
            c.spec.outcome.route is None
            and route is not None
            and route.xds_path in self.unjudged.xds_routes
        )

    # ------------------------------------------------------------ lookups

    def route(self, key: tuple[str, str] | None) -> m.HTTPRoute | None:
        return None if key is None else self.res.httproutes.get(key)

    def rule_of(self, c: Comparison) -> m.RouteRule | None:
        route = self.route(c.witness.route)
        if route is None or c.witness.rule is None or c.witness.rule >= len(route.rules):
            return None
        return route.rules[c.witness.rule]

    def xds_path_of(self, ev: Evaluation) -> str:
        return self.xds_path_of_route(ev.outcome.route)

    def xds_path_of_route(self, ref: RouteRef | None) -> str:
        if ref is None:
            return ""
        if ref.xds_path:
            return ref.xds_path
        if ref.xds_name:
            for rc in self.snapshot.routes:
                for vh in rc.virtual_hosts:
                    for i, r in enumerate(vh.routes):
                        if r.name == ref.xds_name:
                            return route_path(rc, vh, i, r)
        return ""

    def where(self, w: wt.Witness, field_path: str = "") -> tuple[str, int, str]:
        """(file, line, resource) of what witness ``w`` exercises: its HTTPRoute match
        (or ``field_path`` of it); else its parent, a Gateway's listeners or, for a mesh
        request, the Service it is sent to."""
        route = self.route(w.route)
        if route is not None:
            path = field_path or (
                f"spec.rules[{w.rule}].matches[{w.match}]" if w.rule is not None else ""
            )
            where = route.meta.where(path)
            return where.file, where.line, f"HTTPRoute {route.meta.namespace}/{route.meta.name}"
        if w.request.source is not None:
            svc = self.res.services.get(w.gateway)
            if svc is not None:
                where = svc.meta.where(field_path)
                return where.file, where.line, f"Service {svc.meta.namespace}/{svc.meta.name}"
            return "", 0, ""
        gw = self.res.gateways.get(w.gateway)
        if gw is not None:
            where = gw.meta.where(field_path or "spec.listeners")
            return where.file, where.line, f"Gateway {gw.meta.namespace}/{gw.meta.name}"
        return "", 0, ""

    def comparison_finding(
        self, code: str, rule: str, c: Comparison, field_path: str = "", **params: Any
    ) -> Finding:
        """A semantic finding located at the witness's HTTPRoute match (or filter);
        ``params``: what the code's template names besides the diff and the note."""
        file, line, resource = self.where(c.witness, field_path)
        return new(
            code,
            rule,
            file=file,
            line=line,
            resource=resource,
            xds_path=self.xds_path_of_route(c.fraction_of)
            or self.xds_path_of(c.envoy)
            or self.xds_path_of(c.spec),
            request=c.request.to_json(),
            expected=c.spec.outcome.to_json(),
            actual=c.envoy.outcome.to_json(),
            diff=c.describe(),
            note=c.witness.note or c.witness.feature,
            **params,
        )


def verdict(
    w: wt.Witness, e: Evaluation, spec: Callable[[], Evaluation], answered_by: str = ""
) -> Comparison | Assumed | None:
    """How the answer ``e`` to witness ``w`` compares with the spec's (asked only when
    ``e`` is judged): the disagreement, ``Assumed`` when ``e`` rests on what the model
    assumes (Assumed), None when they agree. ``answered_by``: Comparison's."""
    if e.outcome.unjudged:
        decisive = tuple(c for c in e.outcome.all_caveats() if c.decides)
        route = e.outcome.route
        return Assumed(w, decisive, route.xds_path or "" if route is not None else "")
    s = spec()
    diffs = outcome_diff(s.outcome, e.outcome)
    if diffs:
        return Comparison(_attributed(w, s, e), s, e, diffs, answered_by=answered_by)
    if e.outcome.otherwise is None:
        return None
    for other in e.outcome.possibilities()[1:]:  # a runtime_fraction passes it on
        diffs = outcome_diff(s.outcome, other)
        if diffs:
            shown = dataclasses.replace(other, notes=e.outcome.notes)
            evaluation = Evaluation(shown, e.trace)
            return Comparison(w, s, evaluation, diffs, e.outcome.route, answered_by)
    return None


def _culprit(c: Comparison) -> tuple[object, ...] | None:
    """The HTTPRoute match a disagreement is about: the one whose xDS route took a
    request the spec gives to another rule (when the xDS names its source), else
    the match the witness was generated for."""
    spec, envoy = c.spec.outcome.route, c.envoy.outcome.route
    if (
        spec is not None
        and envoy is not None
        and envoy.httproute
        and "/" in envoy.httproute
        and (spec.httproute, spec.rule) != (envoy.httproute, envoy.rule)
    ):
        ns, name = envoy.httproute.split("/", 1)
        return ((ns, name), envoy.rule, envoy.match)
    w = c.witness
    if w.feature == wt.FRONTEND or connection_level(c):
        # Whether a port answers at all (a listener too many or too few, a
        # handshake that wrongly lets clients in or keeps them out) is one
        # behaviour, however many requests to that port show it.
        return (w.gateway, w.request.port, "connection")
    return (w.route, w.rule, w.match) if w.route is not None else None


def _attributed(w: wt.Witness, spec: Evaluation, envoy: Evaluation) -> wt.Witness:
    """A case names no HTTPRoute match; the one the spec model chose for its request
    (or, where the spec gives it to none, the one the xDS route that took it was made
    from) is what it exercises. So a case's disagreement points at that match, and is
    the same finding as the generated witnesses' for it, not a second one. The same
    holds for a mesh witness made for no match (a path none was made for, a Service's
    frontend): a route that applies may take it.

    A witness made for one match that both models give to another rule (the other
    side of a header match's boundary, another namespace's consumer route's path from
    a client it does not apply to) exercises that rule, not its own: where they agree
    on the rule and still differ, the difference is in what that rule does, and is the
    same finding as that rule's own witnesses give."""
    answering = _same_answering_match(spec, envoy)
    if answering is not None and answering != (w.route, w.rule, w.match):
        return replace(w, route=answering[0], rule=answering[1], match=answering[2])
    if w.route is not None or w.feature not in (wt.CASE, MESH):
        return w
    for ref in (spec.outcome.route, envoy.outcome.route):
        if ref is not None and ref.httproute and "/" in ref.httproute:
            ns, name = ref.httproute.split("/", 1)
            return replace(w, route=(ns, name), rule=ref.rule, match=ref.match)
    return w


def _same_answering_match(
    spec: Evaluation, envoy: Evaluation
) -> tuple[tuple[str, str], int, int | None] | None:
    """The HTTPRoute match whose xDS route answered, when the xDS names it (route
    metadata) and the spec model chose a match of the same rule."""
    s, e = spec.outcome.route, envoy.outcome.route
    if s is None or e is None or not e.httproute or "/" not in e.httproute or e.rule is None:
        return None
    if (s.httproute, s.rule) != (e.httproute, e.rule):
        return None
    ns, name = e.httproute.split("/", 1)
    return (ns, name), e.rule, e.match


def connection_level(c: Comparison) -> bool:
    """One model answers over HTTP and the other not at all."""
    return (c.spec.outcome.status == 0) != (c.envoy.outcome.status == 0)


# Below this, starting workers costs more than it saves. With runs of consecutive
# witnesses (no set-up done twice), 1,000 rules (8,000 witnesses) gained: 4 alternating
# pairs on 2 cores, median 3.05 -> 2.75 s; at 100 rules (800) the noise hid any gain.
PARALLEL_MIN_WITNESSES = 2_000
MAX_WORKERS = 4
RUNS_PER_WORKER = 4  # handed out as workers finish, so no worker waits on a slow run


@dataclass
class _Share:
    """What a run of witnesses gave: the disagreements, how many witnesses were
    asked, the digests of those that agree (or agreed at the baseline), and those
    left unjudged."""

    found: list[Comparison] = field(default_factory=list)
    asked: int = 0
    proven: int = 0
    agreed: list[bytes] = field(default_factory=list)
    assumed: list[Assumed] = field(default_factory=list)

    @staticmethod
    def joined(shares: Iterable[_Share]) -> _Share:
        out = _Share()
        for s in shares:
            out.found += s.found
            out.asked += s.asked
            out.proven += s.proven
            out.agreed += s.agreed
            out.assumed += s.assumed
        return out


def _runs(count: int, workers: int) -> list[range]:
    """``range(count)`` cut into consecutive runs of about equal length, in order."""
    n = max(1, min(count, workers * RUNS_PER_WORKER))
    bounds = [count * k // n for k in range(n + 1)]
    return [range(a, b) for a, b in itertools.pairwise(bounds)]


def route_path(rc: RouteConfiguration, vh: VirtualHost, index: int, _route: Route) -> str:
    return f"routes[{rc.name}].virtual_hosts[{vh.name}].routes[{index}]"


def at_chosen_match(w: wt.Witness, spec: Evaluation, envoy: Evaluation) -> wt.Witness:
    """The HTTPRoute match a case's request exercises (``_attributed``), for a live
    finding about a request both models answer alike (which route served it)."""
    return _attributed(w, spec, envoy)
