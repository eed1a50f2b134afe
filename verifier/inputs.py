"""Reading the files people give the tool, so that no input can end in a traceback.

Every file the tool reads (resources, cases tables, mesh registries, xDS JSON) goes
through these: bytes that are not UTF-8, nesting deeper than Python recurses, a YAML
tag or value the safe loader refuses, a self-referencing alias, an integer of
thousands of digits. Each becomes one ``file:line: message [code]`` input error
(exit 2), never a traceback: a verifier that crashes on hostile input checked nothing.
"""

from __future__ import annotations

import contextlib
import json
import json.decoder
import json.scanner
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from verifier.errors import InputError, InputErrors


@dataclass(frozen=True)
class Limits:
    """How much of one input file the tool reads before calling it hostile.

    Each bound is far above any real configuration and far below what hangs the
    tool or exhausts memory; a user with a real input past one raises it with the
    flag its error names (``LIMIT_FLAGS``).
    """

    max_bytes: int = 256 * 1024 * 1024
    max_depth: int = 200
    # items in one YAML/JSON list or mapping: 100,000 routes is a big edge
    max_items: int = 1_000_000
    # a document may expand its aliases to this many times its own distinct
    # nodes (plus ALIAS_SLACK): real files repeat a few anchors, never a tree of them
    alias_expansion: int = 10


ALIAS_SLACK = 10_000
# The codes of an input past a limit: stable whatever the file's kind.
LIMIT_CODES = frozenset({"too-large", "too-deep", "too-long", "yaml-aliases"})
LIMIT_FLAGS = {
    "max_bytes": "--max-input-bytes",
    "max_depth": "--max-depth",
    "max_items": "--max-list-length",
    "alias_expansion": "--max-alias-expansion",
}
_limits = Limits()


def limits() -> Limits:
    return _limits


def set_limits(new: Limits) -> None:
    """Set once by the command line, before anything is read; the readers are deep
    in the call stack and every one of them must apply the same bounds."""
    global _limits
    _limits = new


def _over(path: str, line: int, code: str, what: str, limit: str) -> InputErrors:
    value = getattr(_limits, limit)
    return InputErrors(
        [
            InputError(
                path,
                line,
                "",
                code,
                f"{what}, over the limit of {value:,} (raise it with {LIMIT_FLAGS[limit]})",
            )
        ]
    )


# What Python raises from deep inside a parser on input it cannot represent:
# recursion (nesting, self-referencing aliases), and the safe loader's own
# ValueError/TypeError (`!!float x`, an unhashable `{[a]: 1}` key).
HOSTILE = (RecursionError, ValueError, TypeError, AttributeError, OverflowError)


def decode(data: bytes, path: str) -> str:
    """UTF-8 text, or an input error at the line of the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputErrors(
            [InputError(path, line, "", "encoding", f"not UTF-8: byte {exc.object[exc.start]:#x}")]
        ) from None


def read_text(path: str) -> str:
    """A file's text; unreadable and non-UTF-8 files are input errors."""
    try:
        size = Path(path).stat().st_size
        if size > _limits.max_bytes:
            raise _over(path, 0, "too-large", f"{size:,} bytes", "max_bytes")
        # At most one byte past the limit: a device or a pipe (/dev/zero) says size 0
        # and never ends.
        with open(path, "rb") as f:
            data = f.read(_limits.max_bytes + 1)
        if len(data) > _limits.max_bytes:
            raise _over(path, 0, "too-large", f"more than {_limits.max_bytes:,} bytes", "max_bytes")
    except FileNotFoundError:
        raise InputErrors(
            [InputError(path, 0, "", "not-found", "no such file or directory")]
        ) from None
    except OSError as exc:
        raise InputErrors(
            [InputError(path, 0, "", "unreadable", exc.strerror or str(exc))]
        ) from None
    return decode(data, path)


STDIN = "<stdin>"


def read_stdin() -> str:
    """Standard input's text, decoded as a file's is: the console's text layer would
    raise UnicodeDecodeError from inside ``read`` on bytes that are not UTF-8."""
    if sys.stdin is None:  # started with no file descriptor 0 at all
        raise InputErrors([InputError(STDIN, 0, "", "unreadable", "no standard input")])
    buffer = getattr(sys.stdin, "buffer", None)
    # A text stream with no bytes under it is an embedding program's (or a test's).
    text = sys.stdin.read() if buffer is None else decode(buffer.read(), STDIN)
    check_size(text, STDIN)
    return text


# (the stream, the process that read it, its text or the error reading it)
_stdin_read: tuple[object, int, str | InputErrors] | None = None


def _stdin_memo() -> str | InputErrors | None:
    """What ``read_stdin_once`` read from this standard input. A forked child holds its
    parent's memo though multiprocessing gave it /dev/null as ``sys.stdin``: the stream
    it inherited is the parent's, and the parent has read it."""
    if _stdin_read is None:
        return None
    stream, pid, found = _stdin_read
    return found if stream is sys.stdin or pid != os.getpid() else None


def read_stdin_once() -> str:
    """Standard input's text (or the error reading it), the same on every call while
    ``sys.stdin`` is the same stream: ``--xds -`` is read once per scenario, and a run
    may have several; ``check`` reads it at the start, to hand it to Envoy at once."""
    global _stdin_read
    found = _stdin_memo()
    if found is None:
        stream = sys.stdin
        try:
            found = read_stdin()
        except InputErrors as exc:
            found = exc
        _stdin_read = (stream, os.getpid(), found)
    if isinstance(found, InputErrors):
        raise InputErrors(list(found.errors))
    return found


def stdin_text_read() -> bool:
    """Whether this process holds standard input's text (``read_stdin_once``)."""
    return isinstance(_stdin_memo(), str)


def yaml_problem(exc: BaseException, path: str) -> InputError:
    """The input error for whatever the YAML loader raised."""
    if isinstance(exc, yaml.YAMLError) and "maximum nesting depth" in str(exc):
        # libyaml's own limit (1,000 levels), met before --max-depth is judged
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        why = (
            "nested 1,000 levels deep or more, past what the YAML parser reads (no flag raises it)"
        )
        return InputError(path, line, "", "yaml-depth", why)
    if isinstance(exc, yaml.YAMLError):
        return _yaml_syntax(exc, path)
    if isinstance(exc, RecursionError):
        why = "nested too deep for the parser (no flag raises it), or an alias that contains itself"
        return InputError(path, 1, "", "yaml-depth", why)
    return InputError(path, 1, "", "yaml-value", f"a value the safe loader refuses: {exc}")


# What the parser was reading when it failed, where the line it started on is the
# mistake: an unclosed quote or bracket is found lines later (at the next document
# marker, or the next line), and that later line is not where to look.
_OPENED_EARLIER = ("while scanning a quoted scalar", "while parsing a flow")


def _yaml_syntax(exc: yaml.YAMLError, path: str) -> InputError:
    problem_mark = getattr(exc, "problem_mark", None)
    context_mark = getattr(exc, "context_mark", None)
    context = str(getattr(exc, "context", None) or "")
    problem = getattr(exc, "problem", None) or str(exc)
    mark = problem_mark or context_mark
    why = f"invalid YAML: {problem}"
    if (
        context_mark is not None
        and problem_mark is not None
        and context_mark.line != problem_mark.line
    ):
        if context.startswith(_OPENED_EARLIER):
            mark = context_mark
            what = context.removeprefix("while scanning a ").removeprefix("while parsing a ")
            why += f" at line {problem_mark.line + 1}, in the {what} that starts here"
        else:
            why += f" ({context} at line {context_mark.line + 1})"
    line = mark.line + 1 if mark is not None else 1
    return InputError(path, line, "", "yaml-syntax", why)


def check_size(text: str, path: str) -> None:
    """The byte limit, for text that did not come from a file (standard input)."""
    if len(text) > _limits.max_bytes:
        raise _over(path, 0, "too-large", f"{len(text):,} characters", "max_bytes")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _tree_fits(root: yaml.Node) -> bool:
    """Whether a document whose nodes form a tree (no anchors) is within every limit
    ``check_yaml_shape`` enforces: its deepest path is its root's depth there, each node
    is counted once, and there is no alias to contain itself."""
    lim = _limits
    count = 0
    deepest = 0
    stack = [(root, 1)]
    while stack:
        node, level = stack.pop()
        count += 1
        if level > deepest:
            deepest = level
        if isinstance(node, yaml.MappingNode):
            if len(node.value) > lim.max_items:
                return False
            for key, value in node.value:
                stack.append((key, level + 1))
                stack.append((value, level + 1))
        elif isinstance(node, yaml.SequenceNode):
            if len(node.value) > lim.max_items:
                return False
            stack.extend((item, level + 1) for item in node.value)
    return deepest <= lim.max_depth and count <= lim.alias_expansion * count + ALIAS_SLACK


def check_yaml_shape(root: yaml.Node, path: str, *, anchors: bool = True) -> None:
    """Refuse a composed document before anything expands it: too deep, a list or
    mapping too long, an alias that contains itself, or aliases that expand past
    ``alias_expansion`` times the document's own size (a bomb, found in time linear
    in the file, since sizes are summed over the graph, never over its expansion).

    ``anchors=False``: the caller knows the text defines no anchor (it has no ``&``),
    so nothing can be an alias and the nodes form a tree. Then a quicker pass
    (``_tree_fits``; the walk below took 44% of loading 10,000 rules of YAML) decides
    whether any limit is passed, and only if one is does the walk find which.
    """
    if not anchors and _tree_fits(root):
        return
    lim = _limits
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        line = node.start_mark.line + 1
        kids = _children(node)
        if finished:
            open_.discard(key)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            if depth[key] > lim.max_depth:
                raise _over(path, line, "too-deep", f"nested {depth[key]} levels", "max_depth")
            continue
        if key in size:
            continue
        items = len(node.value) if isinstance(node, yaml.MappingNode | yaml.SequenceNode) else 0
        if items > lim.max_items:
            raise _over(path, line, "too-long", f"{items:,} items in one list", "max_items")
        open_.add(key)
        stack.append((node, True))
        for kid in kids:
            if id(kid) in open_:
                raise InputErrors(
                    [InputError(path, line, "", "yaml-aliases", "an alias that contains itself")]
                )
            if id(kid) not in size:
                stack.append((kid, False))
    distinct = len(size)
    if size[id(root)] > lim.alias_expansion * distinct + ALIAS_SLACK:
        what = (
            f"aliases expand this document to {size[id(root)]:,} nodes from {distinct:,} "
            f"(an alias bomb?), more than {lim.alias_expansion} times its size"
        )
        raise InputErrors(
            [
                InputError(
                    path,
                    root.start_mark.line + 1,
                    "",
                    "yaml-aliases",
                    f"{what} (raise it with {LIMIT_FLAGS['alias_expansion']})",
                )
            ]
        )


# libyaml's parser where PyYAML was built with it: the same nodes and marks, and parsed
# once, the data built from the nodes the checks above have judged. Measured on the 56
# cases files of fixtures/ (110 KB): 0.80 s of CPU parsed twice in Python, 0.06 s so.
COMPOSER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str, path: str) -> tuple[Any, yaml.Node | None]:
    """(data, node) of a one-document YAML text, with the safe loader only."""
    check_size(text, path)
    try:
        node = yaml.compose(text, Loader=COMPOSER)
        if node is None:
            return None, None
        check_yaml_shape(node, path, anchors="&" in text)
        data = yaml.SafeLoader("").construct_document(node)
    except (yaml.YAMLError, *HOSTILE) as exc:
        raise InputErrors([yaml_problem(exc, path)]) from None
    return data, node


_FIELD_STEP = re.compile(r"\[(\d+)\]|\.?([^.\[]+)")


def line_of_field(root: yaml.Node, field_path: str) -> int:
    """The line of ``field_path`` (``[0].request.path``) in a composed document: of the
    key that holds it, where the mapping has it (an unknown key's own line, which is
    what a person edits), else of the deepest node on the way that exists."""
    node, line = root, root.start_mark.line + 1
    for index, key in _FIELD_STEP.findall(field_path):
        found: yaml.Node | None = None
        if index and isinstance(node, yaml.SequenceNode) and int(index) < len(node.value):
            found = node.value[int(index)]
            line = found.start_mark.line + 1
        elif key and isinstance(node, yaml.MappingNode):
            pair = next((p for p in node.value if p[0].value == key), None)
            if pair is not None:
                found = pair[1]
                line = pair[0].start_mark.line + 1
        if found is None:
            break
        node = found
    return line


def load_yaml_file(path: str) -> Any:
    """The data of a one-document YAML file, read through every check above."""
    return load_yaml(read_text(path), path)[0]


def _values(doc: Any) -> Iterator[tuple[Any, int]]:
    """(value, depth) of every value in parsed JSON, without recursion."""
    stack = [(doc, 1)]
    while stack:
        value, level = stack.pop()
        yield value, level
        if isinstance(value, dict):
            stack.extend((v, level + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, level + 1) for v in value)


_JSON_LEAVES = frozenset({str, int, float, bool, type(None)})
_PLAIN = frozenset({dict, list})


def _container(value: Any) -> bool:
    """A JSON object or array (a Mapping or a list), decided for plain ones at once."""
    kind = type(value)
    if kind in _PLAIN:
        return True
    return kind not in _JSON_LEAVES and isinstance(value, Mapping | list)


def container_levels(doc: Any) -> Iterator[list[Any]]:
    """Parsed JSON's objects and arrays, a level at a time from the document down.
    Only containers are visited, never the leaves one by one (most of a document):
    the limits and the xDS loader's ``@type`` preload read 10,000 rules of xDS in
    about a quarter of a value-by-value walk's time."""
    level = [doc] if _container(doc) else []
    while level:
        yield level
        below: list[Any] = []
        for node in level:
            items = node if isinstance(node, list) else node.values()  # else a Mapping
            below += [  # _container, inlined: this runs for every value of the document
                v
                for v in items
                if type(v) in _PLAIN
                or (type(v) not in _JSON_LEAVES and isinstance(v, Mapping | list))
            ]
        level = below


def _json_fits(doc: Any) -> bool:
    """Whether parsed JSON is within the depth and length limits."""
    lim = _limits
    if lim.max_depth < 1:
        return False  # even the document itself is too deep
    for depth, level in enumerate(container_levels(doc), start=1):
        for node in level:
            if len(node) > lim.max_items or (node and depth >= lim.max_depth):
                return False  # too long, or its values (one level down) too deep
    return True


def check_json_shape(doc: Any, path: str, text: str | None = None) -> None:
    """The depth and list-length limits, on parsed JSON (which has no aliases). The
    quick pass decides; only a document past a limit is walked, for its error, and
    its ``text`` (when given) parsed again for the line."""
    if _json_fits(doc):
        return
    found = _shape_line(text) if text is not None else None
    if found is None:
        found = next(
            (
                ("too-deep", level, 1) if level > _limits.max_depth else ("too-long", len(value), 1)
                for value, level in _values(doc)
                if level > _limits.max_depth
                or (isinstance(value, dict | list) and len(value) > _limits.max_items)
            ),
            None,
        )
    if found is None:
        return
    code, amount, line = found
    if code == "too-deep":
        raise _over(path, line, code, f"nested {amount} levels", "max_depth")
    raise _over(path, line, code, f"{amount:,} items in one list", "max_items")


class _PastLimit(Exception):
    def __init__(self, code: str, amount: int, at: int) -> None:
        super().__init__(code)
        self.found = code, amount, at


def _shape_line(text: str) -> tuple[str, int, int] | None:
    """(code, levels or items, line) of the first value past a limit, in reading
    order: ``text`` parsed again (only then) by the pure-Python scanner, whose object
    and array parsers are told where each one starts. None if it cannot say."""
    lim = _limits
    depth = [0]

    def nested(parse: Any) -> Any:
        def hooked(s_and_end: tuple[str, int], *args: Any) -> Any:
            depth[0] += 1
            start = s_and_end[1]
            at = json.decoder.WHITESPACE.match(text, start).end()  # type: ignore[attr-defined]
            if depth[0] > lim.max_depth:  # the container itself is a value too deep
                raise _PastLimit("too-deep", depth[0], start - 1)
            if depth[0] == lim.max_depth and text[at : at + 1] not in ("]", "}"):
                raise _PastLimit("too-deep", depth[0] + 1, at)
            value, end = parse(s_and_end, *args)
            depth[0] -= 1
            if len(value) > lim.max_items:
                raise _PastLimit("too-long", len(value), start - 1)
            return value, end

        return hooked

    decoder = json.JSONDecoder(object_pairs_hook=dict, parse_constant=_no_constant)
    decoder.parse_object = nested(json.decoder.JSONObject)  # type: ignore[attr-defined]
    decoder.parse_array = nested(decoder.parse_array)  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    try:
        decoder.decode(text)
    except _PastLimit as past:
        code, amount, at = past.found
        return code, amount, text.count("\n", 0, at) + 1
    except (ValueError, RecursionError):
        return None
    return None


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def _duplicate_line(text: str) -> int:
    """The line of the object that holds a key twice: parsed again (only then) by the
    pure-Python scanner, whose object parser is told where each object starts."""
    found = [1]

    def parse_object(s_and_end: tuple[str, int], *args: Any) -> Any:
        try:
            return json.decoder.JSONObject(s_and_end, *args)  # type: ignore[attr-defined]
        except _DuplicateKey:
            if found[0] == 1:  # the innermost object: its parser raises first
                found[0] = text.count("\n", 0, s_and_end[1]) + 1
            raise

    decoder = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    with contextlib.suppress(_DuplicateKey, ValueError, RecursionError):
        decoder.decode(text)
    return found[0]


def load_json(text: str, path: str) -> Any:
    """JSON, with the failures ``json`` raises for hostile input turned into messages.
    A key twice in one object is refused, as Protobuf's JSON parsers (the one in Envoy
    among them) refuse a field set twice: ``json`` would silently keep the last."""
    check_size(text, path)
    try:
        doc = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
        check_json_shape(doc, path, text)
        return doc
    except _DuplicateKey as exc:
        message = f"key {exc.key!r} appears twice in the object that starts here"
        line = _duplicate_line(text)
        raise InputErrors([InputError(path, line, exc.key, "duplicate-key", message)]) from None
    except json.JSONDecodeError as exc:
        # json's messages end "... at" where it appends the position to str(exc).
        why = f"{exc.msg} column {exc.colno}" if exc.msg.endswith(" at") else exc.msg
        if not text.strip():
            why = "the input is empty"
        raise InputErrors(
            [InputError(path, exc.lineno, "", "bad-json", f"invalid JSON: {why}")]
        ) from None
    except RecursionError:  # Python's parser gives up near its recursion limit
        why = (
            f"nested too deep to parse (about {sys.getrecursionlimit():,} levels or more), "
            f"over the limit of {_limits.max_depth:,} ({LIMIT_FLAGS['max_depth']})"
        )
        raise InputErrors([InputError(path, 1, "", "too-deep", why)]) from None
    except ValueError as exc:  # an integer of thousands of digits, among others
        raise InputErrors([InputError(path, 1, "", "bad-json", str(exc))]) from None


def _no_constant(name: str) -> Any:
    """``NaN`` and ``Infinity`` are not JSON; Python's parser accepts them unless told."""
    raise ValueError(f"{name} is not a JSON value")
