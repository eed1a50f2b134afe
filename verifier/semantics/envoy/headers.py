"""Header mutations: one ``HeaderParser`` per configuration level, applied as Envoy does.

From ``HeaderParser::evaluateHeaders`` (Envoy 1.40, checked against the binary):
"Removing headers in the headers_to_remove_ list first makes remove-before-add the
default behavior"; then every entry is classified against the headers *as they are
before this level adds anything*; then "First overwrite all headers which need to
be overwritten", then "Now add headers which should be added". So within one level
an OVERWRITE entry lands before every APPEND entry whatever their config order, and
an empty value is skipped unless ``keep_empty_value``.

Across levels (route_components.proto, ``most_specific_header_mutations_wins``): "By
default, headers that should be added/removed are evaluated from most to least
specific: route level, virtual host level, connection manager level", so the outer
level wins a conflict; weighted-cluster headers are evaluated before all of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.semantics.envoy.strings import ModelError
from verifier.xds.enums import HeaderValueOptionHeaderAppendAction

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.core.v3 import HeaderValueOption


Action = HeaderValueOptionHeaderAppendAction
HeaderList = list[tuple[str, str]]

# HeaderValueOption.append (deprecated): "Should the value be appended? If true
# (default), the value is appended to existing values. Otherwise it replaces any
# existing values." It maps onto the append_action it predates.
LEGACY_APPEND: dict[bool, Action] = {
    True: Action.APPEND_IF_EXISTS_OR_ADD,
    False: Action.OVERWRITE_IF_EXISTS_OR_ADD,
}

# Headers a HeaderParser refuses: ":-prefixed or host headers may not be modified".
UNMODIFIABLE = frozenset({"host"})


@dataclass(frozen=True)
class HeaderOp:
    name: str  # lower-cased
    value: str
    action: Action
    keep_empty: bool


@dataclass(frozen=True)
class HeaderParser:
    """One level's ``*_headers_to_add`` and ``*_headers_to_remove``."""

    level: str
    to_add: tuple[HeaderOp, ...] = ()
    to_remove: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.to_add and not self.to_remove

    def apply(self, headers: HeaderList) -> HeaderList:
        removed = set(self.to_remove)
        out = [(k, v) for k, v in headers if k not in removed] if removed else list(headers)
        present = {k for k, _ in out}
        overwrite: list[tuple[str, str]] = []
        append: list[tuple[str, str]] = []
        for op in self.to_add:
            if not op.value and not op.keep_empty:
                continue
            if op.action == Action.APPEND_IF_EXISTS_OR_ADD:
                append.append((op.name, op.value))
            elif op.action == Action.ADD_IF_ABSENT:
                if op.name not in present:
                    append.append((op.name, op.value))
            elif op.action == Action.OVERWRITE_IF_EXISTS:
                if op.name in present:
                    overwrite.append((op.name, op.value))
            else:
                overwrite.append((op.name, op.value))
        for name, value in overwrite:
            out = set_header(out, name, value)
        out.extend(append)
        return out


# A level as sequential operations (request.py RESPONSE_OPS): removes, then the
# overwrites, then the appends - the order evaluateHeaders applies them in.
OP_NAMES: dict[Action, str] = {
    Action.OVERWRITE_IF_EXISTS_OR_ADD: "set",
    Action.OVERWRITE_IF_EXISTS: "overwrite-if-exists",
    Action.APPEND_IF_EXISTS_OR_ADD: "add",
    Action.ADD_IF_ABSENT: "add-if-absent",
}
_OVERWRITES = frozenset({Action.OVERWRITE_IF_EXISTS_OR_ADD, Action.OVERWRITE_IF_EXISTS})
_ACTIONS = frozenset(int(a) for a in Action)


def sequential_ops(parsers: Iterable[HeaderParser]) -> tuple[tuple[str, str, str], ...]:
    ops: list[tuple[str, str, str]] = []
    for p in parsers:
        ops += [("remove", name, "") for name in p.to_remove]
        kept = [op for op in p.to_add if op.value or op.keep_empty]
        ops += [(OP_NAMES[op.action], op.name, op.value) for op in kept if op.action in _OVERWRITES]
        ops += [
            (OP_NAMES[op.action], op.name, op.value) for op in kept if op.action not in _OVERWRITES
        ]
    return tuple(ops)


def set_header(headers: HeaderList, name: str, value: str) -> HeaderList:
    """``setReferenceKey``: the first occurrence takes the value in place, others go."""
    out: HeaderList = []
    done = False
    for k, v in headers:
        if k != name:
            out.append((k, v))
        elif not done:
            out.append((k, value))
            done = True
    if not done:
        out.append((name, value))
    return out


def _format(value: str) -> tuple[str, str | None]:
    """Header values are substitution format strings: `%%` is a literal `%`; any other
    `%COMMAND%` depends on the connection and is kept verbatim with a note."""
    if "%" not in value:
        return value, None
    literal = value.replace("%%", "")
    if "%" in literal:
        return value, f"header value {value!r} uses a substitution command; kept verbatim"
    return value.replace("%%", "%"), None


def header_parser(
    level: str,
    to_add: Sequence[HeaderValueOption],
    to_remove: Iterable[str],
    *,
    request: bool,
) -> HeaderParser:
    ops: list[HeaderOp] = []
    notes: list[str] = []
    for option in to_add:
        if option.header is None:
            continue
        name = option.header.key.lower()
        if request and (name.startswith(":") or name in UNMODIFIABLE):
            notes.append(f"{level}: Envoy rejects modifying {name!r}; ignored")
            continue
        value, note = _format(option.header.value or option.header.raw_value.decode("utf-8"))
        if note:
            notes.append(f"{level}: {note}")
        action = (
            LEGACY_APPEND[option.append]
            if option.append is not None
            else int(option.append_action)  # an enum member in a message, an int in a record
        )
        if action not in _ACTIONS:  # HeaderValueOption.append_action: defined_only
            raise ModelError(f"{level}: header append_action {action} is not a defined value")
        ops.append(HeaderOp(name, value, Action(action), bool(option.keep_empty_value)))
    removes = tuple(n.lower() for n in to_remove)
    return HeaderParser(level, tuple(ops), removes, tuple(notes))


def apply_all(parsers: Iterable[HeaderParser], headers: HeaderList) -> HeaderList:
    for parser in parsers:
        if not parser.empty:
            headers = parser.apply(headers)
    return headers


def describe(parser: HeaderParser) -> str:
    parts = [f"remove {n}" for n in parser.to_remove]
    parts += [f"{op.action.name.lower()} {op.name}={op.value!r}" for op in parser.to_add]
    return f"{parser.level}: " + ", ".join(parts)
