"""Damage to valid inputs, drawn by Hypothesis: what a careless or hostile file does.

Two layers, because the tool fails in two places. Damage to the parsed document (a
key deleted or renamed, a value of the wrong type, odd unicode, huge values, deep
nesting, one subtree at two places so YAML writes an anchor and aliases) gets past
the parsers and reaches the validators, the translator and the models. Damage to
the bytes (truncation, bytes that are not UTF-8, NUL, RTL marks, stray YAML syntax,
deep brackets) reaches the readers. Every strategy starts from a valid input, so
most damage lands close to something the tool accepts, where the crashes are.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import yaml
from hypothesis import strategies as st

# Values of the wrong type for any field (test_fuzz_inputs.py found four crashes with these).
WRONG: list[Any] = [None, 0, -1, 2**40, 1.5, "", "x", "-5s", True, [], {}, [1], {"a": 1}]
WRONG += ["\u00e9", {"@type": "type.googleapis.com/nope.Nope"}, {"@type": ""}]

# Text that has broken parsers, printers and terminals: NUL, bidirectional controls,
# BOM, combining marks, line and paragraph separators, astral characters, YAML and
# shell syntax. No lone surrogates: no file or UTF-8 argument can hold one.
ODD_CHARS = [
    "\x00", "\x1b[31m", "\u202e", "\u200f", "\u2066", "\ufeff", "e\u0301", "\u2028",
    "\u2029", "\uffff", "\U0001d518", "\U0001f642", "a\nb", "\r\n", "\t", " ", "\\",
    "'", '"', "${X}", "*a", "&a", "%", "{", "[", "- ", ": ", "#", "/", "..", "*",
    "\u00b2", "\u0663", "9" * 5000,  # digits to str.isdigit() but not to int(), or too many
]  # fmt: skip
ODD_TEXT = st.lists(
    st.one_of(st.sampled_from(ODD_CHARS), st.text(st.characters(exclude_categories=["Cs"]))),
    max_size=4,
).map("".join)

# Sizes that are legal for a parser and absurd for a field.
LONG_STRING = "x" * 100_000
LONG_LIST = 200  # past every maxItems of the CRDs (at most 64), cheap to parse
HUGE: list[Any] = [LONG_STRING, 2**64, -(2**63) - 1, 10**100, 1e308, float("inf"), 2**31]
DEEP = 60  # levels of nesting a document edit adds (byte damage adds thousands)

# Byte snippets spliced into a file: not UTF-8, NUL, RTL, YAML aliases, anchors,
# tags, merge keys, document markers, flow syntax, and brackets thousands deep.
SNIPPETS: list[bytes] = [
    b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x00", b"\x1b",
    "\u202e".encode(), "\ufeff".encode(), b"\r", b"\t", b"\n", b"'", b'"', b"\\",
    b"&a ", b"*a", b" *a\n", b"<<: *a\n", b"*nope", b"!!binary ", b"!!set ", b"!!omap ",
    b"!!python/object/apply:os.system ", b"!!float ", b"!!int ", b"? [a]\n: 1\n",
    b"%TAG ! tag:x:\n", b"--- ", b"\n---\n", b"\n...\n", b"{", b"}", b"[", b"]", b",",
    b": ", b"- ", b"#", b"@", b"`", b"|", b">", b"9" * 5000, b"1e999", b"-0", "\u00b2".encode(),
    b"[" * 3000, b"{" * 3000, b"[" * 3000 + b"]" * 3000, b'{"a":' * 3000 + b"1" + b"}" * 3000,
]  # fmt: skip

Path_ = tuple[str | int, ...]
# One edit of a document: (which node, what, which value, some odd text).
Edit = tuple[int, str, int, str]
# One edit of the bytes: (where, what, which snippet, some odd bytes).
Splice = tuple[int, str, int, bytes]
Damage = tuple[list[Edit], list[Splice]]

EDITS = ("delete", "duplicate", "wrong", "text", "rename", "huge", "long", "nest", "share")
MAX_PATHS = 20_000  # a long list of a long list is millions of paths; the first ones do


def paths(value: Any, here: Path_ = ()) -> Iterator[Path_]:
    """Every path in ``value``, the root first, parents before children."""
    yield here
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*here, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, (*here, i))


def _at(doc: Any, path: Path_) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _contains(tree: Any, target: Any) -> bool:
    """Whether ``target`` (by identity) is ``tree`` or inside it: a share that made a
    node contain itself would be a cycle JSON cannot write and no walk ends on."""
    if tree is target:
        return True
    children = tree.values() if isinstance(tree, dict) else tree if isinstance(tree, list) else ()
    return any(_contains(c, target) for c in children)


def _replacement(what: str, old: Any, which: int, text: str) -> Any:
    if what == "wrong":
        return copy.deepcopy(WRONG[which % len(WRONG)])
    if what == "text":
        return text
    if what == "huge":
        return HUGE[which % len(HUGE)]
    if what == "long":  # one item many times, as the same object: YAML writes aliases
        return [old] * LONG_LIST
    # "nest": the old value a few dozen lists or mappings down
    for depth in range(which % DEEP + 1):
        old = [old] if depth % 2 else {text or "k": old}
    return old


def edited(doc: Any, edits: list[Edit], min_depth: int) -> Any:
    """``doc`` with each edit applied to the node it picks at ``min_depth`` or deeper:
    delete, duplicate a list item, rename a key, put another value in its place, or
    share another node there (YAML then writes an anchor and an alias)."""
    doc = copy.deepcopy(doc)
    for pick, what, which, text in edits:
        found = [p for p in itertools.islice(paths(doc), MAX_PATHS) if len(p) >= min_depth]
        if not found:
            break
        path = found[pick % len(found)]
        parent, key = _at(doc, path[:-1]), path[-1]
        if what == "delete":
            del parent[key]
        elif what == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        elif what == "rename" and isinstance(parent, dict):
            parent[text] = parent.pop(key)
        elif what == "share":
            other = _at(doc, found[which % len(found)])
            if not _contains(other, parent):
                parent[key] = other
        elif what not in ("duplicate", "rename"):
            parent[key] = _replacement(what, parent[key], which, text)
    return doc


def spliced(data: bytes, splices: list[Splice]) -> bytes:
    """``data`` cut short, or with a snippet (or some drawn bytes) put in or over it."""
    for where, what, which, raw in splices:
        at = where % (len(data) + 1)
        snippet = raw or SNIPPETS[which % len(SNIPPETS)]
        if what == "truncate":
            data = data[:at]
        elif what == "insert":
            data = data[:at] + snippet + data[at:]
        else:
            data = data[:at] + snippet + data[at + len(snippet) :]
    return data


EDIT = st.tuples(st.integers(0, 10**6), st.sampled_from(EDITS), st.integers(0, 10**6), ODD_TEXT)
SPLICE = st.tuples(
    st.integers(0, 10**6),
    st.sampled_from(["truncate", "insert", "overwrite"]),
    st.integers(0, 10**6),
    st.one_of(st.just(b""), st.binary(min_size=1, max_size=6)),
)
# Most examples damage one layer; some damage the document, then its bytes.
DAMAGE: st.SearchStrategy[Damage] = st.one_of(
    st.tuples(st.lists(EDIT, min_size=1, max_size=4), st.just([])),
    st.tuples(st.just([]), st.lists(SPLICE, min_size=1, max_size=3)),
    st.tuples(st.lists(EDIT, min_size=1, max_size=3), st.lists(SPLICE, min_size=1, max_size=2)),
)
BYTES_ONLY: st.SearchStrategy[Damage] = st.tuples(
    st.just([]), st.lists(SPLICE, min_size=1, max_size=3)
)

Encode = Callable[[Any], bytes]


# libyaml's emitter when PyYAML has it: four times faster, and every example writes one.
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def yaml_documents(docs: Any) -> bytes:
    """A multi-document YAML file; a list of anything else becomes one document."""
    docs = docs if isinstance(docs, list) else [docs]
    return yaml.dump_all(docs, Dumper=DUMPER, allow_unicode=True).encode()


def yaml_document(doc: Any) -> bytes:
    return yaml.dump(doc, Dumper=DUMPER, allow_unicode=True).encode()


def json_document(doc: Any) -> bytes:
    return json.dumps(doc, indent=1).encode()


def damaged(valid: bytes, damage: Damage, doc: Any, encode: Encode | None,
            min_depth: int = 1) -> bytes:  # fmt: skip
    """``valid`` with ``damage``: the edits need it parsed (``doc``) and a way to write
    it back (``encode``); bytes-only inputs (PEM, option values) take only the splices."""
    edits, splices = damage
    data = valid
    if edits and encode is not None:
        data = encode(edited(doc, edits, min_depth))
    return spliced(data, splices)
