"""One resource of an ADS response, read as a file's JSON is read, and what it references.

The ADS client (``verifier.xds.ads_client``) takes resources from a server it does not
control. Each is decoded, written as proto-JSON, held to the depth and list limits and
read back by the JSON reader ``check --xds`` uses, so that whatever a file could not
hold either (bytes that do not decode, an enum number out of range, an ``Any`` of a
type no table knows, a resource with no name) is the reason of a NACK, never an
exception; and what it makes Envoy ask for next (endpoints, routes, secrets) is found
once, as it arrives, not again for every response.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import betterproto2
from envoy_data_plane.envoy.config.cluster.v3 import Cluster, ClusterDiscoveryType
from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment
from envoy_data_plane.envoy.config.listener.v3 import Listener
from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import Secret
from envoy_data_plane.google.protobuf import Any as AnyMessage

from verifier.errors import InputErrors
from verifier.inputs import check_json_shape
from verifier.peers import printable
from verifier.xds.codec import Json, from_json_dict, to_json_dict
from verifier.xds.layout import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SECRET_TYPE,
    XdsLoadError,
)
from verifier.xds.snapshot import resource_name

ORDER: Final = (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE, SECRET_TYPE)
WILDCARD: Final = (CLUSTER_TYPE, LISTENER_TYPE)
CLASSES: Final[Mapping[str, type[betterproto2.Message]]] = {
    CLUSTER_TYPE: Cluster,
    ENDPOINT_TYPE: ClusterLoadAssignment,
    LISTENER_TYPE: Listener,
    ROUTE_TYPE: RouteConfiguration,
    SECRET_TYPE: Secret,
}
KIND: Final = dict(
    zip(ORDER, ("clusters", "endpoints", "listeners", "routes", "secrets"), strict=True)
)


class Refused(ValueError):
    """A response the client NACKs; the message is the reason it sends."""


@dataclass(frozen=True)
class Held:
    """One accepted resource: the message (read as a file's JSON is read) and the
    names of other resources it makes the client ask for, found once on arrival."""

    message: betterproto2.Message
    refs: frozenset[tuple[str, str]] = frozenset()  # (type URL, name)


# --- what a resource references -----------------------------------------------------------


def _walk(node: Json) -> Iterable[dict[str, Json]]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _references(url: str, msg: Any, doc: Json) -> frozenset[tuple[str, str]]:
    """What Envoy would ask for because of this resource: an EDS cluster's assignment
    (``service_name``, else the cluster's name), the route configurations HTTP
    connection managers load over RDS, and the SDS secrets TLS transport sockets name."""
    out: set[tuple[str, str]] = set()
    if url == CLUSTER_TYPE and msg.type == ClusterDiscoveryType.EDS:
        eds = msg.eds_cluster_config
        out.add((ENDPOINT_TYPE, (eds.service_name if eds else "") or msg.name))
    if url not in WILDCARD:
        return frozenset(out)
    for node in _walk(doc):
        rds = node.get("rds")
        if url == LISTENER_TYPE and isinstance(rds, dict):
            name = rds.get("route_config_name")
            if isinstance(name, str) and name:
                out.add((ROUTE_TYPE, name))
        refs = node.get("tls_certificate_sds_secret_configs")
        for ref in refs if isinstance(refs, list) else ():
            if isinstance(ref, dict) and isinstance(ref.get("name"), str) and ref["name"]:
                out.add((SECRET_TYPE, ref["name"]))
        ref = node.get("validation_context_sds_secret_config")
        if isinstance(ref, dict) and isinstance(ref.get("name"), str) and ref["name"]:
            out.add((SECRET_TYPE, ref["name"]))
    return frozenset(out)


def accept(url: str, given: str, packed: AnyMessage, where: str) -> tuple[str, Held]:
    """(name, held) for one resource of a response, read through the same layer as a
    file: the bytes decoded, written as proto-JSON, held to the depth and list limits,
    and read back by the JSON reader ``check --xds`` uses (which refuses what a file
    could not hold either: an enum number out of range, an unknown type in an Any).
    Anything short of that is the reason of a NACK (``Refused``)."""
    label = f"resource {printable(given, 200)!r}" if given else "a resource"
    if packed.type_url != url:
        raise Refused(f"{label} is a {printable(packed.type_url, 200)!r}, not a {url}")
    cls = CLASSES[url]
    try:
        doc = to_json_dict(cls.parse(packed.value))
        check_json_shape(doc, where)
        msg, notes = from_json_dict(cls, doc, where)
    except InputErrors as exc:
        raise Refused(f"{label}: {exc.errors[0].message}") from None
    except XdsLoadError as exc:
        raise Refused(f"{label}: {exc.message}") from None
    except Exception as exc:  # whatever the decoders raise on hostile bytes
        reason = f"{type(exc).__name__}: {exc}"
        raise Refused(f"{label} does not decode as {cls.__name__}: {reason}") from None
    if notes:
        raise Refused(f"{label}: {notes[0]}")
    name = given or resource_name(msg)
    if not name:
        raise Refused(f"a {cls.__name__} with no name")
    return name, Held(msg, _references(url, msg, doc))
