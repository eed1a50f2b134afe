"""The field tables of envoy-data-plane's messages, written out as data for the records decoder.

``verifier.xds.records`` decodes proto-JSON without importing envoy-data-plane (0.3 s
of a 100-rule check is that import alone), so it reads each message's fields from
``envoy_schema.json``, which this module writes from the installed envoy-data-plane,
with the JSON keys exactly as the message decoder (``verifier.xds.codec``) accepts
them. ``tests/test_records.py`` regenerates it and fails if the file is stale::

    python -m verifier.xds.schema        # rewrites verifier/xds/envoy_schema.json
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any, Final

import betterproto2
from envoy_data_plane.message_pool import default_message_pool

from verifier.xds import codec

SCHEMA_PATH: Final = Path(__file__).with_name("envoy_schema.json")

# The modules whose messages the records decoder knows: every type `check` reads.
# A resource that names any other type (in an Any) is decoded by the message decoder.
MODULES: Final = (
    "envoy_data_plane.envoy.config.accesslog.v3",
    "envoy_data_plane.envoy.config.cluster.v3",
    "envoy_data_plane.envoy.config.common.matcher.v3",
    "envoy_data_plane.envoy.config.common.mutation_rules.v3",
    "envoy_data_plane.envoy.config.core.v3",
    "envoy_data_plane.envoy.config.endpoint.v3",
    "envoy_data_plane.envoy.config.listener.v3",
    "envoy_data_plane.envoy.config.route.v3",
    "envoy_data_plane.envoy.config.trace.v3",
    "envoy_data_plane.envoy.data.accesslog.v3",
    "envoy_data_plane.envoy.extensions.access_loggers.file.v3",
    "envoy_data_plane.envoy.extensions.access_loggers.stream.v3",
    "envoy_data_plane.envoy.extensions.clusters.common.dns.v3",
    "envoy_data_plane.envoy.extensions.clusters.dns.v3",
    "envoy_data_plane.envoy.extensions.filters.http.cors.v3",
    "envoy_data_plane.envoy.extensions.filters.http.router.v3",
    "envoy_data_plane.envoy.extensions.filters.listener.http_inspector.v3",
    "envoy_data_plane.envoy.extensions.filters.listener.original_dst.v3",
    "envoy_data_plane.envoy.extensions.filters.listener.proxy_protocol.v3",
    "envoy_data_plane.envoy.extensions.filters.listener.tls_inspector.v3",
    "envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3",
    "envoy_data_plane.envoy.extensions.network.dns_resolver.cares.v3",
    "envoy_data_plane.envoy.extensions.transport_sockets.raw_buffer.v3",
    "envoy_data_plane.envoy.extensions.transport_sockets.tls.v3",
    "envoy_data_plane.envoy.extensions.upstreams.http.v3",
    "envoy_data_plane.envoy.type.http.v3",
    "envoy_data_plane.envoy.type.matcher.v3",
    "envoy_data_plane.envoy.type.metadata.v3",
    "envoy_data_plane.envoy.type.tracing.v3",
    "envoy_data_plane.envoy.type.v3",
    "envoy_data_plane.google.protobuf",
    "envoy_data_plane.xds.core.v3",
    "envoy_data_plane.xds.type.matcher.v3",
)


def _name(cls: type) -> str:
    return default_message_pool.type_to_url[cls].rsplit("/", 1)[-1]


def _enum_id(cls: type) -> str:
    return f"{cls.__module__.removeprefix('envoy_data_plane.')}.{cls.__qualname__}"


def _enum(cls: Any) -> dict[str, Any]:
    """Every name the message decoder takes for a value (member names and renamed
    ones), and the name it writes for each number."""
    names = {m.name: int(m.value) for m in cls}
    names.update(cls.betterproto_renamed_proto_names_to_value())
    written = {str(int(m.value)): m.proto_name or m.name for m in cls}
    return {"names": dict(sorted(names.items())), "json": written}


def _field(f: Any, enums: dict[str, dict[str, Any]]) -> list[Any]:
    meta = f.meta
    ref = ""
    if meta.unwrap is not None:  # the field holds the wrapper's Python value
        pass
    elif meta.proto_type == betterproto2.TYPE_MESSAGE:
        ref = _name(f.cls)
    elif meta.proto_type == betterproto2.TYPE_ENUM:
        ref = _enum_id(f.cls)
        enums[ref] = _enum(f.cls)
    unwrap = _name(meta.unwrap()) if meta.unwrap is not None else ""
    return [
        f.attr,
        meta.proto_type,
        ref,
        int(meta.repeated),
        int(meta.optional),
        meta.group or "",
        f.key_type,
        unwrap,
    ]


def schema() -> dict[str, Any]:
    """Every message of ``MODULES``: fields in number order, and the JSON keys of each."""
    classes: dict[str, type] = {}
    for module in MODULES:
        importlib.import_module(module)
    for url, cls in default_message_pool.url_to_type.items():
        if cls.__module__ in MODULES:
            classes[url.rsplit("/", 1)[-1]] = cls
    messages: dict[str, Any] = {}
    enums: dict[str, dict[str, Any]] = {}
    for name in sorted(classes):
        ordered, by_key = codec._table(classes[name])
        keys = {key: f.attr for key, f in sorted(by_key.items())}
        messages[name] = {"fields": [_field(f, enums) for f in ordered], "keys": keys}
        # The order the class declares its fields (betterproto2's metadata walks them
        # so; verifier.xds.read.fields too), when it is not number order.
        declared = list(classes[name]._betterproto.meta_by_field_name)  # type: ignore[attr-defined]
        if declared != [f.attr for f in ordered]:
            messages[name]["declared"] = declared
    return {
        "envoy-data-plane": importlib.metadata.version("envoy-data-plane"),
        "messages": messages,
        "enums": dict(sorted(enums.items())),
    }


def render() -> str:
    return json.dumps(schema(), indent=None, separators=(",", ":"), sort_keys=False) + "\n"


if __name__ == "__main__":
    SCHEMA_PATH.write_text(render())
    print(f"wrote {SCHEMA_PATH}", file=sys.stderr)
