"""Proto-JSON decoded into plain records, without envoy-data-plane.

Importing envoy-data-plane's generated modules costs 0.3 s (500 pydantic dataclasses)
and building its messages ~15 us each (1.5 s for a 10,000-rule xDS), and ``check``
only reads them. A record is a plain object with the message's attribute names and
the same Python values (``None`` for an unset message, ``0``/``""``/``False`` for
unset scalars, enums as their numbers, durations as ``timedelta``, wrappers as their
value); only what a reader of messages would not see differs: a repeated field unset
is ``()`` and a map unset an empty read-only mapping; an ``Any`` holds its decoded
record instead of bytes (``AnyRecord``); ``Struct``/``Value``/``ListValue`` hold
their JSON (``JsonRecord``).

Fields come from ``envoy_schema.json`` (written by ``verifier.xds.schema`` from the
installed envoy-data-plane). The decoder gives the same notes as the message decoder
(``verifier.xds.codec``) for what both drop (unknown fields, nulls, duplicates, a
second field of a oneof, a value of the wrong JSON kind); where the message decoder
would ask pydantic (a number out of range, text that is not UTF-8, a type outside the
schema), it raises ``Decline`` and the caller decodes that resource as messages, so
nothing is judged differently. ``tests/test_records.py`` proves the two decoders
agree field by field.
"""

from __future__ import annotations

import json
import keyword
import math
import struct
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Final

from verifier.xds.layout import Json, Skipped
from verifier.xds.protojson import (
    INT_RANGES,
    bytes_from_json,
    bytes_to_json,
    duration_from_json,
    duration_to_json,
    expect,
    float_from_json,
    float_to_json,
    int_from_json,
    or_wrapped,
    timestamp_from_json,
    timestamp_to_json,
    utf8,
)

SCHEMA_PATH: Final = Path(__file__).with_name("envoy_schema.json")
EMPTY_MAP: Final[Mapping[Any, Any]] = types.MappingProxyType({})
FLOAT32_MAX: Final = 3.4028234663852886e38
# A Duration the message decoder takes: +-10,000 years (beyond, it is pydantic's call).
MAX_DURATION_S: Final = 315_576_000_000


class Decline(Exception):
    """A value only the message decoder can judge: decode the resource as messages."""


class Record:
    """A decoded message. Unset fields read as the class's defaults."""

    _pb_name: ClassVar[str] = ""
    _pb_fields: ClassVar[tuple[str, ...]] = ()
    _pb_groups: ClassVar[Mapping[str, tuple[str, ...]]] = EMPTY_MAP  # oneof -> its fields
    # (attribute, 0 one / 1 list / 2 map, message type) of fields holding messages
    _pb_holding: ClassVar[tuple[tuple[str, int, str], ...]] = ()
    _pb_table: ClassVar[tuple[_Field, ...]] = ()  # every field, in number order

    def __repr__(self) -> str:
        return f"{self._pb_name}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, n) == getattr(other, n) for n in self._pb_fields
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as messages are


class AnyRecord(Record):
    """``google.protobuf.Any`` with its payload decoded: ``value`` is the inner record."""

    _pb_name = "google.protobuf.Any"
    _pb_fields = ("type_url", "value")
    type_url: str = ""
    value: Record | None = None


class JsonRecord(Record):
    """``Struct``, ``Value`` or ``ListValue``: the JSON they hold, numbers as floats."""

    _pb_fields = ("json",)
    json: Json = None


_JSON_RECORDS: Final[dict[str, type[JsonRecord]]] = {
    name: type(name.rsplit(".", 1)[-1], (JsonRecord,), {"_pb_name": name})
    for name in ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")
}


class _Type:
    """One message type's decoding table, built on first use."""

    __slots__ = ("by_key", "groups", "name", "record")

    def __init__(self, name: str, spec: Mapping[str, Any]) -> None:
        fields = {f[0]: _Field(*f) for f in spec["fields"]}
        self.name = name
        self.by_key = {key: fields[attr] for key, attr in spec["keys"].items()}
        self.groups = {f.attr: f.group for f in fields.values() if f.group}
        defaults: dict[str, Any] = {n: f.default() for n, f in fields.items()}
        groups: dict[str, tuple[str, ...]] = {}
        for f in fields.values():
            if f.group:
                groups[f.group] = (*groups.get(f.group, ()), f.attr)
        declared = [fields[a] for a in spec.get("declared", fields)]  # as messages walk them
        holding = tuple(
            (f.attr, 2 if f.key_type else 1 if f.repeated else 0, f.ref)
            for f in declared
            if f.kind == "message" and not f.unwrap
        )
        defaults.update(
            _pb_name=name,
            _pb_fields=tuple(fields),
            _pb_groups=groups,
            _pb_holding=holding,
            _pb_table=tuple(fields.values()),
        )
        self.record: type[Record] = type(name.rsplit(".", 1)[-1], (Record,), defaults)


class _Field:
    __slots__ = ("attr", "group", "key_type", "kind", "optional", "ref", "repeated", "unwrap")

    def __init__(
        self,
        attr: str,
        kind: str,
        ref: str,
        repeated: int,
        optional: int,
        group: str,
        key_type: str,
        unwrap: str,
    ) -> None:
        self.attr, self.kind, self.ref, self.group = attr, kind, ref, group
        self.repeated, self.optional = bool(repeated), bool(optional)
        self.key_type, self.unwrap = key_type, unwrap

    def default(self) -> Any:
        if self.key_type:
            return EMPTY_MAP
        if self.repeated:
            return ()
        if self.kind == "message" or self.optional or self.group:
            return None
        return _SCALAR_DEFAULTS[self.kind]


_SCALAR_DEFAULTS: Final[dict[str, Any]] = {
    "string": "",
    "bytes": b"",
    "bool": False,
    "double": 0.0,
    "float": 0.0,
    "enum": 0,
    **dict.fromkeys(INT_RANGES, 0),
}


class Schema:
    """The message and enum tables of ``envoy_schema.json``."""

    def __init__(self, path: Path = SCHEMA_PATH) -> None:
        data = json.loads(path.read_text())
        self._messages: dict[str, Any] = data["messages"]
        self._enums: dict[str, dict[str, Any]] = data["enums"]
        self._numbers: dict[str, frozenset[int]] = {}
        self._types: dict[str, _Type] = {}

    def knows(self, name: str) -> bool:
        return name in self._messages

    def type(self, name: str) -> _Type:
        found = self._types.get(name)
        if found is None:
            spec = self._messages.get(name)
            if spec is None:
                raise Decline(f"{name} is not in the records schema")
            found = self._types[name] = _Type(name, spec)
        return found

    def enum_json(self, ref: str, value: int) -> Json:
        """As the codec writes an enum: its name, or the number it does not define."""
        name: str | None = self._enums[ref]["json"].get(str(value))
        return value if name is None else name

    def enum(self, ref: str, raw: Json) -> int:
        if isinstance(raw, str):
            number: int | None = self._enums[ref]["names"].get(raw)
            if number is None:
                raise Decline(f"unknown enum name {raw!r}")
            return number
        value = int_from_json(raw)
        numbers = self._numbers.get(ref)
        if numbers is None:
            numbers = self._numbers[ref] = frozenset(self._enums[ref]["names"].values())
        if value not in numbers:
            raise Decline(f"unknown enum number {value}")
        return value


_SCHEMA: Schema | None = None


def schema() -> Schema:
    global _SCHEMA
    if _SCHEMA is None:
        _SCHEMA = Schema()
    return _SCHEMA


# --- values ------------------------------------------------------------------------------


def _checked_int(kind: str) -> Callable[[Json], int]:
    low, high = INT_RANGES[kind]

    def parse(raw: Json) -> int:
        value = int_from_json(raw)
        if not low <= value <= high:
            raise Decline(f"{value} out of {kind} range")
        return value

    return parse


def _text(raw: Json) -> str:
    value: str = expect(str)(raw)
    if not utf8(value):
        raise Decline("text that is not UTF-8")
    return value


def _double(raw: Json) -> float:
    return float_from_json(raw)


def _float32(raw: Json) -> float:
    value = float_from_json(raw)
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        raise Decline(f"{value} out of float range")
    return value


def _duration(raw: Json) -> Any:
    value = duration_from_json(raw)
    if abs(value.total_seconds()) > MAX_DURATION_S:
        raise Decline("duration out of range")
    return value


_SCALARS: Final[dict[str, Callable[[Json], Any]]] = {
    "string": _text,
    "bytes": bytes_from_json,
    "bool": expect(bool),
    "double": _double,
    "float": _float32,
    **{kind: _checked_int(kind) for kind in INT_RANGES},
}
# The wrapper types betterproto2 unwraps a field to, and how their JSON is read.
_UNWRAPS: Final[dict[str, Callable[[Json], Any]]] = {
    "google.protobuf.Duration": _duration,
    "google.protobuf.Timestamp": timestamp_from_json,
    "google.protobuf.BoolValue": or_wrapped(expect(bool)),
    "google.protobuf.StringValue": or_wrapped(_text),
    "google.protobuf.BytesValue": or_wrapped(bytes_from_json),
    "google.protobuf.Int32Value": or_wrapped(_checked_int("int32")),
    "google.protobuf.UInt32Value": or_wrapped(_checked_int("uint32")),
    "google.protobuf.Int64Value": or_wrapped(_checked_int("int64")),
    "google.protobuf.UInt64Value": or_wrapped(_checked_int("uint64")),
    "google.protobuf.FloatValue": or_wrapped(_float32),
    "google.protobuf.DoubleValue": or_wrapped(_double),
}
_VALUE_ERRORS: Final = (ValueError, TypeError, KeyError, OverflowError)


class _Drop(Exception):
    """A value was dropped and its note already recorded."""


class Decoder:
    """Decodes one resource; ``notes`` collects what was dropped, as the codec words it."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.notes: list[Skipped] = []
        self._in_any = 0

    def message(self, name: str, raw: Json, path: str) -> Record | None:
        if name == "google.protobuf.Any":
            return self._any(raw, path)
        if name in _JSON_RECORDS:
            return _json_record(name, raw)
        if name in _UNWRAPS:  # only an Any can name one: the codec's special JSON
            raise Decline(f"{path}: an Any of {name}")
        t = self.schema.type(name)
        if type(raw) is not dict and not isinstance(raw, Mapping):
            self.notes.append(Skipped(path, f"expected a JSON object for {name}"))
            return None
        by_key, groups = t.by_key, t.groups
        state: dict[str, Any] = {}
        keys: dict[str, str] = {}  # attribute -> JSON key it came from
        set_by: dict[str, str] = {}  # oneof -> JSON key that set it
        for key, value in raw.items():
            field = by_key.get(key) if isinstance(key, str) else None
            if field is None:
                self.notes.append(Skipped(f"{path}.{key}", f"unknown field of {name}"))
                continue
            if value is None and field.ref != "google.protobuf.Value":
                continue  # proto-JSON null means "not set"
            attr = field.attr
            if attr in keys:
                self.notes.append(Skipped(f"{path}.{key}", f"duplicate of {keys[attr]}"))
                continue
            group = groups.get(attr)
            if group is not None and group in set_by:
                note = f"oneof already set by {set_by[group]}"
                self.notes.append(Skipped(f"{path}.{key}", note))
                continue
            try:
                state[attr] = self._field(field, value, f"{path}.{key}")
            except _Drop:
                continue
            keys[attr] = key
            if group is not None:
                set_by[group] = key
        record = object.__new__(t.record)
        record.__dict__ = state
        return record

    def _field(self, field: _Field, raw: Json, path: str) -> Any:
        if field.key_type:
            if not isinstance(raw, dict):
                self.notes.append(Skipped(path, "expected a JSON object"))
                raise _Drop
            return self._map(field, raw, path)
        if field.repeated:
            if not isinstance(raw, list):
                self.notes.append(Skipped(path, "expected a JSON array"))
                raise _Drop
            items = []
            for i, item in enumerate(raw):
                try:
                    items.append(self._value(field, item, f"{path}[{i}]"))
                except _Drop:
                    continue
            return items
        return self._value(field, raw, path)

    def _map(self, field: _Field, raw: dict[Any, Json], path: str) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key, item in raw.items():
            here = f"{path}[{json.dumps(key)}]"
            k: Any = key
            try:
                if field.key_type == "bool":
                    k = {"true": True, "false": False}[key]
                elif field.key_type in INT_RANGES:
                    k = _checked_int(field.key_type)(key)
                elif not utf8(key):
                    raise Decline("a map key that is not UTF-8")
            except _VALUE_ERRORS:
                self.notes.append(Skipped(here, "invalid map key"))
                continue
            try:
                out[k] = self._value(field, item, here)
            except _Drop:
                continue
        return out

    def _value(self, field: _Field, raw: Json, path: str) -> Any:
        kind = field.kind
        try:
            if field.unwrap:
                return _UNWRAPS[field.unwrap](raw)
            if kind == "message":
                pass
            elif kind == "enum":
                return self.schema.enum(field.ref, raw)
            elif kind == "float" and self._in_any:
                return _float32_rounded(_float32(raw))
            else:
                return _SCALARS[kind](raw)
        except _VALUE_ERRORS as exc:  # the codec notes these in its own words: let it
            raise Decline(f"{path}: {exc}") from None
        msg = self.message(field.ref, raw, path)
        if msg is None:
            raise _Drop
        return msg

    def _any(self, raw: Json, path: str) -> Record | None:
        url = raw.get("@type") if isinstance(raw, Mapping) else None
        if not isinstance(url, str) or not url:
            reason = "Any without @type" if isinstance(raw, Mapping) else "expected an Any object"
            self.notes.append(Skipped(path, reason))
            return None
        name = url.rsplit("/", 1)[-1]
        if not self.schema.knows(name) and name not in _JSON_RECORDS:
            raise Decline(f"{path}: {name} is not in the records schema")
        assert isinstance(raw, Mapping)
        self._in_any += 1  # the codec packs the payload to bytes: 32-bit floats round
        try:
            if name in _JSON_RECORDS:
                inner = self.message(name, raw.get("value"), f"{path}.value")
            else:
                body = {k: v for k, v in raw.items() if k != "@type"}
                inner = self.message(name, body, path)
        finally:
            self._in_any -= 1
        if inner is None:
            return None
        record = object.__new__(AnyRecord)
        record.__dict__ = {"type_url": url, "value": inner}
        return record


def _float32_rounded(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _json_record(name: str, raw: Json) -> JsonRecord:
    """What the codec's fast path takes (else Decline): finite numbers (as floats),
    UTF-8 text, objects and arrays of those; a Struct an object, a ListValue an array."""
    if (name == "google.protobuf.Struct" and type(raw) is not dict) or (
        name == "google.protobuf.ListValue" and type(raw) is not list
    ):
        raise Decline(f"{name} of the wrong JSON kind")
    record = object.__new__(_JSON_RECORDS[name])
    record.__dict__ = {"json": _json_value(raw)}
    return record


def _json_value(raw: Json) -> Json:
    kind = type(raw)
    if kind is str:
        if not utf8(raw):
            raise Decline("text that is not UTF-8")
        return raw
    if kind is bool or raw is None:
        return raw
    if kind is int or kind is float:
        try:
            number = float(raw)
        except OverflowError:
            raise Decline("a number too big for a double") from None
        if not math.isfinite(number):
            raise Decline("a number that is not finite")
        return number
    if kind is dict:
        out = {}
        for key, value in raw.items():
            if type(key) is not str or not utf8(key):
                raise Decline("a key that is not UTF-8")
            out[key] = _json_value(value)
        return out
    if kind is list:
        return [_json_value(v) for v in raw]
    raise Decline(f"not JSON: {kind.__name__}")


def decode(name: str, raw: Json, path: str = "$") -> tuple[Record, list[Skipped]]:
    """A resource of message type ``name`` (``envoy.config.route.v3.RouteConfiguration``)
    as a record, with the notes of what was dropped. Raises ``Decline`` where only the
    message decoder can judge; ``XdsLoadError`` as ``codec.from_json_dict`` does."""
    from verifier.xds.layout import XdsLoadError

    if not isinstance(raw, Mapping):
        raise XdsLoadError(path, f"expected a JSON object for {name.rsplit('.', 1)[-1]}")
    if "@type" in raw:
        if str(raw["@type"]).rsplit("/", 1)[-1] != name:
            raise Decline("@type names another type")
        raw = {k: v for k, v in raw.items() if k != "@type"}
    decoder = Decoder(schema())
    try:
        record = decoder.message(name, raw, path)
    except RecursionError:
        raise Decline("nested too deep") from None
    if record is None:
        raise Decline("nothing decoded")
    return record, decoder.notes


# --- to JSON, as the codec writes a message ---------------------------------------------

_INT64: Final = frozenset({"int64", "uint64", "sint64", "fixed64", "sfixed64"})
_UNWRAPPED_TO_JSON: Final[dict[str, Callable[[Any], Json]]] = {
    "google.protobuf.Duration": duration_to_json,
    "google.protobuf.Timestamp": timestamp_to_json,
    "google.protobuf.BytesValue": bytes_to_json,
    "google.protobuf.Int64Value": str,
    "google.protobuf.UInt64Value": str,
    "google.protobuf.FloatValue": float_to_json,
    "google.protobuf.DoubleValue": float_to_json,
}


def to_json(record: Record) -> Json:
    """snake_case proto-JSON, exactly as ``codec.to_json_dict`` writes the same message."""
    if isinstance(record, AnyRecord):
        inner = record.value
        body = to_json(inner) if inner is not None else {}
        if isinstance(inner, JsonRecord):
            return {"@type": record.type_url, "value": body}
        return {"@type": record.type_url, **body}
    if isinstance(record, JsonRecord):
        return _json_numbers(record.json)
    out: dict[str, Json] = {}
    for f in type(record)._pb_table:
        value = getattr(record, f.attr)
        key = f.attr[:-1] if f.attr.endswith("_") and keyword.iskeyword(f.attr[:-1]) else f.attr
        if f.key_type and value:
            out[key] = {
                str(k).lower() if isinstance(k, bool) else str(k): _value_json(f, v)
                for k, v in value.items()
            }
        elif f.repeated and value:
            out[key] = [_value_json(f, v) for v in value]
        elif f.key_type or f.repeated or value is None:
            continue
        elif value or f.optional or f.kind == "message":
            out[key] = _value_json(f, value)  # set-but-empty messages have meaning
    return out


def _value_json(f: _Field, value: Any) -> Json:
    if f.unwrap:
        return _UNWRAPPED_TO_JSON.get(f.unwrap, _same)(value)
    if f.kind == "message":
        return to_json(value)
    if f.kind == "enum":
        return schema().enum_json(f.ref, value)
    if f.kind in _INT64:
        return str(value)
    if f.kind == "bytes":
        return bytes_to_json(value)
    if f.kind in ("float", "double"):
        return float_to_json(value)
    return value


def _same(value: Any) -> Any:
    return value


def _json_numbers(value: Json) -> Json:
    """A Struct's numbers as the codec writes them (integral ones without ``.0``)."""
    if isinstance(value, float):
        return float_to_json(value)
    if isinstance(value, dict):
        return {k: _json_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_numbers(v) for v in value]
    return value
