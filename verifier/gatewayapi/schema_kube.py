"""The core Kubernetes kinds the edge reads, held to the fields the Kubernetes API defines.

The API server decodes a built-in object strictly (kubectl's default field
validation is Strict): ``selecter:`` on a Service is refused on apply, and with
validation off it is dropped, leaving a Service that selects nothing. Read as if
it were applied, such a typo would go unnoticed until a live run failed a minute
later, far from its line. So every mapping the edge reads, and each of its parents
up to the object, is checked against the full list of fields the API defines at
that level: a real manifest never fails, a typo does (``unknown-field``, with the
field meant). What the edge never reads (a container's ``resources``, ``env``,
probes) is a known field whose value is the API server's to check (``Unread``).

Source of every field list: the json tags of k8s.io/api ``core/v1/types.go``
(Service, ServiceSpec, ServicePort, Namespace, Secret, ConfigMap, PodTemplateSpec,
PodSpec, Container, ContainerPort), ``apps/v1/types.go`` (Deployment, StatefulSet,
DaemonSet and their specs), ``discovery/v1/types.go`` (EndpointSlice, Endpoint,
EndpointConditions, EndpointPort) and k8s.io/apimachinery ``meta/v1/types.go``
(ObjectMeta, LabelSelector), as the Kubernetes OpenAPI document of release-1.37
publishes them. A v1 API only ever gains fields, so these hold every field of
v1.30 on: a manifest written for any of those versions loads. An object read from
an API server (``--kubeconfig``) was decoded by that server's own list, perhaps
newer than this one, so a field unknown here is no mistake there.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from verifier.gatewayapi.schema_common import (
    ANNOTATION_VALUE,
    DNS_LABEL_RE,
    LABEL_VALUE,
    QUALIFIED_NAME_RE,
)
from verifier.gatewayapi.schema_core import (
    Arr,
    Bool,
    Ctx,
    Field,
    Int,
    Map,
    Obj,
    Rule,
    Str,
    Unread,
    as_int,
    check,
    d,
    identity,
    join,
    lst,
    matches,
    opt,
    req,
)

SCHEMA = "the Kubernetes API (v1.30 to v1.37)"

# meta/v1 ObjectMeta.
OBJECT_META = (
    "name generateName namespace selfLink uid resourceVersion generation "
    "creationTimestamp deletionTimestamp deletionGracePeriodSeconds labels annotations "
    "ownerReferences finalizers managedFields"
)
METADATA_FIELDS = frozenset(OBJECT_META.split())
# The top level of every kind that has a spec and a status.
SPEC_AND_STATUS = "apiVersion kind metadata spec status"


def known(title: str, names: str, *, rules: tuple[Rule, ...] = (), **checked: Field) -> Obj:
    """An API type: every field ``names`` lists is known, those in ``checked`` are
    checked as given, the rest are ``Unread``; any other key is an unknown field."""
    fields: dict[str, Field] = {name: opt(Unread()) for name in names.split()}
    stray = set(checked) - set(fields)
    assert not stray, f"{title} has no field {sorted(stray)}"
    return Obj({**fields, **checked}, rules, title=title)


LABELS = Map(
    LABEL_VALUE,
    keys=Str(
        max_len=316,  # 253 prefix + '/' + 63 name; the pattern bounds each part
        pattern=QUALIFIED_NAME_RE,
        expect="must be a label key: an optional DNS subdomain prefix and '/', then a name "
        "of up to 63 characters",
        code="invalid-label-key",
    ),
)
ANNOTATIONS = Map(
    ANNOTATION_VALUE,
    keys=Str(
        pattern=QUALIFIED_NAME_RE,
        expect="must be an annotation key: an optional DNS subdomain prefix and '/', then "
        "a name of up to 63 characters",
        code="invalid-annotation-key",
    ),
)

IANA_SVC_NAME = r"^[-a-z0-9]+$"
PROTOCOL = Str(enum=("TCP", "UDP", "SCTP"))


# ---------------------------------------------------------------- Service


def _target_port_rule(ctx: Ctx, port: Any, path: str) -> None:
    target = d(port).get("targetPort")
    where = join(path, "targetPort")
    number = as_int(target)
    if target is None:
        return
    if number is not None:
        if not 1 <= number <= 65535:
            ctx.error(
                where, "minimum" if number < 1 else "maximum", f"must be 1..65535, got {number}"
            )
    elif isinstance(target, str):
        ok = (
            len(target) <= 15
            and matches(IANA_SVC_NAME, target)
            and any(c.isalpha() for c in target)
            and "--" not in target
            and not target.startswith("-")
            and not target.endswith("-")
        )
        if not ok:
            ctx.error(
                where,
                "invalid-name",
                "must be a port number or an IANA service name (at most 15 lowercase "
                f"letters, digits, '-'), got {target!r}",
            )
    else:
        ctx.error(where, "type", f"expected integer or string, got {target!r}")


SERVICE_PORT = known(
    "ServicePort",
    "name protocol appProtocol port targetPort nodePort",
    name=opt(
        Str(
            max_len=63,
            pattern=DNS_LABEL_RE,
            expect="must be a lowercase RFC 1123 label",
            code="invalid-name",
        )
    ),
    protocol=opt(PROTOCOL),
    port=req(Int(minimum=1, maximum=65535)),
    nodePort=opt(Int(minimum=0, maximum=65535)),
    appProtocol=opt(Str()),
    rules=(_target_port_rule,),
)


def _service_rule(ctx: Ctx, spec: Any, path: str) -> None:
    obj = d(spec)
    ports = [d(p) for p in lst(obj.get("ports"))]
    headless = obj.get("clusterIP") == "None"
    if not ports and obj.get("type") != "ExternalName" and not headless:
        ctx.error(
            join(path, "ports"),
            "required",
            "a Service needs at least one port (unless headless or ExternalName)",
        )
    names: dict[str, int] = {}
    pairs: dict[str, int] = {}
    for i, port in enumerate(ports):
        here = f"{path}.ports[{i}]"
        name = port.get("name")
        if len(ports) > 1 and not name:
            ctx.error(
                join(here, "name"),
                "required",
                "each port needs a name when a Service has more than one",
            )
        elif isinstance(name, str) and name:
            if name in names:
                ctx.error(
                    join(here, "name"),
                    "unique",
                    f"port name {name!r} is already used by {path}.ports[{names[name]}]",
                )
            names.setdefault(name, i)
        number, protocol = port.get("port"), port.get("protocol", "TCP")
        pair = identity([number, protocol])
        if pair in pairs:
            ctx.error(
                here,
                "unique",
                f"port {number}/{protocol} is already defined at {path}.ports[{pairs[pair]}]",
            )
        pairs.setdefault(pair, i)


SERVICE_SPEC = known(
    "ServiceSpec",
    "ports selector clusterIP clusterIPs type externalIPs sessionAffinity loadBalancerIP "
    "loadBalancerSourceRanges externalName externalTrafficPolicy healthCheckNodePort "
    "publishNotReadyAddresses sessionAffinityConfig ipFamilies ipFamilyPolicy "
    "allocateLoadBalancerNodePorts loadBalancerClass internalTrafficPolicy "
    "trafficDistribution",
    type=opt(Str(enum=("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"))),
    ports=opt(Arr(SERVICE_PORT)),
    selector=opt(Map(Str())),
    clusterIP=opt(Str()),
    externalName=opt(Str()),
    rules=(_service_rule,),
)
SERVICE = known("Service", SPEC_AND_STATUS, spec=req(SERVICE_SPEC))


# ---------------------------------------------------------------- EndpointSlice

ENDPOINT_SLICE = known(
    "EndpointSlice",
    "apiVersion kind metadata addressType endpoints ports",
    addressType=req(Str(enum=("IPv4", "IPv6", "FQDN"))),
    endpoints=opt(
        Arr(
            known(
                "Endpoint",
                "addresses conditions hostname targetRef deprecatedTopology nodeName zone hints",
                addresses=req(Arr(Str(), min_items=1, max_items=100)),
                conditions=opt(
                    known(
                        "EndpointConditions",
                        "ready serving terminating",
                        ready=opt(Bool()),
                        serving=opt(Bool()),
                        terminating=opt(Bool()),
                    )
                ),
            ),
            max_items=1000,
        )
    ),
    ports=opt(
        Arr(
            known(
                "EndpointPort",
                "name protocol port appProtocol",
                name=opt(Str()),
                protocol=opt(PROTOCOL),
                port=opt(Int()),
            )
        )
    ),
)


# ---------------------------------------------------------------- Secret, ConfigMap, Namespace

_CONFIG_KEY = Str(
    max_len=253,
    pattern=r"^[-._a-zA-Z0-9]+$",
    expect="must be a key of letters, digits, '-', '_' or '.'",
)


def check_secret(ctx: Ctx, data: Any) -> None:
    ctx.secret = True  # key material: errors never quote it
    check(ctx, SECRET, data, "")


def _secret_rule(ctx: Ctx, secret: Any, path: str) -> None:
    obj = d(secret)
    data = d(obj.get("data"))
    for key, value in data.items():
        if isinstance(value, str):
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                ctx.error(
                    join("data", key),
                    "invalid-base64",
                    "data values must be base64-encoded (use stringData for plain text)",
                )
    if obj.get("type") == "kubernetes.io/tls":
        present = set(data) | set(d(obj.get("stringData")))
        for key in ("tls.crt", "tls.key"):
            if key not in present:
                ctx.error(
                    join("data", key),
                    "tls-secret-missing-key",
                    f"a kubernetes.io/tls Secret must have {key} in data or stringData",
                )


SECRET = known(
    "Secret",
    "apiVersion kind metadata immutable data stringData type",
    type=opt(Str()),
    data=opt(Map(Str(), keys=_CONFIG_KEY)),
    stringData=opt(Map(Str(), keys=_CONFIG_KEY)),
    rules=(_secret_rule,),
)
CONFIG_MAP = known(
    "ConfigMap",
    "apiVersion kind metadata immutable data binaryData",
    data=opt(Map(Str(), keys=_CONFIG_KEY)),
    binaryData=opt(Map(Str(), keys=_CONFIG_KEY)),
)
NAMESPACE = known("Namespace", SPEC_AND_STATUS)
