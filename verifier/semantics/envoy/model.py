"""An executable model of what Envoy 1.40 does with a request, given an xDS snapshot.

It judges xDS from any source (our translator, another one, a live edge's
config_dump), so it reads only Envoy's own semantics: no translator code, and no
naming convention (cluster, route or metadata names) takes part in a decision.

The request flows as in Envoy: listener by destination address and port (an exact
address beats the wildcard; for a captured connection, the capture port), the
listener filters (original destination, TLS and HTTP inspectors), filter chain by
destination, SNI, transport and application protocol, then either ``tcp_proxy``
(the bytes go to a cluster's host unchanged) or the HTTP connection manager's host
and path handling, virtual host by Host, the first matching route, then the route's
action (forward, redirect, direct response), CORS and header mutations; a forwarded
request reaches a host only if the connection to it (TLS, identity) succeeds.
``evaluate`` returns the Outcome and a human-readable trace. Status ``NO_RESPONSE``
(0) means Envoy sends no HTTP response at all (connection refused or closed).
Indexes are built once in ``__init__``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from verifier.semantics.directory import BackendDirectory
from verifier.semantics.envoy import caveats
from verifier.semantics.envoy.actions import BackendReply, RouteContext, run_action
from verifier.semantics.envoy.clusters import ClusterResolver
from verifier.semantics.envoy.codec import METHODS
from verifier.semantics.envoy.compiled import _COMPILED, compiled, precompile
from verifier.semantics.envoy.config import CompiledRouteConfig, CompiledVhost
from verifier.semantics.envoy.downstream import Dial, Downstream, Redirect
from verifier.semantics.envoy.forward import Upstreams, clusters_named, upstream_deadline_ms
from verifier.semantics.envoy.listeners import Escaped, Hcm, Selected
from verifier.semantics.envoy.match import router_view
from verifier.semantics.envoy.origin import decide, hcm_headers, tls_redirect
from verifier.semantics.envoy.passthrough import tcp_outcome
from verifier.semantics.envoy.paths import (
    canonical_path,
    merge_slashes,
    split_target,
    strip_path_parameters,
    unescape_slashes,
)
from verifier.semantics.envoy.redirect import port_start, split_host
from verifier.semantics.envoy.routes import CompiledRoute
from verifier.semantics.envoy.strings import ModelError
from verifier.semantics.request import (
    Caveat,
    Evaluation,
    Outcome,
    RedirectTarget,
    Request,
    RouteRef,
    evolve,
    wire_problem,
)
from verifier.xds import read
from verifier.xds.enums import name_of
from verifier.xds.snapshot import Snapshot

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration, VirtualHost

NO_RESPONSE = 0

# Request.host "" means the client sent the Gateway's address as Host (cases.yaml:
# "host: ... default: the Gateway address"): an IP literal, which only '*' serves.
ADDRESS_HOST = "192.0.2.1"

# Fractional routes answered in a row before the rest are taken to match: each
# is one more outcome to compare, and such chains do not come from Gateway API.
MAX_ALTERNATIVES = 8

__all__ = [
    "NO_RESPONSE",
    "_COMPILED",
    "BackendReply",
    "EnvoyModel",
    "ModelError",
    "Redirect",
    "precompile",
    "upstream_deadline_ms",
]


@dataclass
class _Run:
    """What one evaluation accumulates."""

    trace: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    caveats: list[Caveat] = field(default_factory=list)  # on the whole answer
    grpc: bool = False  # a gRPC request: Envoy's own replies are not modelled
    # Off when only the outcome matters (check answers ~18 witnesses a rule):
    # the costliest lines (the HCM summary, why every earlier route missed)
    # are then not written.
    tracing: bool = True

    def done(self, outcome: Outcome) -> Evaluation:
        if self.grpc:
            outcome = caveats.on_local_replies(outcome)
        if self.caveats:
            merged = tuple(dict.fromkeys([*self.caveats, *outcome.caveats]))
            outcome = evolve(outcome, caveats=merged)
        if not self.notes and not outcome.notes:
            return Evaluation(outcome, tuple(self.trace))  # most requests: nothing to merge
        notes = tuple(dict.fromkeys([*outcome.notes, *self.notes]))
        final = evolve(outcome, notes=notes)
        return Evaluation(final, tuple(self.trace))


def _dial(request: Request, redirect: Redirect | None = None) -> Dial:
    """The connection the client makes: whether it speaks TLS, the server name it sends
    if it does, and whether it was captured."""
    tls = request.scheme.lower() == "https"
    sni = (request.sni or request.hostname).lower() if tls else ""
    return Dial(request.address, request.listener_port, tls, sni, redirect)


def _hcm_summary(hcm: Hcm, rc: CompiledRouteConfig) -> str:
    return (
        f"HCM: route configuration {rc.config.name!r}; normalize_path={hcm.normalize_path}, "
        f"merge_slashes={hcm.merge_slashes}, "
        f"escaped slashes {name_of(Escaped, hcm.escaped_slashes)}, "
        f"strip port {hcm.strip_port or 'no'}, ignore_port_in_host_matching={rc.ignore_port}, "
        f"upgrades {sorted(k for k, v in hcm.upgrades.items() if v) or 'none'}, "
        f"CORS filter {'yes' if hcm.cors_filter else 'no'}"
    )


class EnvoyModel:
    def __init__(self, snapshot: Snapshot, directory: BackendDirectory) -> None:
        done = compiled(snapshot)
        self.listeners = done.listeners
        self.resolver = ClusterResolver(
            snapshot.clusters, snapshot.endpoints, directory, snapshot.secrets
        )
        self.upstreams = Upstreams(self.resolver)
        self._configs = done.configs
        self._refs: dict[tuple[int, int, int], RouteRef] = {}

    def _located(
        self, rc: CompiledRouteConfig, vhost: CompiledVhost, route: CompiledRoute
    ) -> RouteRef:
        """The route's reference with its xDS path, made once per route."""
        key = (id(rc), id(vhost), route.index)
        found = self._refs.get(key)
        if found is None:
            where = f"routes[{rc.config.name}].virtual_hosts[{vhost.name}].routes[{route.index}]"
            found = self._refs[key] = dataclasses.replace(route.ref, xds_path=where)
        return found

    def _compiled(self, rc: RouteConfiguration) -> CompiledRouteConfig:
        key = id(rc)
        found = self._configs.get(key)
        if found is None:
            found = self._configs[key] = CompiledRouteConfig.build(rc)
        return found

    def trusted_client_cas(self, address: str, port: int) -> frozenset[str]:
        """The CA fingerprints the TLS filter chains of the listener a connection to
        ``address``:``port`` reaches verify client certificates against (inline
        trusted_ca only)."""
        found, _notes, _why = self.listeners.listener_for(address, port)
        if found is None:
            return frozenset()
        return frozenset(
            ca
            for chain in [*found.chains, *([found.default] if found.default else [])]
            for ca in chain.client.trusted or ()
        )

    def evaluate(
        self,
        request: Request,
        reply: BackendReply | None = None,
        *,
        trace: bool = True,
        redirect: Redirect | None = None,
    ) -> Evaluation:
        """What Envoy does with ``request``; ``reply`` says how the backend would answer
        (its response headers and latency), by default at once and without headers.
        ``trace=False``: the same outcome with a shorter trace (no HCM summary, no
        reasons for the routes that did not match). ``redirect``: the connection was
        captured and redirected to the proxy (deployment data: a sidecar's capture);
        the request's address and port are then its original destination."""
        run = _Run(tracing=trace)
        dial = _dial(request, redirect)
        tls = dial.tls
        selected, notes = self.listeners.select(dial, run.trace)
        run.notes += notes
        if selected is None:
            return run.done(Outcome(NO_RESPONSE))
        chain = selected.chain
        if chain.tls != tls:
            run.trace.append(
                "the filter chain "
                + ("terminates TLS" if chain.tls else "speaks plaintext")
                + f" but the client speaks {'TLS' if tls else 'plaintext'}: no HTTP response"
            )
            return run.done(Outcome(NO_RESPONSE))
        undecided = False
        if tls:
            run.notes += chain.client.notes
            refusal = chain.client.refusal(request.client_cert)
            if refusal is not None:
                run.trace.append(f"client certificate: {refusal}: the TLS handshake fails")
                return run.done(Outcome(NO_RESPONSE))
            admitted = chain.client.admits(request.client_cert)
            run.trace += [f"client certificate: {admitted}"] if admitted else []
            undecided = chain.client.undecided(request.client_cert)
            if undecided:
                run.trace.append(
                    "client certificate: the trusted CAs are not in the configuration; "
                    "if it verifies:"
                )
        found = self._after_handshake(request, selected, reply, run)
        if undecided:
            return dataclasses.replace(
                found, outcome=dataclasses.replace(found.outcome, may_refuse=True)
            )
        return found

    def connection_of(self, request: Request, redirect: Redirect | None = None) -> Selected | None:
        """Where the connection ``request`` is sent on ends up: the listener, the filter
        chain and the connection as the chain sees it (None: refused or closed)."""
        selected, _notes = self.listeners.select(_dial(request, redirect), [])
        return selected

    def virtual_host_of(
        self, request: Request
    ) -> tuple[RouteConfiguration | None, VirtualHost | None]:
        """The route configuration and the virtual host that route ``request``, where
        there are: with the listeners and clusters, all of the xDS its answer reads
        (check --baseline digests just these)."""
        selected, _notes = self.listeners.select(_dial(request), [])
        hcm = selected.chain.hcm if selected is not None else None
        if selected is None or hcm is None or hcm.route_config is None:
            return None, None
        rc = self._compiled(hcm.route_config)
        host = self._host(request, hcm, selected.downstream.port, _Run())
        _match_host, vhost, _why = self._vhost(rc, host)
        return rc.config, None if vhost is None else vhost.vhost

    def routes_for(
        self, request: Request, redirect: Redirect | None = None
    ) -> tuple[RouteRef, ...] | None:
        """Every route of the virtual host that routes ``request`` (each RouteRef says
        which HTTPRoute match the xDS made it from, where the xDS says), in order: the
        routes a client's traffic to that destination is routed over, not only the one
        it takes. None when no route table routes it (refused, or ``tcp_proxy``)."""
        selected, _notes = self.listeners.select(_dial(request, redirect), [])
        hcm = selected.chain.hcm if selected is not None else None
        if selected is None or hcm is None or hcm.route_config is None:
            return None
        rc = self._compiled(hcm.route_config)
        host = self._host(request, hcm, selected.downstream.port, _Run())
        _match_host, vhost, _why = self._vhost(rc, host)
        if vhost is None:
            return ()
        return tuple(self._located(rc, vhost, r) for r in vhost.table.routes)

    @staticmethod
    def clusters_of(rc: RouteConfiguration, vhost: VirtualHost) -> frozenset[str] | None:
        """Every cluster a request routed by ``vhost`` may reach (forwarded or mirrored
        to), or None when a request header may name any cluster: all the clusters
        the answer to such a request reads (the resolver is asked nothing else)."""
        names = {p.cluster for p in (*vhost.request_mirror_policies, *rc.request_mirror_policies)}
        for route in vhost.routes:
            kind, action = read.one_of(route, "action")
            if kind != "route" or action is None:
                continue
            found = clusters_named(action)
            if found is None:
                return None
            names |= found
        return frozenset(names - {""})

    @staticmethod
    def _vhost(rc: CompiledRouteConfig, host: str) -> tuple[str, CompiledVhost | None, str]:
        """The virtual host for Host ``host`` (as the HCM passed it on), the name it
        was matched as, and why."""
        match_host = host or ADDRESS_HOST
        if rc.ignore_port and port_start(host) != -1:
            match_host = host[: port_start(host)]
        vhost, why = rc.vhosts.find(match_host)
        return match_host, vhost, why

    def _after_handshake(
        self, request: Request, selected: Selected, reply: BackendReply | None, run: _Run
    ) -> Evaluation:
        chain = selected.chain
        if chain.tcp is not None:
            run.notes += chain.tcp.notes
            outcome = tcp_outcome(
                request, chain.tcp, self.resolver, selected.downstream, reply, run.trace
            )
            return run.done(outcome)
        if chain.hcm is None:
            run.trace.append(f"filter chain has no HTTP connection manager ({chain.problem})")
            return run.done(Outcome(NO_RESPONSE))
        hcm = chain.hcm
        run.notes += hcm.notes
        if hcm.route_config is None:
            run.trace.append("no route configuration: every request gets 404")
            return run.done(Outcome(404))
        rc = self._compiled(hcm.route_config)
        return self._http(request, hcm, rc, selected.downstream, reply, run)

    def _http(
        self,
        request: Request,
        hcm: Hcm,
        rc: CompiledRouteConfig,
        conn: Downstream,
        reply: BackendReply | None,
        run: _Run,
    ) -> Evaluation:
        run.notes += rc.notes
        if run.tracing:
            run.trace.append(_hcm_summary(hcm, rc))
        problem = wire_problem(request)
        if problem is None and not hcm.custom_methods and request.method.upper() not in METHODS:
            problem = f"method {request.method.upper()!r} is not one it knows"
        if problem is not None:
            run.trace.append(f"the HTTP/1 codec rejects the request: {problem} (400)")
            return run.done(Outcome(400))
        run.grpc = caveats.grpc_request(request.headers)
        host = self._host(request, hcm, conn.port, run)
        path, query = split_target(request.path)
        if hcm.escaped_slashes != Escaped.KEEP_UNCHANGED:
            path, found = unescape_slashes(path)
            if found and hcm.escaped_slashes == Escaped.REJECT_REQUEST:
                run.trace.append("escaped slash in path: REJECT_REQUEST (400)")
                return run.done(Outcome(400))
            if found and hcm.escaped_slashes == Escaped.UNESCAPE_AND_REDIRECT:
                return self._unescape_redirect(request, host, path, query, hcm, run)
        if hcm.normalize_path:
            path = canonical_path(path)
        if hcm.merge_slashes:
            path = merge_slashes(path)
        full_path = path + query
        if full_path != request.path:
            run.trace.append(f"HCM path handling: {request.path!r} -> {full_path!r}")
        match_host, vhost, why = self._vhost(rc, host)
        if vhost is None:
            run.trace.append(f"no virtual host for {match_host!r} ({why}): 404")
            return run.done(Outcome(404))
        run.trace.append(f"virtual host {vhost.name!r} for {match_host!r}: {why}")
        origin = decide(hcm.origin, request.headers, request.scheme.lower())
        if run.tracing and (origin.internal is not False or vhost.tls_requirement):
            run.trace.append(f"HCM: {origin.why}; x-forwarded-proto {origin.forwarded_proto}")
        redirect, why, caveat = tls_redirect(vhost.tls_requirement, origin)
        run.trace += [why] if why else []
        run.caveats += [caveat] if caveat else []
        if redirect:
            name, port = split_host(host)
            return run.done(
                Outcome(301, redirect=RedirectTarget("https", name.lower(), port or 443, path))
            )
        path_for_match = strip_path_parameters(path) if rc.ignore_path_parameters else path
        forwarded, set_by_hcm = hcm_headers(request.headers, origin, hcm.origin, rc.internal_only)
        ctx = router_view(request, host, full_path, path_for_match, forwarded, set_by_hcm)
        headers = [(k, v) for k, vs in forwarded for v in vs if k != "host"]
        route = vhost.table.find(ctx)
        upto = route.index if route is not None else len(vhost.table.routes)
        if run.tracing:
            run.trace += vhost.table.explain_misses(ctx, upto)
        run.caveats += caveats.before_route(
            vhost.table, ctx, upto, origin, hcm.origin, request.headers, rc.internal_only
        )
        if route is None:
            run.trace.append(f"no route of virtual host {vhost.name!r} matches: 404")
            return run.done(Outcome(404))
        # A route with a runtime_fraction below 100% answers only a share of
        # requests; the rest fall through to the next route that matches.
        chain: list[CompiledRoute | None] = [route]
        while (last := chain[-1]) is not None and last.match.fraction is not None:
            if len(chain) > MAX_ALTERNATIVES:
                run.notes.append(
                    f"more than {MAX_ALTERNATIVES} routes with a runtime_fraction in a row: "
                    "the later ones are taken to match"
                )
                break
            chain.append(vhost.table.find(ctx, after=last.index))
        answers: list[Outcome] = []
        for i, step in enumerate(chain):
            if step is None:
                run.trace.append("  the rest: no later route matches: 404")
                answers.append(Outcome(404))
                continue
            lead = "route" if i == 0 else "  the rest: route"
            run.trace.append(f"{lead} {step.label} matches: {step.match.describe()}")
            run.notes += step.match.notes
            rctx = RouteContext(
                request=request,
                host=host,
                path=full_path,
                headers=headers,
                view=ctx.headers,
                hcm=hcm,
                config=rc,
                vhost=vhost,
                route=step,
                resolver=self.resolver,
                upstreams=self.upstreams,
                reply=reply or BackendReply(),
                downstream=conn,
            )
            answer = run_action(rctx, run.trace)
            answers.append(
                evolve(
                    answer,
                    route=self._located(rc, vhost, step),
                    caveats=(*answer.caveats, *caveats.of_route(step)),
                )
            )
        outcome = answers[-1]
        for earlier in reversed(answers[:-1]):
            outcome = evolve(earlier, otherwise=outcome)
        return run.done(outcome)

    @staticmethod
    def _host(request: Request, hcm: Hcm, local_port: int, run: _Run) -> str:
        """strip_trailing_host_dot, then strip_any_host_port / strip_matching_host_port
        (the port of the connection's local address, as restored); unlike
        ignore_port_in_host_matching these rewrite the Host the backend sees."""
        host = request.host
        if hcm.strip_trailing_dot:
            name, port = split_host(host)
            if name.endswith("."):
                host = name[:-1] + (f":{port}" if port is not None else "")
        pos = port_start(host)
        port_text = host[pos + 1 :] if pos != -1 else ""
        if port_text.isdigit() and (
            hcm.strip_port == "any"
            or (hcm.strip_port == "matching" and int(port_text) == local_port)
        ):
            run.trace.append(f"HCM strips the port from Host {host!r}")
            host = host[:pos]
        return host

    @staticmethod
    def _unescape_redirect(
        request: Request, host: str, path: str, query: str, hcm: Hcm, run: _Run
    ) -> Evaluation:
        """UNESCAPE_AND_REDIRECT: "redirect to the same path with escaped slashes
        unescaped" (307, relative Location: same scheme, host and port)."""
        if hcm.normalize_path:
            path = canonical_path(path)
        if hcm.merge_slashes:
            path = merge_slashes(path)
        name, port = split_host(host)
        default = 443 if request.scheme.lower() == "https" else 80
        run.trace.append(f"escaped slashes: UNESCAPE_AND_REDIRECT to {path + query!r} (307)")
        target = RedirectTarget(request.scheme.lower(), name.lower(), port or default, path)
        return run.done(Outcome(307, redirect=target))
