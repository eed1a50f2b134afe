"""RouteConfigurations compiled once: virtual host index, route tables, header parsers.

Everything a request needs that does not depend on the request is computed here,
in the model's ``__init__``, so evaluation only compares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from verifier.semantics.envoy.cors import CorsPolicies, typed_policy
from verifier.semantics.envoy.headers import HeaderParser, header_parser
from verifier.semantics.envoy.routes import CompiledRoute, RouteTable
from verifier.semantics.envoy.strings import ModelError, compile_regex, string_matcher
from verifier.semantics.envoy.vhosts import VirtualHostIndex, build_index
from verifier.xds.enums import VirtualHostTlsRequirementType

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import (
        CorsPolicy as LegacyCorsPolicy,
    )
    from envoy_data_plane.envoy.config.route.v3 import (
        RouteConfiguration,
        VirtualHost,
    )

    from verifier.semantics.envoy.cors import Policy


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
    def tls_requirement(self) -> int:
        """VirtualHost.require_tls: NONE, EXTERNAL_ONLY or ALL (model.py says what each
        does); 0 (NONE) when unset."""
        return int(self.vhost.require_tls or VirtualHostTlsRequirementType.NONE)


@dataclass
class CompiledRouteConfig:
    config: RouteConfiguration
    vhosts: VirtualHostIndex[CompiledVhost]
    request_headers: HeaderParser
    response_headers: HeaderParser
    notes: list[str] = field(default_factory=list)
    # RouteConfiguration.internal_only_headers, lower-cased: removed from external
    # requests ("they will be cleaned prior to filter invocation").
    internal_only: tuple[str, ...] = ()
    _cors: dict[tuple[int, int, str | None], CorsPolicies | None] = field(default_factory=dict)

    @classmethod
    def build(cls, rc: RouteConfiguration) -> CompiledRouteConfig:
        notes: list[str] = []
        items = []
        for vh in rc.virtual_hosts:
            label = f"virtual host {vh.name}"
            try:
                table = RouteTable.build(list(vh.routes))
            except ModelError as exc:  # say where, as findings do
                raise ModelError(f"routes[{rc.name}].virtual_hosts[{vh.name}].{exc}") from None
            compiled = CompiledVhost(
                vh,
                table,
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
        _check_lazy_parts(rc)
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
            tuple(h.lower() for h in rc.internal_only_headers),
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


def _check_lazy_parts(rc: RouteConfiguration) -> None:
    """Raise now the ModelError that evaluating a request would raise later: the
    regexes of rewrites and CORS origin matchers are only read for the requests that
    reach them, and a model must refuse a configuration whole, as Envoy does."""
    configs = [rc.typed_per_filter_config]
    legacy: list[LegacyCorsPolicy] = []
    for vh in rc.virtual_hosts:
        configs.append(vh.typed_per_filter_config)
        if vh.cors is not None:
            legacy.append(vh.cors)
        for route in vh.routes:
            configs.append(route.typed_per_filter_config)
            action = route.route
            rewrites = [route.redirect.regex_rewrite if route.redirect is not None else None]
            if action is not None:
                rewrites += [action.regex_rewrite, action.host_rewrite_path_regex]
                if action.cors is not None:
                    legacy.append(action.cors)
            for rewrite in rewrites:
                if rewrite is not None and rewrite.pattern is not None:
                    compile_regex(rewrite.pattern.regex)
    policies: list[Policy] = list(legacy)
    for found in configs:
        policies += [p for name in found if (p := typed_policy(found, name)) is not None]
    for policy in policies:
        for matcher in policy.allow_origin_string_match:
            string_matcher(matcher)
