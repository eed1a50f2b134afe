"""xDS that the Envoy model does not model is named, with what check assumed instead.

Why it matters: check judges every request through a model of Envoy, and a model
that silently skips part of the configuration can pass xDS whose real behaviour
differs. The reference translator writes nothing the model skips, but xDS from
elsewhere may: an external authorization or RBAC filter that refuses requests, a
cookie or dynamic-metadata route match, a cluster chosen by a plugin. Each such element is
reported once per kind (how many there are, the xDS path of the first), with the
assumption made for it, so a clean report never hides an unjudged part.

What is named:
- HTTP filters other than the router and CORS (which are modelled), unless
  ``disabled``: taken to pass every request through unchanged;
- listener filters other than the original destination filter and the TLS and HTTP
  inspectors (e.g. PROXY protocol): taken to accept every connection;
- filter chain criteria on the client's address (direct source and source prefix
  ranges, source type, source ports): ignored; a listener's ``filter_chain_matcher``
  (the matcher API): ignored, the ``filter_chain_match`` fields decide;
- ``path_normalization_options``, scoped routes, VHDS and generic matcher trees;
- route match conditions on TLS context, dynamic metadata, filter state and cookies
  (taken to hold; the answers they decide are not judged: assumed-answers, EV110),
  and URI-template path matches (taken never to match); a ``grpc`` condition is
  modelled (the request's content-type);
- cluster specifier plugins, weighted clusters chosen by header, URI-template
  rewrites, and cluster types other than DNS, EDS and static ones.

Example: an HCM of another implementation lists ``envoy.filters.http.ext_authz``
before the router: one warning, "HTTP filter envoy.filters.http.ext_authz ... is not
modelled (1x): check judges requests as if it passes every request through".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.registry import Rule
from verifier.semantics.envoy.chains import source_criteria
from verifier.semantics.envoy.downstream import MODELLED_LISTENER_FILTERS as LISTENER_FILTERS
from verifier.semantics.envoy.match import ASSUMED_CONDITIONS
from verifier.xds import read

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.cluster.v3 import Cluster
    from envoy_data_plane.envoy.config.listener.v3 import Listener

NAME = "unmodelled-xds"
CODE = "EV109"

MODELLED_HTTP_FILTERS = (
    "envoy.extensions.filters.http.router.v3.Router",
    "envoy.extensions.filters.http.cors.v3.Cors",
)
# By type, or by name without a typed config.
MODELLED_LISTENER_FILTERS = tuple(x for pair in LISTENER_FILTERS for x in pair)
MODELLED_BY_NAME = ("envoy.filters.http.router", "envoy.filters.http.cors")
PASS = "it passes every request through"
ASSUMED_MATCH = ASSUMED_CONDITIONS
DNS_CLUSTER_EXTENSION = "envoy.cluster.dns"

Item = tuple[str, str, str]  # (what, assumption, xds path)


def _type_of(typed: object, name: str) -> str:
    url = getattr(typed, "type_url", "") or ""
    return url.rsplit("/", 1)[-1] or name


def _set(value: object) -> bool:
    """A list with items, or a message at all (an empty message is falsy, yet set)."""
    return read.is_set(value)


def _listener(li: Listener) -> Iterator[Item]:
    base = f"listeners[{li.name}]"
    for i, f in enumerate(li.listener_filters):
        kind = _type_of(f.typed_config, f.name)
        if kind not in MODELLED_LISTENER_FILTERS:
            yield (
                f"listener filter {f.name} ({kind})",
                "it accepts every connection",
                (f"{base}.listener_filters[{i}]"),
            )
    if li.filter_chain_matcher is not None:
        yield (
            "a listener's filter_chain_matcher",
            "it is ignored",
            f"{base}.filter_chain_matcher",
        )
    chains = [(f"{base}.filter_chains[{i}]", c) for i, c in enumerate(li.filter_chains)]
    for path, chain in chains:
        for crit in source_criteria(chain.filter_chain_match):
            yield (
                f"filter chain match on {crit}",
                "it is ignored",
                (f"{path}.filter_chain_match.{crit}"),
            )
    for path, hcm in walk.hcms(li):
        for i, f in enumerate(hcm.http_filters):
            kind = _type_of(f.typed_config, f.name)
            if f.disabled or kind in MODELLED_HTTP_FILTERS:
                continue
            if not f.typed_config and f.name in MODELLED_BY_NAME:
                continue
            yield f"HTTP filter {f.name} ({kind})", PASS, f"{path}.http_filters[{i}]"
        if hcm.path_normalization_options is not None:
            yield (
                "path_normalization_options",
                "they are unset",
                (f"{path}.path_normalization_options"),
            )
        if hcm.scoped_routes is not None:
            yield "scoped routes", "no route configuration applies", f"{path}.scoped_routes"


def _routes(ctx: Context) -> Iterator[Item]:
    for path, rc in walk.route_configs(ctx.snapshot):
        if rc.vhds is not None:
            yield "VHDS (on-demand virtual hosts)", "none are fetched", f"{path}.vhds"
        for vh in rc.virtual_hosts:
            if vh.matcher is not None:
                yield (
                    "a virtual host's generic matcher tree",
                    "its routes list applies",
                    (f"{path}.virtual_hosts[{vh.name}].matcher"),
                )
    for ref in walk.routes(ctx.snapshot):
        m = ref.route.match
        if m is not None:
            for extra in ASSUMED_MATCH:
                if _set(getattr(m, extra)):
                    yield (
                        f"route match on {extra}",
                        "the condition holds (the answers it decides are not judged)",
                        (f"{ref.path}.match.{extra}"),
                    )
            if m.path_match_policy is not None:
                yield (
                    "URI-template path match (path_match_policy)",
                    "it never matches",
                    (f"{ref.path}.match.path_match_policy"),
                )
        act = walk.action(ref.route)
        if act is None:
            continue
        if act.cluster_specifier_plugin or act.inline_cluster_specifier_plugin is not None:
            yield "cluster specifier plugin", "no cluster is chosen", f"{ref.path}.route"
        if act.weighted_clusters is not None and act.weighted_clusters.header_name:
            yield (
                "weighted clusters chosen by header",
                "the weights apply",
                (f"{ref.path}.route.weighted_clusters.header_name"),
            )
        if act.path_rewrite_policy is not None:
            yield (
                "URI-template rewrite (path_rewrite_policy)",
                "the path is kept",
                (f"{ref.path}.route.path_rewrite_policy"),
            )


def _cluster(c: Cluster) -> Iterator[Item]:
    ext = c.cluster_type.name if c.cluster_type is not None else None
    if ext is not None and ext != DNS_CLUSTER_EXTENSION:
        yield (
            f"cluster type extension {ext}",
            "it reaches no Service",
            (f"clusters[{c.name}].cluster_type"),
        )


def check(ctx: Context) -> Iterable[Finding]:
    seen: dict[tuple[str, str], list[str]] = {}
    items: list[Item] = [
        *(i for li in ctx.snapshot.listeners for i in _listener(li)),
        *_routes(ctx),
        *(i for c in ctx.snapshot.clusters for i in _cluster(c)),
    ]
    for what, assumption, path in items:
        seen.setdefault((what, assumption), []).append(path)
    for (what, assumption), paths in sorted(seen.items()):
        yield new(
            CODE,
            NAME,
            what=what,
            count=len(paths),
            assumption=assumption,
            resource=walk.resource_of(paths[0]),
            xds_path=paths[0],
        )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRoute",),
    spec_ref="https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/api",
    doc=(__doc__ or "").strip(),
    check=check,
)
