"""Reading xDS the same way whether it was decoded into messages or into records.

``check --xds`` reads what the user gave as records (``verifier.xds.records``: no
envoy-data-plane import, no message building); the translator, the ADS server and the
mutation engine make envoy-data-plane messages. The Envoy model and the rules read
both through the messages' attribute names and these few functions, which do what
betterproto2 does for a message (``which_one_of``, ``unpack_any``, ``bytes``) and the
same for a record. envoy-data-plane is imported here only when a message is passed,
so reading records never imports it.
"""

from __future__ import annotations

import sys
from typing import Any, Final

from verifier.xds.records import AnyRecord, JsonRecord, Record

ANY: Final = "google.protobuf.Any"
ONE, LIST, MAP = 0, 1, 2  # how a field holds messages (``fields``)


def type_name(msg: object) -> str:
    """The full proto name: ``envoy.type.matcher.v3.StringMatcher``; "" for a value
    that is not a message."""
    if isinstance(msg, Record):
        return msg._pb_name
    return _message_type_name(type(msg))


_NAMES: dict[type, str] = {}


def _message_type_name(cls: type) -> str:
    found = _NAMES.get(cls)
    if found is None:
        found = ""  # not a message (a str, an int, a list)
        if "envoy_data_plane" in sys.modules:  # else there are no messages to name
            from envoy_data_plane.message_pool import default_message_pool

            url = default_message_pool.type_to_url.get(cls)
            found = url.rsplit("/", 1)[-1] if url else ""
        _NAMES[cls] = found
    return found


def is_set(value: object) -> bool:
    """A repeated field or map with items, or a message at all (an empty message is
    falsy, yet set). A record's unset repeated field is ``()`` where a message's is ``[]``."""
    if isinstance(value, list | tuple | dict) or hasattr(value, "keys"):
        return bool(value)
    return value is not None


def is_record(msg: object) -> bool:
    return isinstance(msg, Record)


def to_json(msg: Any, *, with_type: bool = False) -> dict[str, Any]:
    """snake_case proto-JSON (``codec.to_json_dict``); ``with_type`` adds ``@type``."""
    if isinstance(msg, Record):
        from verifier.xds.records import to_json as record_json

        body: dict[str, Any] = record_json(msg)
        if with_type:
            body = {"@type": f"type.googleapis.com/{msg._pb_name}", **body}
        return body
    from verifier.xds.codec import to_json_dict

    return to_json_dict(msg, with_type=with_type)


def empty(name: str) -> Any:
    """An empty message of type ``name`` (every field unset), as a record."""
    from verifier.xds.records import schema

    return object.__new__(schema().type(name).record)


def is_a(msg: object, name: str) -> bool:
    return msg is not None and type_name(msg) == name


def one_of(msg: Any, group: str) -> tuple[str, Any]:
    """``betterproto2.which_one_of``: the set field of a oneof and its value, or ("", None)."""
    if isinstance(msg, Record):
        for attr in type(msg)._pb_groups.get(group, ()):
            value = getattr(msg, attr)
            if value is not None:
                return attr, value
        return "", None
    import betterproto2

    return betterproto2.which_one_of(msg, group)


def unpack(any_msg: Any) -> Any:
    """The message or record an ``Any`` holds; ``XdsLoadError`` if its type is unknown.
    Read-only: a decoded message is shared by every reader given the same bytes."""
    if isinstance(any_msg, AnyRecord):
        return any_msg.value
    from verifier.xds.codec import unpack_shared

    return unpack_shared(any_msg)


def struct_json(struct: Any) -> dict[str, Any]:
    """A ``google.protobuf.Struct`` as the JSON object it holds."""
    if isinstance(struct, JsonRecord):
        found: dict[str, Any] = struct.json
        return found
    out: dict[str, Any] = struct.to_dict()
    return out


def canonical(msg: Any, *, without: str = "") -> bytes:
    """A key equal for equal messages (``bytes(msg)`` for a message; for a record, the
    fields proto would encode, so an explicit default and an unset field compare equal
    exactly where they do in binary). Compare keys of one kind only: a run decodes a
    resource one way, and each resource's key is compared with its own kind's."""
    if isinstance(msg, Record):
        return repr(_plain(msg, without)).encode()
    if without:
        import dataclasses

        return bytes(dataclasses.replace(msg, **{without: msg._get_field_default(without)}))
    return bytes(msg)


def _plain(value: Any, without: str = "") -> Any:
    if isinstance(value, JsonRecord):
        return (value._pb_name, value.json)
    if isinstance(value, Record):
        cls = type(value)
        out = []
        for name in cls._pb_fields:
            if name == without:
                continue
            field = getattr(value, name)
            default = getattr(cls, name)
            if field is None or (
                type(field) is type(default) and field == default and default is not None
            ):
                continue
            if isinstance(field, list | tuple | dict) and not field:
                continue
            out.append((name, _plain(field)))
        return (cls._pb_name, tuple(out))
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _plain(v)) for k, v in value.items())
    return value


def fields(msg: object) -> tuple[tuple[str, int, str | None], ...]:
    """(attribute, ONE/LIST/MAP, type name or None if unknown) of each field of ``msg``
    that holds messages (an ``Any`` field names ``google.protobuf.Any``)."""
    if isinstance(msg, Record):
        return type(msg)._pb_holding
    return _message_fields(type(msg))


def fields_of_type(name: str) -> tuple[tuple[str, int, str | None], ...] | None:
    """``fields`` of the type named ``name``; None for a type outside the records schema."""
    from verifier.xds.records import Decline, schema

    try:
        return schema().type(name).record._pb_holding
    except Decline:
        return None


_FIELDS: dict[type, tuple[tuple[str, int, str | None], ...]] = {}


def _message_fields(cls: type) -> tuple[tuple[str, int, str | None], ...]:
    if cls not in _FIELDS:
        _FIELDS[cls] = _fields_of_class(cls)
    return _FIELDS[cls]


def _fields_of_class(cls: type) -> tuple[tuple[str, int, str | None], ...]:
    import betterproto2

    meta = cls._betterproto  # type: ignore[attr-defined]
    out: list[tuple[str, int, str | None]] = []
    for name, info in meta.meta_by_field_name.items():
        if info.proto_type == betterproto2.TYPE_MAP:
            if info.map_meta[1].proto_type == betterproto2.TYPE_MESSAGE:
                out.append((name, MAP, _class_name(meta.cls_by_field.get(f"{name}.value"))))
        elif info.proto_type == betterproto2.TYPE_MESSAGE and info.unwrap is None:
            out.append(
                (name, LIST if info.repeated else ONE, _class_name(meta.cls_by_field.get(name)))
            )
    return tuple(out)


def _class_name(cls: Any) -> str | None:
    try:
        return _message_type_name(cls)
    except (KeyError, TypeError):
        return None
