"""Rules: one file per rule, listed here explicitly (no registration on import).

Order does not matter: the registry runs them sorted by name.
"""

from __future__ import annotations

from verifier.rules import (
    attached_rules_rendered,
    gateway_https_misdirected_requests,
    httproute_backend_request_header_modification,
    httproute_backend_weights,
    httproute_cors,
    httproute_header_matching,
    httproute_host_rewrite,
    httproute_hostnames,
    httproute_method_matching,
    httproute_parent_ref_port,
    httproute_path_matching,
    httproute_path_redirect,
    httproute_path_rewrite,
    httproute_port_redirect,
    httproute_precedence,
    httproute_query_param_matching,
    httproute_redirect_status_code,
    httproute_request_header_modifier,
    httproute_request_mirror,
    httproute_request_redirect,
    httproute_response_header_modification,
    httproute_scheme_redirect,
    httproute_timeouts,
    no_route_default_404,
    whole_config_equivalence,
)

from verifier.registry import Rule

RULES: tuple[Rule, ...] = (
    attached_rules_rendered.RULE,
    gateway_https_misdirected_requests.RULE,
    httproute_backend_request_header_modification.RULE,
    httproute_backend_weights.RULE,
    httproute_cors.RULE,
    httproute_header_matching.RULE,
    httproute_host_rewrite.RULE,
    httproute_hostnames.RULE,
    httproute_method_matching.RULE,
    httproute_parent_ref_port.RULE,
    httproute_path_matching.RULE,
    httproute_path_redirect.RULE,
    httproute_path_rewrite.RULE,
    httproute_port_redirect.RULE,
    httproute_precedence.RULE,
    httproute_query_param_matching.RULE,
    httproute_redirect_status_code.RULE,
    httproute_request_header_modifier.RULE,
    httproute_request_mirror.RULE,
    httproute_request_redirect.RULE,
    httproute_response_header_modification.RULE,
    httproute_scheme_redirect.RULE,
    httproute_timeouts.RULE,
    no_route_default_404.RULE,
    whole_config_equivalence.RULE,
)
