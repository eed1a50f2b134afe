"""API-server validation of input objects: each rule family, with exact lines."""

from __future__ import annotations

import textwrap

import pytest

from verifier.errors import InputError
from verifier.gatewayapi.load import load_texts
from verifier.gatewayapi.schema_core import matches
from verifier.gatewayapi.validate import validate_object

Found = list[tuple[int, str, str]]


def problems(text: str) -> list[InputError]:
    loaded = load_texts([("t.yaml", text)])
    assert not loaded.errors
    return [e for obj in loaded.objects for e in validate_object(obj)]


def found(text: str) -> Found:
    return sorted((e.line, e.field, e.code) for e in problems(text))


# Rules start on line 9.
ROUTE_HEAD = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: r
spec:
  parentRefs:
  - name: edge
  rules:
"""


def route(rules: str) -> str:
    return ROUTE_HEAD + textwrap.indent(textwrap.dedent(rules), "  ")


# Listeners start on line 8.
GATEWAY_HEAD = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: edge
spec:
  gatewayClassName: aether
  listeners:
"""


def gateway(listeners: str) -> str:
    return GATEWAY_HEAD + textwrap.indent(textwrap.dedent(listeners), "  ")


RICH = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: rich
  namespace: web
  labels:
    app.kubernetes.io/name: rich
  annotations:
    example.com/note: "anything goes here"
spec:
  parentRefs:
  - name: edge
    namespace: edge-infra
    sectionName: https
  - name: edge
    namespace: edge-infra
    sectionName: http
  hostnames: ["*.example.com", api.example.com]
  rules:
  - name: api-v2
    matches:
    - path: {type: PathPrefix, value: /api/v2}
      headers:
      - {name: X-Version, value: "2"}
      - {type: RegularExpression, name: x-tenant, value: "^(a|b)-[0-9]+$"}
      queryParams:
      - {name: debug, value: "true"}
      method: GET
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Edge, value: aether}]
        add: [{name: X-Trace, value: "on"}]
        remove: [X-Internal]
    - type: ResponseHeaderModifier
      responseHeaderModifier: {remove: [Server]}
    - type: URLRewrite
      urlRewrite:
        hostname: backend.internal
        path: {type: ReplacePrefixMatch, replacePrefixMatch: /v2}
    - type: RequestMirror
      requestMirror:
        backendRef: {name: shadow, port: 8080}
        percent: 10
    - type: RequestMirror
      requestMirror:
        backendRef: {name: shadow2, port: 8080}
        fraction: {numerator: 1, denominator: 1000}
    - type: CORS
      cors:
        allowOrigins: ["https://app.example.com", "https://*.example.org:8443"]
        allowMethods: [GET, POST]
        allowHeaders: [Authorization, Content-Type]
        exposeHeaders: [X-Request-Id]
        allowCredentials: true
        maxAge: 600
    - type: ExtensionRef
      extensionRef: {group: example.com, kind: RateLimit, name: tight}
    backendRefs:
    - {name: api-v2, port: 8080, weight: 90}
    - name: api-v2-canary
      namespace: canary
      port: 8080
      weight: 10
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier: {set: [{name: X-Canary, value: "yes"}]}
    timeouts: {request: 2m, backendRequest: 1m30s}
    retry: {codes: [502, 503], attempts: 2, backoff: 100ms}
  - name: legacy
    matches:
    - path: {type: Exact, value: /old}
    - path: {type: RegularExpression, value: "/items/[0-9]+"}
    filters:
    - type: RequestRedirect
      requestRedirect:
        scheme: https
        hostname: www.example.com
        port: 443
        statusCode: 308
        path: {type: ReplaceFullPath, replaceFullPath: /new}
  - backendRefs: [{name: fallback, port: 80}]
    sessionPersistence:
      sessionName: sid
      absoluteTimeout: 1h
      cookieConfig: {lifetimeType: Permanent}
  - filters:
    - type: ExternalAuth
      externalAuth:
        protocol: HTTP
        backendRef: {name: authz, port: 9000}
        http: {path: /check, allowedHeaders: [authorization]}
        forwardBody: {maxSize: 1024}
    - type: RequestRedirect
      requestRedirect:
        path: {type: ReplacePrefixMatch, replacePrefixMatch: /}
"""

RICH_GATEWAY = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: edge
  namespace: edge-infra
spec:
  gatewayClassName: aether
  addresses:
  - value: 10.0.0.10
  - {type: Hostname, value: edge.example.com}
  infrastructure:
    labels: {team: edge}
    annotations: {example.com/owner: platform}
    parametersRef: {group: example.com, kind: EdgeConfig, name: default}
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes:
      namespaces:
        from: Selector
        selector: {matchLabels: {edge: "true"}}
      kinds: [{kind: HTTPRoute}]
  - name: https
    port: 443
    protocol: HTTPS
    hostname: "*.example.com"
    tls:
      mode: Terminate
      certificateRefs: [{name: wildcard-cert}]
      options: {example.com/min-tls: "1.2"}
  - {name: tls, port: 8443, protocol: TLS, tls: {mode: Passthrough}}
  - {name: tcp, port: 9000, protocol: TCP}
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{group: "", kind: ConfigMap, name: client-ca}]
      perPort:
      - port: 443
        tls:
          validation:
            mode: AllowInsecureFallback
            caCertificateRefs: [{group: "", kind: ConfigMap, name: other-ca}]
    backend:
      clientCertificateRef: {name: client-cert}
  allowedListeners:
    namespaces: {from: Same}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: aether
spec:
  controllerName: gateway.aether.io/edge
  description: The edge
  parametersRef: {group: example.com, kind: Params, name: p, namespace: edge-infra}
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata:
  name: allow
  namespace: canary
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: web}]
  to: [{group: "", kind: Service}]
"""


# Valid input


def test_feature_rich_httproute_is_valid() -> None:
    assert found(RICH) == []


def test_v1beta1_httproute_uses_the_same_schema() -> None:
    assert found(RICH.replace("/v1\n", "/v1beta1\n", 1)) == []


def test_feature_rich_gateway_class_and_grant_are_valid() -> None:
    assert found(RICH_GATEWAY) == []


def test_rule_defaults_are_valid() -> None:
    # No matches: the API server defaults one PathPrefix "/" match, which also
    # satisfies ReplacePrefixMatch.
    text = route("""\
        - filters:
          - type: URLRewrite
            urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /x}}
          backendRefs: [{name: s, port: 80}]
        """)
    assert found(text) == []


def test_all_problems_of_an_object_are_reported() -> None:
    text = route("""\
        - matches:
          - path: {type: Prefix, value: /a}
          backendRefs:
          - name: s
            port: 0
            weight: -1
        """)
    assert found(text) == [
        (10, "spec.rules[0].matches[0].path.type", "enum"),
        (13, "spec.rules[0].backendRefs[0].port", "minimum"),
        (14, "spec.rules[0].backendRefs[0].weight", "minimum"),
    ]


# Schema keywords


def test_enum_message_lists_the_allowed_values() -> None:
    (error,) = problems(route("- matches: [{path: {type: Prefix, value: /a}}]\n"))
    assert error.message == "expected one of Exact, PathPrefix, RegularExpression, got 'Prefix'"


def test_type_error() -> None:
    text = route("- backendRefs: [{name: s, port: '80'}]\n")
    assert found(text) == [(9, "spec.rules[0].backendRefs[0].port", "type")]


def test_required_field_points_at_its_parent() -> None:
    text = route("""\
        - backendRefs:
          - port: 80
        """)
    assert found(text) == [(10, "spec.rules[0].backendRefs[0].name", "required")]


def test_unknown_field_under_spec() -> None:
    text = route("""\
        - backendRefs: [{name: s, port: 80}]
          timeout: 5s
        """)
    assert found(text) == [(10, "spec.rules[0].timeout", "unknown-field")]


def test_hostname_pattern() -> None:
    text = ROUTE_HEAD.replace("  rules:\n", "  hostnames: [Example.com]\n")
    assert found(text) == [(8, "spec.hostnames[0]", "pattern")]


def test_max_items_on_spec_lists() -> None:
    hosts = [f"h{i}.example.com" for i in range(33)]
    refs = ", ".join(f"{{name: gw, sectionName: {h}}}" for h in hosts)
    text = ROUTE_HEAD.replace("  parentRefs:\n  - name: edge\n", f"  parentRefs: [{refs}]\n")
    text = text.replace("  rules:\n", f"  hostnames: [{', '.join(hosts[:17])}]\n")
    assert [(e.line, e.field, e.message) for e in problems(text)] == [
        (6, "spec.parentRefs", "must have at most 32 items, got 33"),
        (7, "spec.hostnames", "must have at most 16 items, got 17"),
    ]


def test_max_items_on_rule_lists() -> None:
    backends = ", ".join(f"{{name: b{i}, port: 80}}" for i in range(17))
    text = route(f"- backendRefs: [{backends}]\n")
    assert found(text) == [(9, "spec.rules[0].backendRefs", "max-items")]


def test_rules_min_items() -> None:
    assert found(ROUTE_HEAD.replace("  rules:\n", "  rules: []\n")) == [
        (8, "spec.rules", "min-items")
    ]


def test_total_matches_across_rules_at_most_128() -> None:
    matches = ", ".join(f"{{path: {{value: /p{i}}}}}" for i in range(60))
    text = route(f"- matches: [{matches}]\n" * 3)
    assert found(text) == [(8, "spec.rules", "max-items")]


def test_duration_pattern() -> None:
    text = route("- timeouts: {request: 1.5s}\n")
    assert found(text) == [(9, "spec.rules[0].timeouts.request", "pattern")]


def test_weight_maximum() -> None:
    text = route("- backendRefs: [{name: s, port: 80, weight: 1000001}]\n")
    assert found(text) == [(9, "spec.rules[0].backendRefs[0].weight", "maximum")]


def test_redirect_status_codes() -> None:
    ok = route("- filters: [{type: RequestRedirect, requestRedirect: {statusCode: 303}}]\n")
    bad = route("- filters: [{type: RequestRedirect, requestRedirect: {statusCode: 305}}]\n")
    assert found(ok) == []
    assert found(bad) == [(9, "spec.rules[0].filters[0].requestRedirect.statusCode", "enum")]


# Header and query matches


def test_header_name_pattern() -> None:
    text = route("- matches: [{headers: [{name: ':method', value: GET}]}]\n")
    assert found(text) == [(9, "spec.rules[0].matches[0].headers[0].name", "invalid-header-name")]


def test_header_names_unique_as_a_list_map() -> None:
    # The CRD keys the list by exact name; "Foo" and "foo" are both accepted
    # (the spec says only the first equivalent entry is used).
    text = route("""\
        - matches:
          - headers:
            - {name: foo, value: a}
            - {name: Foo, value: b}
            - {name: foo, value: c}
        """)
    assert found(text) == [(13, "spec.rules[0].matches[0].headers[2]", "unique")]


def test_query_param_names_unique() -> None:
    text = route("""\
        - matches:
          - queryParams:
            - {name: q, value: a}
            - {name: q, value: b}
        """)
    assert found(text) == [(12, "spec.rules[0].matches[0].queryParams[1]", "unique")]


def test_header_value_printable_ascii() -> None:
    text = route("- matches: [{headers: [{name: x, value: 'a  b'}]}]\n")
    assert found(text) == [(9, "spec.rules[0].matches[0].headers[0].value", "pattern")]


@pytest.mark.parametrize(
    ("where", "yaml"),
    [
        ("path", "{path: {type: RegularExpression, value: '/(a'}}"),
        ("headers[0]", "{headers: [{type: RegularExpression, name: x, value: '(?=a)'}]}"),
        ("queryParams[0]", "{queryParams: [{type: RegularExpression, name: x, value: '['}]}"),
    ],
)
def test_regular_expressions_must_compile_as_re2(where: str, yaml: str) -> None:
    (error,) = problems(route(f"- matches: [{yaml}]\n"))
    assert (error.line, error.field, error.code) == (
        9,
        f"spec.rules[0].matches[0].{where}.value",
        "invalid-regex",
    )
    assert error.message.startswith("not a valid RE2 regex: ")


# Path values (CEL, for Exact and PathPrefix)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("api", "must start with '/' when type is PathPrefix, got 'api'"),
        ("/a//b", "must not contain '//' when type is PathPrefix, got '/a//b'"),
        ("/a/./b", "must not contain '/./' when type is PathPrefix, got '/a/./b'"),
        ("/a/%2fb", "must not contain '%2f' when type is PathPrefix, got '/a/%2fb'"),
        ("/a/..", "must not end with '/..' when type is PathPrefix, got '/a/..'"),
    ],
)
def test_path_value_rules(value: str, message: str) -> None:
    (error,) = problems(route(f"- matches: [{{path: {{value: '{value}'}}}}]\n"))
    assert (error.line, error.field, error.code) == (
        9,
        "spec.rules[0].matches[0].path.value",
        "invalid-path",
    )
    assert error.message == message


def test_path_value_characters() -> None:
    text = route("- matches: [{path: {type: Exact, value: '/a b'}}]\n")
    assert found(text) == [(9, "spec.rules[0].matches[0].path.value", "invalid-path")]


def test_regular_expression_paths_skip_the_path_rules() -> None:
    assert found(route("- matches: [{path: {type: RegularExpression, value: 'a.*'}}]\n")) == []


# Filters


def test_filter_type_and_config_must_agree() -> None:
    text = route("""\
        - filters:
          - type: RequestHeaderModifier
            urlRewrite: {hostname: a.example.com}
        """)
    assert found(text) == [
        (10, "spec.rules[0].filters[0].requestHeaderModifier", "filter-type-mismatch"),
        (11, "spec.rules[0].filters[0].urlRewrite", "filter-type-mismatch"),
    ]


def test_redirect_and_rewrite_conflict() -> None:
    text = route("""\
        - filters:
          - {type: RequestRedirect, requestRedirect: {scheme: https}}
          - {type: URLRewrite, urlRewrite: {hostname: a.example.com}}
        """)
    assert found(text) == [(11, "spec.rules[0].filters[1]", "filter-conflict")]


def test_core_filters_cannot_repeat_but_mirrors_can() -> None:
    text = route("""\
        - filters:
          - {type: ResponseHeaderModifier, responseHeaderModifier: {remove: [a]}}
          - {type: RequestMirror, requestMirror: {backendRef: {name: m, port: 80}}}
          - {type: RequestMirror, requestMirror: {backendRef: {name: n, port: 80}}}
          - {type: ResponseHeaderModifier, responseHeaderModifier: {remove: [b]}}
        """)
    assert found(text) == [(13, "spec.rules[0].filters[3]", "filter-repeated")]


def test_backend_ref_filters_have_the_same_list_rules() -> None:
    text = route("""\
        - backendRefs:
          - name: s
            port: 80
            filters:
            - {type: RequestRedirect, requestRedirect: {scheme: https}}
            - {type: URLRewrite, urlRewrite: {hostname: a.example.com}}
        """)
    assert found(text) == [(14, "spec.rules[0].backendRefs[0].filters[1]", "filter-conflict")]


def test_redirect_with_backend_refs() -> None:
    text = route("""\
        - filters:
          - {type: RequestRedirect, requestRedirect: {scheme: https}}
          backendRefs: [{name: s, port: 80}]
        """)
    assert found(text) == [(10, "spec.rules[0].filters[0]", "filter-conflict")]


@pytest.mark.parametrize(
    "matches",
    [
        "[{path: {type: Exact, value: /a}}]",
        "[{path: {value: /a}}, {path: {value: /b}}]",
        "[]",
    ],
)
def test_replace_prefix_match_needs_one_path_prefix_match(matches: str) -> None:
    text = route(f"""\
        - matches: {matches}
          filters:
          - type: URLRewrite
            urlRewrite:
              path: {{type: ReplacePrefixMatch, replacePrefixMatch: /b}}
        """)
    field = "spec.rules[0].filters[0].urlRewrite.path.replacePrefixMatch"
    assert found(text) == [(13, field, "rewrite-requires-prefix-match")]


def test_path_modifier_type_and_value_must_agree() -> None:
    text = route("""\
        - filters:
          - type: URLRewrite
            urlRewrite:
              path: {type: ReplaceFullPath, replacePrefixMatch: /b}
        """)
    assert found(text) == [
        (12, "spec.rules[0].filters[0].urlRewrite.path.replaceFullPath", "path-modifier-mismatch"),
        (
            12,
            "spec.rules[0].filters[0].urlRewrite.path.replacePrefixMatch",
            "path-modifier-mismatch",
        ),
    ]


def test_mirror_percent_and_fraction() -> None:
    text = route("""\
        - filters:
          - type: RequestMirror
            requestMirror:
              backendRef: {name: m, port: 80}
              percent: 101
              fraction: {numerator: 5, denominator: 4}
        """)
    mirror = "spec.rules[0].filters[0].requestMirror"
    assert found(text) == [
        (13, f"{mirror}.percent", "maximum"),
        (14, f"{mirror}.fraction", "mirror-percent-and-fraction"),
        (14, f"{mirror}.fraction.numerator", "invalid-fraction"),
    ]


def test_fraction_denominator_defaults_to_100() -> None:
    text = route("""\
        - filters:
          - type: RequestMirror
            requestMirror:
              backendRef: {name: m, port: 80}
              fraction: {numerator: 101}
        """)
    field = "spec.rules[0].filters[0].requestMirror.fraction.numerator"
    assert found(text) == [(13, field, "invalid-fraction")]


def test_cors_wildcard_must_stand_alone() -> None:
    text = route("""\
        - filters:
          - type: CORS
            cors:
              allowOrigins: ["*", "https://a.example.com"]
        """)
    assert found(text) == [(12, "spec.rules[0].filters[0].cors.allowOrigins", "cors-wildcard")]


def test_external_auth_protocol_and_config_must_agree() -> None:
    text = route("""\
        - filters:
          - type: ExternalAuth
            externalAuth:
              protocol: GRPC
              backendRef: {name: authz, port: 9000}
              http: {path: /check}
        """)
    auth = "spec.rules[0].filters[0].externalAuth"
    assert found(text) == [
        (11, f"{auth}.grpc", "protocol-config-mismatch"),
        (14, f"{auth}.http", "protocol-config-mismatch"),
    ]


# Backends, timeouts, rules, parents


def test_service_backend_needs_a_port() -> None:
    ok = route("- backendRefs: [{group: example.com, kind: Bucket, name: b}]\n")
    bad = route("- backendRefs: [{name: s}]\n")
    assert found(ok) == []
    assert found(bad) == [(9, "spec.rules[0].backendRefs[0].port", "backend-port-required")]


def test_backend_request_timeout_within_request_timeout() -> None:
    bad = route("- timeouts: {request: 1s, backendRequest: 1500ms}\n")
    disabled = route("- timeouts: {request: 0s, backendRequest: 1h}\n")
    assert found(bad) == [
        (9, "spec.rules[0].timeouts.backendRequest", "backend-timeout-exceeds-request")
    ]
    assert found(disabled) == []


def test_rule_names_unique() -> None:
    text = route("""\
        - name: a
        - name: b
        - name: a
        """)
    assert found(text) == [(11, "spec.rules[2].name", "unique")]


def test_parent_refs_to_one_parent_must_differ() -> None:
    text = ROUTE_HEAD.replace(
        "  - name: edge\n",
        "  - name: edge\n  - name: edge\n  - {name: other, sectionName: a}\n  - {name: other}\n",
    )
    assert found(text) == [
        (8, "spec.parentRefs[1]", "unique"),
        (10, "spec.parentRefs[3]", "parent-ref-section-required"),
    ]


def test_session_persistence_permanent_cookie_needs_absolute_timeout() -> None:
    text = route("- sessionPersistence: {cookieConfig: {lifetimeType: Permanent}}\n")
    assert found(text) == [(9, "spec.rules[0].sessionPersistence.absoluteTimeout", "cel")]


# Gateway


def test_listener_names_unique() -> None:
    text = gateway("""\
        - {name: web, port: 80, protocol: HTTP}
        - {name: web, port: 81, protocol: HTTP}
        """)
    assert found(text) == [(9, "spec.listeners[1]", "unique")]


def test_listener_port_protocol_hostname_unique() -> None:
    text = gateway("""\
        - {name: a, port: 80, protocol: HTTP}
        - {name: b, port: 80, protocol: HTTP}
        - {name: c, port: 80, protocol: HTTP, hostname: a.example.com}
        """)
    assert found(text) == [(9, "spec.listeners[1]", "unique")]


def test_listener_tls_rules() -> None:
    text = gateway("""\
        - name: plain
          port: 80
          protocol: HTTP
          tls: {certificateRefs: [{name: c}]}
        - name: https
          port: 443
          protocol: HTTPS
          tls: {mode: Passthrough}
        - name: tls
          port: 8443
          protocol: TLS
        - name: nocert
          port: 9443
          protocol: HTTPS
          tls: {mode: Terminate}
        """)
    assert found(text) == [
        (11, "spec.listeners[0].tls", "tls-not-allowed"),
        (15, "spec.listeners[1].tls.mode", "tls-mode"),
        (16, "spec.listeners[2].tls", "tls-required"),
        (22, "spec.listeners[3].tls.certificateRefs", "tls-certificate-required"),
    ]


def test_listener_hostname_not_for_tcp() -> None:
    text = gateway("- {name: t, port: 9000, protocol: TCP, hostname: a.example.com}\n")
    assert found(text) == [(8, "spec.listeners[0].hostname", "hostname-not-allowed")]


def test_listener_port_and_protocol_schema() -> None:
    text = gateway("- {name: t, port: 70000, protocol: 'HTTP/2'}\n")
    assert found(text) == [
        (8, "spec.listeners[0].port", "maximum"),
        (8, "spec.listeners[0].protocol", "pattern"),
    ]


def test_gateway_needs_listeners() -> None:
    text = GATEWAY_HEAD.replace("  listeners:\n", "")
    assert found(text) == [(5, "spec.listeners", "required")]


def test_infrastructure_annotations_max_8_in_v1_5() -> None:
    annotations = ", ".join(f"a{i}: v" for i in range(9))
    text = gateway("- {name: web, port: 80, protocol: HTTP}\n").replace(
        "  listeners:\n", f"  infrastructure:\n    annotations: {{{annotations}}}\n  listeners:\n"
    )
    assert found(text) == [(8, "spec.infrastructure.annotations", "max-properties")]


# GatewayClass and ReferenceGrant


def test_gateway_class_controller_name_needs_a_path() -> None:
    text = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: c
spec:
  controllerName: example.com
"""
    assert found(text) == [(6, "spec.controllerName", "pattern")]


def test_reference_grant_lists_and_versions() -> None:
    text = """\
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata:
  name: g
spec:
  from: []
  to: [{kind: Service}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: ReferenceGrant
metadata:
  name: g
"""
    assert found(text) == [
        (6, "spec.from", "min-items"),
        (7, "spec.to[0].group", "required"),
        (9, "apiVersion", "unsupported-version"),
    ]


# Metadata and core kinds


def test_metadata_name_required_and_formatted_per_kind() -> None:
    text = """\
apiVersion: v1
kind: Namespace
metadata:
  name: edge.infra
---
apiVersion: v1
kind: Service
metadata:
  name: 1web
spec:
  ports: [{port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  namespace: web
spec: {}
"""
    assert found(text) == [
        (4, "metadata.name", "invalid-name"),
        (9, "metadata.name", "invalid-name"),
        (15, "metadata.name", "required"),
    ]


def test_label_keys_and_values() -> None:
    text = """\
apiVersion: v1
kind: Namespace
metadata:
  name: web
  labels:
    bad key: x
    ok: "has space"
"""
    assert found(text) == [
        (6, "metadata.labels.bad key", "invalid-label-key"),
        (7, "metadata.labels.ok", "pattern"),
    ]


def test_service_ports() -> None:
    text = """\
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  ports:
  - {name: a, port: 0}
  - {name: b, port: 70000, targetPort: 65536}
  - {port: 81, targetPort: http-alt}
"""
    assert found(text) == [
        (7, "spec.ports[0].port", "minimum"),
        (8, "spec.ports[1].port", "maximum"),
        (8, "spec.ports[1].targetPort", "maximum"),
        (9, "spec.ports[2].name", "required"),
    ]


def test_tls_secret_needs_certificate_and_key() -> None:
    text = """\
apiVersion: v1
kind: Secret
metadata:
  name: cert
type: kubernetes.io/tls
data:
  tls.crt: bm90IGEgY2VydA==
---
apiVersion: v1
kind: Secret
metadata:
  name: cert2
type: kubernetes.io/tls
stringData:
  tls.crt: x
  tls.key: y
"""
    assert found(text) == [(6, "data.tls.key", "tls-secret-missing-key")]


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        (r"^[a-z]+$", "abc", True),
        (r"^[a-z]+$", "abc\n", False),  # RE2: "$" does not match before a trailing newline
        (r"^[a-z]+$", "ab1", False),
        (r"[0-9]", "ab1", True),  # unanchored search
    ],
)
def test_remembered_pattern_results_are_re2s(pattern: str, text: str, expected: bool) -> None:
    assert matches.__wrapped__(pattern, text) is expected
    assert matches(pattern, text) is expected
    assert matches(pattern, text) is expected  # the remembered answer


# Every field a real manifest of the core kinds may hold where the edge reads (each level
# from the object down to a container's port), with the values kubectl would send.
REAL_CORE_MANIFESTS = """\
apiVersion: v1
kind: Namespace
metadata: {name: web, labels: {team: a}}
spec: {finalizers: [kubernetes]}
status: {phase: Active}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: web, annotations: {a: b}}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports:
  - {name: http, protocol: TCP, appProtocol: http, port: 80, targetPort: http, nodePort: 30080}
  clusterIP: 10.0.0.1
  clusterIPs: [10.0.0.1]
  externalIPs: [192.0.2.1]
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 10}}
  loadBalancerIP: 192.0.2.2
  loadBalancerSourceRanges: [0.0.0.0/0]
  loadBalancerClass: example.com/lb
  externalTrafficPolicy: Local
  healthCheckNodePort: 30000
  publishNotReadyAddresses: true
  ipFamilies: [IPv4]
  ipFamilyPolicy: SingleStack
  allocateLoadBalancerNodePorts: true
  internalTrafficPolicy: Cluster
  trafficDistribution: PreferClose
status: {loadBalancer: {ingress: [{ip: 192.0.2.2}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: web, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints:
- addresses: [10.1.0.1]
  conditions: {ready: true, serving: true, terminating: false}
  hostname: web-0
  nodeName: node-1
  zone: a
  hints: {forZones: [{name: a}]}
  targetRef: {kind: Pod, name: web-0, namespace: web}
  deprecatedTopology: {a: b}
ports:
- {name: http, protocol: TCP, port: 8080, appProtocol: http}
---
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: web}
type: Opaque
immutable: true
stringData: {a: b}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c, namespace: web}
immutable: false
data: {a: b}
binaryData: {b: YQ==}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: web}
spec:
  replicas: 2
  minReadySeconds: 1
  revisionHistoryLimit: 3
  paused: false
  progressDeadlineSeconds: 600
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  selector: {matchLabels: {app: web}, matchExpressions: [{key: app, operator: Exists}]}
  template:
    metadata: {labels: {app: web}, annotations: {a: b}, creationTimestamp: null}
    spec:
      serviceAccountName: web
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 5
      dnsPolicy: ClusterFirst
      restartPolicy: Always
      schedulerName: default-scheduler
      nodeSelector: {disk: ssd}
      tolerations: [{key: a, operator: Exists}]
      affinity: {}
      securityContext: {runAsNonRoot: true}
      imagePullSecrets: [{name: pull}]
      topologySpreadConstraints: []
      volumes: [{name: tmp, emptyDir: {}}]
      initContainers: [{name: init, image: busybox}]
      containers:
      - name: web
        image: web:1
        imagePullPolicy: IfNotPresent
        command: [/web]
        args: [--port=8080]
        workingDir: /
        env: [{name: A, value: b}]
        envFrom: [{configMapRef: {name: c}}]
        ports: [{name: http, containerPort: 8080, protocol: TCP, hostPort: 0, hostIP: ""}]
        resources: {limits: {cpu: "1"}, requests: {memory: 64Mi}}
        livenessProbe: {httpGet: {path: /healthz, port: http}}
        readinessProbe: {tcpSocket: {port: 8080}}
        startupProbe: {exec: {command: ["true"]}}
        lifecycle: {preStop: {sleep: {seconds: 1}}}
        securityContext: {readOnlyRootFilesystem: true}
        volumeMounts: [{name: tmp, mountPath: /tmp}]
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
        stdin: false
        tty: false
status: {replicas: 2}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: web}
spec:
  serviceName: db
  replicas: 1
  podManagementPolicy: Parallel
  updateStrategy: {type: RollingUpdate}
  persistentVolumeClaimRetentionPolicy: {whenDeleted: Retain}
  ordinals: {start: 0}
  volumeClaimTemplates: []
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: db}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: web}
spec:
  updateStrategy: {type: OnDelete}
  minReadySeconds: 0
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {hostNetwork: true, containers: [{name: agent, image: agent}]}
"""


def test_real_core_manifests_load() -> None:
    assert found(REAL_CORE_MANIFESTS) == []


@pytest.mark.parametrize(
    ("real", "typo", "field"),
    [
        ("  sessionAffinity: ClientIP", "  sessionAfinity: ClientIP", "spec.sessionAfinity"),
        ("  zone: a", "  zome: a", "endpoints[0].zome"),
        ("{ready: true,", "{redy: true,", "endpoints[0].conditions.redy"),
        ("immutable: true", "imutable: true", "imutable"),
        ("  paused: false", "  pausd: false", "spec.pausd"),
        ("      dnsPolicy:", "      dnsPolicyy:", "spec.template.spec.dnsPolicyy"),
        ("        workingDir: /", "        workdir: /", "spec.template.spec.containers[0].workdir"),
        ("hostPort: 0", "hostport: 0", "spec.template.spec.containers[0].ports[0].hostport"),
        ("annotations: {a: b}, creationTimestamp", "anotations: {a: b}, creationTimestamp",
         "spec.template.metadata.anotations"),
        ("  serviceName: db", "  servicename: db", "spec.servicename"),
        ("  updateStrategy: {type: OnDelete}", "  updatestrategy: {type: OnDelete}",
         "spec.updatestrategy"),
    ],
)  # fmt: skip
def test_a_misspelt_core_field_is_unknown_at_its_level(real: str, typo: str, field: str) -> None:
    assert REAL_CORE_MANIFESTS.count(real) == 1, real
    (error,) = problems(REAL_CORE_MANIFESTS.replace(real, typo))
    assert (error.field, error.code) == (field, "unknown-field")
    assert "did you mean" in error.message
