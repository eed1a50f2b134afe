"""The CORS filter (``envoy.filters.http.cors``), as ``cors_filter.cc`` runs it.

Policies come from ``typed_per_filter_config`` under the filter's name, most specific
first (route, virtual host, route configuration); "If no cors policy is configured in
the per filter config, then the cors policy fields in the route configuration will be
ignored" - only then do the legacy ``RouteAction.cors`` and ``VirtualHost.cors``
count. Each field is taken from the first policy that sets it. The filter does
nothing without a route *entry* (redirect and direct-response routes have none) or
when the HCM lacks the filter.

Decisions (checked on Envoy 1.40): a preflight is "method is OPTIONS, origin header is
not empty, Access-Control-Request-Method is not empty"; with an allowed origin Envoy
answers 200 itself with the allow-* headers (and, from its encoder, expose-headers),
without the route's response header mutations; with an origin not allowed the
preflight continues to the router ("forward_not_matching_preflights" defaults to
true). Any other request with an allowed origin gets allow-origin (the request's
origin), allow-credentials and expose-headers on its response.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.semantics.envoy.match import parts_per_million
from verifier.semantics.envoy.strings import Match, string_matcher
from verifier.xds import read
from verifier.xds.layout import XdsLoadError

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import CorsPolicy as LegacyCorsPolicy
    from envoy_data_plane.envoy.extensions.filters.http.cors.v3 import CorsPolicy
    from envoy_data_plane.google.protobuf import Any

    Policy = CorsPolicy | LegacyCorsPolicy

CORS_POLICY = "envoy.extensions.filters.http.cors.v3.CorsPolicy"


@dataclass(frozen=True)
class CorsResult:
    preflight: bool  # Envoy answers 200 itself
    response_headers: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = ()
    trace: str = ""


@dataclass(frozen=True)
class CorsPolicies:
    """The merged view the filter builds per request."""

    policies: tuple[Policy, ...]
    origins: tuple[Match, ...]

    @classmethod
    def build(cls, policies: Iterable[Policy]) -> CorsPolicies | None:
        ordered = tuple(policies)
        if not ordered:
            return None
        origins: tuple[Match, ...] = ()
        for p in ordered:
            if p.allow_origin_string_match:
                origins = tuple(string_matcher(m) for m in p.allow_origin_string_match)
                break
        return cls(ordered, origins)

    def _first(self, attr: str) -> str:
        for p in self.policies:
            value = getattr(p, attr)
            if value:
                return str(value)
        return ""

    def _first_bool(self, attr: str, default: bool) -> bool:
        for p in self.policies:
            value = getattr(p, attr)
            if value is not None:
                return bool(value)
        return default

    def origin_allowed(self, origin: str) -> bool:
        return any(m("*") or m(origin) for m in self.origins)

    def evaluate(self, method: str, headers: dict[str, str]) -> CorsResult | None:
        notes: list[str] = []
        enabled = self.policies[0].filter_enabled
        if enabled is not None:
            ppm = parts_per_million(enabled.default_value)
            if ppm == 0:
                return None
            if ppm < 1_000_000:
                notes.append("CORS filter_enabled below 100%: modelled as enabled")
        origin = headers.get("origin", "")
        if not origin:
            return None
        allowed = self.origin_allowed(origin)
        expose = self._first("expose_headers")
        creds = self._first_bool("allow_credentials", False)
        simple: list[tuple[str, str]] = []
        if allowed:
            simple.append(("access-control-allow-origin", origin))
            if creds:
                simple.append(("access-control-allow-credentials", "true"))
            if expose:
                simple.append(("access-control-expose-headers", expose))
        requested_method = headers.get("access-control-request-method", "")
        if method != "OPTIONS" or not requested_method:
            why = "allowed" if allowed else "not allowed"
            return CorsResult(False, tuple(simple), tuple(notes), f"CORS: origin {origin!r} {why}")
        if not allowed and self._first_bool("forward_not_matching_preflights", True):
            return CorsResult(
                False, (), tuple(notes), f"CORS: preflight from {origin!r} not allowed; forwarded"
            )
        out: dict[str, str] = {}
        if allowed:
            out["access-control-allow-origin"] = origin
        if creds:
            out["access-control-allow-credentials"] = "true"
        methods = self._first("allow_methods")
        if methods:
            out["access-control-allow-methods"] = requested_method if methods == "*" else methods
        allow_headers = self._first("allow_headers")
        if allow_headers:
            out["access-control-allow-headers"] = (
                headers.get("access-control-request-headers", "")
                if allow_headers == "*"
                else allow_headers
            )
        max_age = self._first("max_age")
        if max_age:
            out["access-control-max-age"] = max_age
        out.update(simple)  # the filter's encoder runs on its own reply too
        return CorsResult(
            True, tuple(out.items()), tuple(notes), f"CORS: preflight from {origin!r} answered"
        )


def typed_policy(configs: dict[str, Any], filter_name: str | None) -> CorsPolicy | None:
    if filter_name is None:
        return None
    found = configs.get(filter_name)
    if found is None:
        return None
    try:
        msg = read.unpack(found)
    except XdsLoadError:
        return None
    return msg if read.is_a(msg, CORS_POLICY) else None
