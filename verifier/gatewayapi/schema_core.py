"""The schema language the validator is written in, and the one walker for it.

The Gateway API CRDs are OpenAPI schemas plus CEL rules. Writing them down as
plain data (``Str``, ``Int``, ``Obj``, ...) keeps every limit next to the field
it belongs to, so each can be checked against the CRD line by line; the walker
is the only code that knows how an OpenAPI keyword turns into an error.
CEL rules are small functions attached to the node they sit on in the CRD.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import re2

from verifier.errors import InputError
from verifier.gatewayapi.load import RawObject
from verifier.suggest import closest


@dataclass
class Ctx:
    """Collects errors for one object, resolving each field path to its line."""

    raw: RawObject
    errors: list[InputError] = field(default_factory=list)
    # A Secret's values are key material: its errors say what was wrong, never what was there.
    secret: bool = False
    # Whose schema an unknown field is missing from, for its message.
    schema: str = "the Gateway API v1.5 schema"
    # Read from an API server (``RawObject.served``), which decoded it with its own
    # field list, perhaps newer than ours: a field we do not know is no mistake there.
    served: bool = False

    def error(self, path: str, code: str, message: str) -> None:
        self.errors.append(InputError(self.raw.file, self.raw.line_of(path), path, code, message))

    def show(self, value: Any) -> str:
        """``show(value)``, or only its length where the object is a Secret."""
        if self.secret:
            return f"(a Secret's value, {len(json.dumps(value, default=str))} characters)"
        return show(value)


# A CEL rule: (ctx, value of the node it is attached to, path of that node).
# The walker has already checked the node's own type; children may still be
# of any type, so rules read them defensively.
Rule = Callable[[Ctx, Any, str], None]


@dataclass(frozen=True)
class Str:
    min_len: int | None = None
    max_len: int | None = None
    pattern: str | None = None
    enum: tuple[str, ...] = ()
    expect: str = ""  # the pattern in words, for the error message
    code: str = "pattern"  # a more specific code for a pattern failure
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class Int:
    minimum: int | None = None
    maximum: int | None = None
    enum: tuple[int, ...] = ()
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class Bool:
    pass


@dataclass(frozen=True)
class Unread:
    """A field the API defines whose value the edge never reads: its name is known
    (a typo beside it is still caught), its value is the API server's to check."""


@dataclass(frozen=True)
class Field:
    node: Node
    required: bool = False


@dataclass(frozen=True)
class Obj:
    fields: Mapping[str, Field]
    rules: tuple[Rule, ...] = ()
    # Free-form objects (status, metadata checked elsewhere) accept any key.
    open: bool = False
    # The API type it is (``ServiceSpec``), for an unknown field's message.
    title: str = ""


@dataclass(frozen=True)
class Arr:
    items: Node
    min_items: int | None = None
    max_items: int | None = None
    # x-kubernetes-list-type: "set" items and "map" keys must be unique.
    list_type: str = "atomic"
    map_key: str | None = None
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class Map:
    values: Node
    keys: Str | None = None
    max_props: int | None = None
    rules: tuple[Rule, ...] = ()


Node = Str | Int | Bool | Obj | Arr | Map | Unread


def opt(node: Node) -> Field:
    return Field(node)


def req(node: Node) -> Field:
    return Field(node, required=True)


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__  # a YAML date or timestamp, for example


def show(value: Any) -> str:
    """A short rendering of a bad value for a message."""
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 otherwise prints every parse error to stderr
    return options


_RE2_OPTIONS = _re2_options()
_PATTERNS: dict[str, Any] = {}


@functools.lru_cache(maxsize=1 << 16)
def matches(pattern: str, text: str) -> bool:
    """OpenAPI ``pattern`` as the API server runs it: Go RE2, unanchored search.

    Python's ``re`` would let ``$`` match before a trailing newline; RE2 keeps
    the Go semantics the CRD authors wrote the patterns for. Remembered: names,
    hostnames and durations repeat across thousands of rules.
    """
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        compiled = _PATTERNS[pattern] = re2.compile(pattern, _RE2_OPTIONS)
    return compiled.search(text) is not None


def re2_error(expression: str) -> str | None:
    """The RE2 parse error for ``expression``, or None when it compiles."""
    try:
        re2.compile(expression, _RE2_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else str(exc)
        return detail.decode() if isinstance(detail, bytes) else str(detail)
    return None


def as_int(value: Any) -> int | None:
    """An integer as JSON decoding sees it: 3 and 3.0 are integers, True is not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def check(ctx: Ctx, node: Node, value: Any, path: str) -> None:
    """Validate ``value`` against ``node``; ``None`` never reaches here.

    Every problem is reported, not just the first: the API server does the
    same for schema errors, and a person fixing a file wants the whole list.
    """
    if isinstance(node, Unread):
        return
    if isinstance(node, Str):
        _check_str(ctx, node, value, path)
    elif isinstance(node, Int):
        _check_int(ctx, node, value, path)
    elif isinstance(node, Bool):
        if not isinstance(value, bool):
            ctx.error(path, "type", f"expected boolean, got {type_name(value)} {ctx.show(value)}")
    elif isinstance(node, Obj):
        _check_obj(ctx, node, value, path)
    elif isinstance(node, Arr):
        _check_arr(ctx, node, value, path)
    else:
        _check_map(ctx, node, value, path)


def _check_str(ctx: Ctx, node: Str, value: Any, path: str) -> None:
    if not isinstance(value, str):
        ctx.error(path, "type", f"expected string, got {type_name(value)} {ctx.show(value)}")
        return
    if node.enum and value not in node.enum:
        ctx.error(path, "enum", f"expected one of {', '.join(node.enum)}, got {ctx.show(value)}")
        return
    length = len(value)  # code points, as the API server counts them
    if node.min_len is not None and length < node.min_len:
        what = "must not be empty" if node.min_len == 1 else f"must be at least {node.min_len}"
        suffix = "" if node.min_len == 1 else " characters long"
        ctx.error(path, "min-length", f"{what}{suffix}, got {ctx.show(value)}")
    if node.max_len is not None and length > node.max_len:
        ctx.error(
            path, "max-length", f"must be at most {node.max_len} characters long, got {length}"
        )
    if node.pattern is not None and not matches(node.pattern, value):
        words = node.expect or f"must match {node.pattern}"
        ctx.error(path, node.code, f"{words}, got {ctx.show(value)}")
    for rule in node.rules:
        rule(ctx, value, path)


def _check_int(ctx: Ctx, node: Int, value: Any, path: str) -> None:
    number = as_int(value)
    if number is None:
        ctx.error(path, "type", f"expected integer, got {type_name(value)} {ctx.show(value)}")
        return
    if node.enum and number not in node.enum:
        allowed = ", ".join(str(e) for e in node.enum)
        ctx.error(path, "enum", f"expected one of {allowed}, got {number}")
        return
    if node.minimum is not None and number < node.minimum:
        ctx.error(path, "minimum", f"must be >= {node.minimum}, got {number}")
    if node.maximum is not None and number > node.maximum:
        ctx.error(path, "maximum", f"must be <= {node.maximum}, got {number}")
    for rule in node.rules:
        rule(ctx, number, path)


def _check_obj(ctx: Ctx, node: Obj, value: Any, path: str) -> None:
    if not isinstance(value, dict):
        ctx.error(path, "type", f"expected object, got {type_name(value)} {ctx.show(value)}")
        return
    for key, child in value.items():
        spec = node.fields.get(key)
        if spec is None:
            if not node.open and not ctx.served:
                _unknown_field(ctx, node, str(key), join(path, key))
            continue
        if child is not None:  # null is pruned like an absent field
            check(ctx, spec.node, child, join(path, key))
    for key, spec in node.fields.items():
        if spec.required and value.get(key) is None:
            ctx.error(join(path, key), "required", f"required field {key!r} is missing")
    for rule in node.rules:
        rule(ctx, value, path)


def _unknown_field(ctx: Ctx, node: Obj, key: str, path: str) -> None:
    near = closest(key, node.fields)
    where = f"a field of {node.title} in {ctx.schema}" if node.title else f"in {ctx.schema}"
    ctx.error(
        path,
        "unknown-field",
        f"unknown field {key!r}: not {where}; the API server rejects it (strict field "
        "validation, kubectl's default) or silently drops it"
        + (f"; did you mean {near!r}?" if near else ""),
    )


def identity(item: Any) -> str:
    """A hashable stand-in for any YAML value, for uniqueness checks."""
    return json.dumps(item, sort_keys=True, default=str)


def _check_arr(ctx: Ctx, node: Arr, value: Any, path: str) -> None:
    if not isinstance(value, list):
        ctx.error(path, "type", f"expected array, got {type_name(value)} {ctx.show(value)}")
        return
    count = len(value)
    if node.min_items is not None and count < node.min_items:
        plural = "item" if node.min_items == 1 else "items"
        ctx.error(path, "min-items", f"must have at least {node.min_items} {plural}, got {count}")
    if node.max_items is not None and count > node.max_items:
        ctx.error(path, "max-items", f"must have at most {node.max_items} items, got {count}")
    seen: dict[str, int] = {}
    for i, item in enumerate(value):
        item_path = f"{path}[{i}]"
        if item is None:
            ctx.error(item_path, "type", f"expected {_node_word(node.items)}, got null")
            continue
        check(ctx, node.items, item, item_path)
        ident: str | None = None
        if node.list_type == "set":
            ident = identity(item)
        elif node.list_type == "map" and node.map_key and isinstance(item, dict):
            key_value = item.get(node.map_key)
            ident = None if key_value is None else identity(key_value)
        if ident is None:
            continue
        if ident in seen:
            what = (
                f"{node.map_key} {ctx.show(item.get(node.map_key))}"
                if node.list_type == "map" and isinstance(item, dict)
                else ctx.show(item)
            )
            ctx.error(
                item_path, "unique", f"duplicate entry: {what} already at {path}[{seen[ident]}]"
            )
        else:
            seen[ident] = i
    for rule in node.rules:
        rule(ctx, value, path)


def _check_map(ctx: Ctx, node: Map, value: Any, path: str) -> None:
    if not isinstance(value, dict):
        ctx.error(path, "type", f"expected object, got {type_name(value)} {ctx.show(value)}")
        return
    if node.max_props is not None and len(value) > node.max_props:
        ctx.error(
            path,
            "max-properties",
            f"must have at most {node.max_props} entries, got {len(value)}",
        )
    for key, child in value.items():
        child_path = join(path, key)
        if node.keys is not None:
            check(ctx, node.keys, key, child_path)
        if child is not None:
            check(ctx, node.values, child, child_path)
    for rule in node.rules:
        rule(ctx, value, path)


def _node_word(node: Node) -> str:
    if isinstance(node, Str):
        return "string"
    if isinstance(node, Int):
        return "integer"
    if isinstance(node, Bool):
        return "boolean"
    if isinstance(node, Arr):
        return "array"
    return "object"


# Small readers for CEL rules, which see children of unchecked type.


def d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def lst(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def has(obj: dict[str, Any], key: str) -> bool:
    """CEL ``has()``: present and not null (the API server prunes nulls)."""
    return obj.get(key) is not None
