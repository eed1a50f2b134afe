"""RouteConfigurations compiled once: virtual host index, route tables, header parsers.

Everything a request needs that does not depend on the request is computed here,
in the model's ``__init__``, so evaluation only compares.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envoy_data_plane.envoy.config.route.v3 import (
    CorsPolicy as LegacyCorsPolicy,
)
from envoy_data_plane.envoy.config.route.v3 import (
    RouteConfiguration,
    VirtualHost,
    VirtualHostTlsRequirementType,
)

from verifier.semantics.envoy_cors import CorsPolicies, Policy, typed_policy
from verifier.semantics.envoy_headers import HeaderParser, header_parser
from verifier.semantics.envoy_routes import CompiledRoute, RouteTable
from verifier.semantics.envoy_vhosts import VirtualHostIndex, build_index


@dataclass
class CompiledVhost:
    vhost: VirtualHost
    table: RouteTable
    request_headers: HeaderParser
    response_headers: HeaderParser

    @property
    def name(self) -> str:
        return self.vhost.name

    @property
    def require_tls(self) -> bool:
        # VirtualHost.require_tls: EXTERNAL_ONLY / ALL: "All requests must use TLS. If
        # a request is not using TLS, a 301 redirect will be sent telling the client to
        # use HTTPS." Every request of ours is external.
        return self.vhost.require_tls not in (None, VirtualHostTlsRequirementType.NONE)


@dataclass
class CompiledRouteConfig:
    config: RouteConfiguration
    vhosts: VirtualHostIndex[CompiledVhost]
    request_headers: HeaderParser
    response_headers: HeaderParser
    notes: list[str] = field(default_factory=list)
    _cors: dict[tuple[int, int, str | None], CorsPolicies | None] = field(default_factory=dict)

    @classmethod
    def build(cls, rc: RouteConfiguration) -> CompiledRouteConfig:
        notes: list[str] = []
        items = []
        for vh in rc.virtual_hosts:
            label = f"virtual host {vh.name}"
            compiled = CompiledVhost(
                vh,
                RouteTable.build(list(vh.routes)),
                header_parser(
                    label, vh.request_headers_to_add, vh.request_headers_to_remove, request=True
                ),
                header_parser(
                    label, vh.response_headers_to_add, vh.response_headers_to_remove, request=False
                ),
            )
            if vh.matcher is not None:
                notes.append(f"{label}: the generic matcher tree is not modelled")
            items.append((vh.name, list(vh.domains), compiled))
        if rc.vhds is not None:
            notes.append("VHDS (on-demand virtual hosts) not modelled")
        label = f"route configuration {rc.name}"
        return cls(
            rc,
            build_index(items, notes.append),
            header_parser(
                label, rc.request_headers_to_add, rc.request_headers_to_remove, request=True
            ),
            header_parser(
                label, rc.response_headers_to_add, rc.response_headers_to_remove, request=False
            ),
            notes,
        )

    @property
    def ignore_port(self) -> bool:
        return bool(self.config.ignore_port_in_host_matching)

    @property
    def ignore_path_parameters(self) -> bool:
        return bool(self.config.ignore_path_parameters_in_path_matching)

    @property
    def most_specific_wins(self) -> bool:
        return bool(self.config.most_specific_header_mutations_wins)

    def levels(
        self, route: CompiledRoute, vhost: CompiledVhost, *, request: bool
    ) -> list[HeaderParser]:
        """Header parsers in evaluation order: by default route, virtual host, route
        configuration (outer levels win); reversed with most_specific_header_mutations_wins."""
        if request:
            order = [route.request_headers, vhost.request_headers, self.request_headers]
        else:
            order = [route.response_headers, vhost.response_headers, self.response_headers]
        return order[::-1] if self.most_specific_wins else order

    def cors(
        self, route: CompiledRoute, vhost: CompiledVhost, filter_name: str | None
    ) -> CorsPolicies | None:
        cache_key = (id(vhost), route.index, filter_name)
        if cache_key in self._cors:
            return self._cors[cache_key]
        typed: list[Policy] = []
        for configs in (
            route.route.typed_per_filter_config,
            vhost.vhost.typed_per_filter_config,
            self.config.typed_per_filter_config,
        ):
            p = typed_policy(configs, filter_name)
            if p is not None:
                typed.append(p)
        legacy: list[LegacyCorsPolicy] = []
        if not typed:
            action = route.route.route
            if action is not None and action.cors is not None:
                legacy.append(action.cors)
            if vhost.vhost.cors is not None:
                legacy.append(vhost.vhost.cors)
        found = CorsPolicies.build(typed or legacy)
        self._cors[cache_key] = found
        return found
