"""Mutation operators for a sidecar's mTLS: mesh clusters' identity and tunnel, and inbound.

The mistakes of docs/mesh.md that break who may talk to whom: a mesh cluster without
its client certificate, dialling another port than the tunnel's, or accepting an
identity a prefix, another trust domain or another ServiceAccount gives; an inbound
listener admitting another trust domain (or any), or sending one Service port's SNI
to another's targetPort. Read from xDS alone (``verifier.mutate.operators.mesh``
reads the shapes).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Iterator
from typing import TypeVar

from envoy_data_plane.envoy.config.cluster.v3 import Cluster
from envoy_data_plane.envoy.config.core.v3 import TransportSocket
from envoy_data_plane.envoy.config.listener.v3 import FilterChain, Listener
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import (
    CertificateValidationContext,
    CommonTlsContext,
    DownstreamTlsContext,
    UpstreamTlsContext,
)
from envoy_data_plane.envoy.type.matcher.v3 import StringMatcher

from verifier.mutate.core import Operator, Site, with_cluster
from verifier.mutate.operators.mesh import (
    MESH_PORT,
    OTHER_TRUST_DOMAIN,
    SPIFFE,
    chain_path,
    listener_site,
    tcp_cluster,
)
from verifier.mutate.proofs import prove_unused_cluster
from verifier.xds.codec import XdsLoadError, pack_any, unpack_any
from verifier.xds.snapshot import Snapshot, resource_name

T = TypeVar("T")

# --- mesh clusters: client certificate, tunnel port, SAN matchers --------------------------------


def _tls(ts: TransportSocket | None, kind: type[T]) -> T | None:
    """A transport socket's TLS context of ``kind``, decoded (a copy the operator may
    edit); None when it has none, or another, or one that does not decode."""
    if ts is None or ts.typed_config is None:
        return None
    try:
        msg = unpack_any(ts.typed_config)
    except XdsLoadError:
        return None
    return msg if isinstance(msg, kind) else None


def _upstream_tls(c: Cluster) -> UpstreamTlsContext | None:
    return _tls(c.transport_socket, UpstreamTlsContext)


def _validation(common: CommonTlsContext | None) -> CertificateValidationContext | None:
    if common is None:
        return None
    combined = common.combined_validation_context
    if combined is not None and combined.default_validation_context is not None:
        return combined.default_validation_context
    return common.validation_context


def _spiffe_sans(vc: CertificateValidationContext | None) -> list[tuple[int, re.Match[str]]]:
    """The exact SPIFFE URI matchers of a validation context: (index, parts)."""
    out = []
    for i, san in enumerate(vc.match_typed_subject_alt_names if vc is not None else ()):
        m = SPIFFE.match(san.matcher.exact or "") if san.matcher is not None else None
        if m:
            out.append((i, m))
    return out


UpstreamEdit = Callable[[UpstreamTlsContext], None]


def _edit_upstream(edit: UpstreamEdit) -> Callable[[Cluster], None]:
    def apply(c: Cluster) -> None:
        tls = _upstream_tls(c)
        assert tls is not None and c.transport_socket is not None
        edit(tls)
        c.transport_socket.typed_config = pack_any(tls)

    return apply


def _cluster_site(snap: Snapshot, k: int, suffix: str, detail: str, edit: UpstreamEdit) -> Site:
    name = snap.clusters[k].name
    path = f"clusters[{name}].transport_socket.typed_config{suffix}"
    return Site(path, detail, lambda: with_cluster(snap, k, _edit_upstream(edit)))


def _mesh_clusters(snap: Snapshot) -> Iterator[tuple[int, UpstreamTlsContext]]:
    """Clusters with an upstream TLS context accepting SPIFFE identities."""
    for k, c in enumerate(snap.clusters):
        tls = _upstream_tls(c)
        if tls is not None and _spiffe_sans(_validation(tls.common_tls_context)):
            yield k, tls


def _no_client_cert(tls: UpstreamTlsContext) -> None:
    common = tls.common_tls_context
    assert common is not None
    common.tls_certificates = []
    common.tls_certificate_sds_secret_configs = []
    common.tls_certificate_provider_instance = None
    common.tls_certificate_certificate_provider_instance = None


def _drop_client_cert(snap: Snapshot) -> Iterator[Site]:
    for k, tls in _mesh_clusters(snap):
        common = tls.common_tls_context
        if common is not None and (
            common.tls_certificates or common.tls_certificate_sds_secret_configs
        ):
            yield _cluster_site(
                snap, k, ".common_tls_context", "client certificate removed", _no_client_cert
            )


def _san_edit(i: int, matcher: StringMatcher, extra: bool = False) -> UpstreamEdit:
    def apply(tls: UpstreamTlsContext) -> None:
        vc = _validation(tls.common_tls_context)
        assert vc is not None
        if extra:
            san = copy.deepcopy(vc.match_typed_subject_alt_names[i])
            san.matcher = matcher
            vc.match_typed_subject_alt_names = [*vc.match_typed_subject_alt_names, san]
        else:
            vc.match_typed_subject_alt_names[i].matcher = matcher

    return apply


SanChange = Callable[[re.Match[str]], tuple[str, StringMatcher, bool]]


def _san_sites(change: SanChange) -> Callable[[Snapshot], Iterator[Site]]:
    def sites(snap: Snapshot) -> Iterator[Site]:
        for k, tls in _mesh_clusters(snap):
            for i, m in _spiffe_sans(_validation(tls.common_tls_context)):
                detail, matcher, extra = change(m)
                suffix = f".common_tls_context.match_typed_subject_alt_names[{i}]"
                yield _cluster_site(snap, k, suffix, detail, _san_edit(i, matcher, extra))

    return sites


def _to_prefix(m: re.Match[str]) -> tuple[str, StringMatcher, bool]:
    prefix = f"spiffe://{m['td']}/ns/{m['ns']}/"
    return f"SAN exact {m.group(0)} -> prefix {prefix}", StringMatcher(prefix=prefix), False


def _other_domain(m: re.Match[str]) -> tuple[str, StringMatcher, bool]:
    new = f"spiffe://{OTHER_TRUST_DOMAIN}/ns/{m['ns']}/sa/{m['sa']}"
    return f"SAN {m.group(0)} -> {new}", StringMatcher(exact=new), False


def _extra_account(m: re.Match[str]) -> tuple[str, StringMatcher, bool]:
    sa = "default" if m["sa"] != "default" else "mutant"
    new = f"spiffe://{m['td']}/ns/{m['ns']}/sa/{sa}"
    return f"SAN {new} accepted besides {m.group(0)}", StringMatcher(exact=new), True


def _tunnel_port(snap: Snapshot) -> Iterator[Site]:
    """A mesh cluster's EDS endpoints on another port than the tunnel's: the port the
    cluster's name or SNI gives for the Service, else 80."""
    by_name = {resource_name(e): (i, e) for i, e in enumerate(snap.endpoints)}
    for k, _tls in _mesh_clusters(snap):
        c = snap.clusters[k]
        service = c.eds_cluster_config.service_name if c.eds_cluster_config else ""
        found = by_name.get(service or c.name)
        if found is None:
            continue
        i, cla = found
        if not any(
            lb.endpoint.address.socket_address.port_value == MESH_PORT
            for loc in cla.endpoints
            for lb in loc.lb_endpoints
            if lb.endpoint and lb.endpoint.address and lb.endpoint.address.socket_address
        ):
            continue
        tail = c.name.rsplit("/", 1)[-1]
        port = int(tail) if tail.isdigit() and int(tail) != MESH_PORT else 80
        yield Site(
            f"clusters[{c.name}].load_assignment.endpoints",
            f"endpoints dialled on {port}, not {MESH_PORT}",
            _endpoints_builder(snap, i, port),
        )


def _endpoints_builder(snap: Snapshot, i: int, port: int) -> Callable[[], Snapshot]:
    def build() -> Snapshot:
        cla = copy.deepcopy(snap.endpoints[i])
        for loc in cla.endpoints:
            for lb in loc.lb_endpoints:
                sock = (
                    lb.endpoint.address.socket_address
                    if lb.endpoint and lb.endpoint.address
                    else None
                )
                if sock is not None and sock.port_value == MESH_PORT:
                    sock.port_value = port
        endpoints = list(snap.endpoints)
        endpoints[i] = cla
        return dataclasses.replace(snap, endpoints=tuple(endpoints))

    return build


# --- inbound: the client certificate required, and SNI to target port ---------------------------


def _downstream_tls(chain: FilterChain) -> DownstreamTlsContext | None:
    return _tls(chain.transport_socket, DownstreamTlsContext)


def _inbound(snap: Snapshot) -> Iterator[tuple[int, Listener, list[int]]]:
    """Listeners whose chains terminate TLS and proxy TCP by SNI: (index, chains)."""
    for k, li in enumerate(snap.listeners):
        chains = [
            c
            for c, chain in enumerate(li.filter_chains)
            if _downstream_tls(chain) is not None
            and tcp_cluster(chain) is not None
            and chain.filter_chain_match is not None
            and chain.filter_chain_match.server_names
        ]
        if chains:
            yield k, li, chains


DownstreamEdit = Callable[[DownstreamTlsContext], None]


def _edit_downstream(c: int, edit: DownstreamEdit) -> Callable[[Listener], None]:
    def apply(li: Listener) -> None:
        chain = li.filter_chains[c]
        tls = _downstream_tls(chain)
        assert tls is not None and chain.transport_socket is not None
        edit(tls)
        chain.transport_socket.typed_config = pack_any(tls)

    return apply


def _spiffe_prefixes(tls: DownstreamTlsContext) -> list[int]:
    vc = _validation(tls.common_tls_context)
    return [
        i
        for i, san in enumerate(vc.match_typed_subject_alt_names if vc is not None else ())
        if san.matcher is not None and (san.matcher.prefix or "").startswith("spiffe://")
    ]


def _inbound_san(drop: bool) -> Callable[[Snapshot], Iterator[Site]]:
    def sites(snap: Snapshot) -> Iterator[Site]:
        for k, li, chains in _inbound(snap):
            for c in chains:
                tls = _downstream_tls(li.filter_chains[c])
                assert tls is not None
                for i in _spiffe_prefixes(tls):
                    path = chain_path(
                        li, c, f".transport_socket.match_typed_subject_alt_names[{i}]"
                    )
                    detail = (
                        "client SAN matcher removed"
                        if drop
                        else f"client SAN prefix -> spiffe://{OTHER_TRUST_DOMAIN}/"
                    )
                    yield listener_site(
                        snap, k, path, detail, _edit_downstream(c, _inbound_edit(i, drop))
                    )

    return sites


def _inbound_edit(i: int, drop: bool) -> DownstreamEdit:
    def apply(tls: DownstreamTlsContext) -> None:
        vc = _validation(tls.common_tls_context)
        assert vc is not None
        if drop:
            del vc.match_typed_subject_alt_names[i]
        else:
            vc.match_typed_subject_alt_names[i].matcher = StringMatcher(
                prefix=f"spiffe://{OTHER_TRUST_DOMAIN}/"
            )

    return apply


def _swap_chains(a: int, b: int, part: str) -> Callable[[Listener], None]:
    def apply(li: Listener) -> None:
        ca, cb = li.filter_chains[a], li.filter_chains[b]
        if part == "sni":
            fa, fb = ca.filter_chain_match, cb.filter_chain_match
            assert fa is not None and fb is not None
            fa.server_names, fb.server_names = fb.server_names, fa.server_names
        else:
            ca.filters, cb.filters = cb.filters, ca.filters

    return apply


def _inbound_swap(part: str) -> Callable[[Snapshot], Iterator[Site]]:
    """Two chains of the inbound listener swap their SNIs (or their targets), where
    they go to different clusters: a swap between chains to one cluster changes nothing."""

    def sites(snap: Snapshot) -> Iterator[Site]:
        for k, li, chains in _inbound(snap):
            for i, a in enumerate(chains):
                target = tcp_cluster(li.filter_chains[a])
                b = next(
                    (x for x in chains[i + 1 :] if tcp_cluster(li.filter_chains[x]) != target),
                    None,
                )
                if b is None:
                    continue
                names = [
                    ",".join(fcm.server_names)
                    for fcm in (
                        li.filter_chains[a].filter_chain_match,
                        li.filter_chains[b].filter_chain_match,
                    )
                    if fcm is not None
                ]
                what = "SNIs" if part == "sni" else "targets"
                yield listener_site(
                    snap,
                    k,
                    chain_path(
                        li, a, ".filter_chain_match.server_names" if part == "sni" else ".filters"
                    ),
                    f"chains for {' and '.join(names)} swap their {what}",
                    _swap_chains(a, b, part),
                )

    return sites


OPERATORS: tuple[Operator, ...] = (
    Operator(
        "drop-mesh-client-certificate",
        "A mesh cluster's client certificate removed: the tunnel, which requires one, "
        "refuses the connection. mesh-mtls should catch it. Equivalent when the cluster is "
        "unused.",
        _drop_client_cert,
        prove_unused_cluster,
    ),
    Operator(
        "mesh-wrong-tunnel-port",
        f"A mesh cluster's endpoints dialled on the Service port instead of the tunnel port "
        f"{MESH_PORT}: cleartext HTTP meets the application, or TLS meets a plain port. "
        "mesh-mtls should catch it. Never proven equivalent.",
        _tunnel_port,
    ),
    Operator(
        "mesh-san-prefix",
        "A mesh cluster's exact SPIFFE SAN turned into a prefix of its namespace: every "
        "ServiceAccount of the namespace is accepted. mesh-identity should catch it. "
        "Equivalent when the cluster is unused.",
        _san_sites(_to_prefix),
        prove_unused_cluster,
    ),
    Operator(
        "mesh-san-other-trust-domain",
        "A mesh cluster's SPIFFE SAN names another trust domain: the backend's identity is "
        "refused, another domain's accepted. mesh-identity should catch it. Equivalent when "
        "the cluster is unused.",
        _san_sites(_other_domain),
        prove_unused_cluster,
    ),
    Operator(
        "mesh-extra-san",
        "A second SPIFFE SAN (another ServiceAccount of the namespace) accepted besides the "
        "backend's. mesh-identity should catch it. Equivalent when the cluster is unused.",
        _san_sites(_extra_account),
        prove_unused_cluster,
    ),
    Operator(
        "inbound-san-other-trust-domain",
        "The inbound listener's client SAN prefix names another trust domain: the mesh's "
        "own clients are refused, another domain's admitted. mesh-inbound should "
        "catch it. Never proven equivalent.",
        _inbound_san(drop=False),
    ),
    Operator(
        "inbound-drop-san",
        "The inbound listener's client SAN matcher removed: a client certificate of any "
        "trust domain the CA signs is admitted. mesh-inbound should catch it. Never "
        "proven equivalent.",
        _inbound_san(drop=True),
    ),
    Operator(
        "inbound-swap-sni",
        "Two inbound chains going to different target ports swap their SNIs: a call to one "
        "Service port reaches the other's targetPort. mesh-inbound should catch it. "
        "Sites only where the targets differ.",
        _inbound_swap("sni"),
    ),
    Operator(
        "inbound-swap-target",
        "Two inbound chains going to different target ports swap their tcp_proxy filters: "
        "each Service port reaches the other's targetPort. mesh-inbound should catch "
        "it. Sites only where the targets differ.",
        _inbound_swap("target"),
    ),
)
