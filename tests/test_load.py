"""Tests for verifier.gatewayapi.load: values as PyYAML constructs them, and the line table."""

from __future__ import annotations

import datetime
import pickle

import pytest
import yaml

from verifier.gatewayapi import load
from verifier.gatewayapi.load import load_texts

# Plain scalars of every implicit type, the same texts quoted and tagged, and repeats
# (the composer remembers tags per text: a repeat must resolve as the first one did).
TRICKY = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: tricky
data:
  plain: [a, 1, -2, 0x1f, 0o17, 1_000, 1.5, .inf, -.Inf, .nan, true, False, yes, ~, null, '']
  quoted: ['1', "true", '~', 'null', "1.5", '2024-01-02']
  tagged: [!!str 1, !!str true, !!int "7", !!float "2", !!bool "true"]
  again: [1, '1', true, 'true', ~, '~', 2024-01-02, '2024-01-02', 1.5, "1.5"]
  when: 2024-01-02T03:04:05Z
  day: 2024-01-02
  blob: !!binary aGVsbG8=
  2: integer key
  true: boolean key
  ~: null key
  anchors: &a {x: 1, y: [2, three]}
  alias: *a
  multi: |
    line one
    line two
  folded: >
    folded
    text
---
kind: Second
n: 1
s: '1'
"""


def test_values_are_what_safe_load_gives() -> None:
    loaded = load_texts([("t.yaml", TRICKY)])
    assert not loaded.errors
    expected = list(yaml.safe_load_all(TRICKY))
    # Non-string keys become strings, as Kubernetes reads them.
    expected[0]["data"] = {str(k): v for k, v in expected[0]["data"].items()}
    got = [obj.data for obj in loaded.objects]
    assert repr(got) == repr(expected)  # repr: nan != nan, and bool vs int must match too
    data = got[0]["data"]
    day = datetime.date(2024, 1, 2)
    assert data["again"] == [1, "1", True, "true", None, "~", day, "2024-01-02", 1.5, "1.5"]
    assert data["blob"] == b"hello"


def test_every_field_and_item_has_its_line() -> None:
    obj = load_texts([("t.yaml", TRICKY)]).objects[0]
    assert obj.lines[""] == 1
    assert obj.lines["data.plain"] == 6
    assert obj.lines["data.plain[3]"] == 6
    assert obj.lines["data.alias"] == 17
    assert obj.lines["data.alias.y[1]"] == 16  # an alias points at the anchored node
    assert obj.lines["data.multi"] == 18
    assert obj.line_of("data.folded.nothing[2]") == 21
    second = load_texts([("t.yaml", TRICKY)]).objects[1]
    assert (second.lines[""], second.lines["s"]) == (25, 27)


def test_the_line_table_is_kept_packed_until_asked() -> None:
    """Packed, it is the same table (the builder's dict, in its order), it crosses
    a pickle (a loading child's answer) as it is, and opens only when asked."""
    tables: list[dict[str, int]] = []
    real = load.RawObject.__post_init__

    def keep(self: load.RawObject) -> None:
        tables.append(dict(self.lines))
        real(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(load.RawObject, "__post_init__", keep)
        obj = load_texts([("t.yaml", TRICKY)]).objects[0]
    built = tables[0]
    lines = obj.lines
    assert isinstance(lines, load.Lines)
    assert lines._table is None  # nothing asked yet
    assert len(built) > 30
    assert list(lines.items()) == list(built.items())
    assert lines == built and "data.plain[3]" in lines and "data.nope" not in lines
    again = pickle.loads(pickle.dumps(obj))
    assert again.lines._table is None and dict(again.lines) == built
    assert again.lines == obj.lines and repr(again.data) == repr(obj.data)  # repr: nan


@pytest.mark.parametrize(
    ("text", "line", "code"),
    [
        ("kind: A\nkind: B\n", 2, "duplicate-key"),
        # An unclosed bracket or quote is met lines later; the line is where it opened.
        ("kind: A\nx: [1,\n", 3, "yaml-syntax"),  # libyaml names no bracket here
        ('kind: A\nx: "abc\n  y: 1\n---\nkind: B\n', 2, "yaml-syntax"),
        ("kind: A\nx: {a: 1,\n  b: 2\nkind: B\n", 2, "yaml-syntax"),
        ("kind: A\nx:\n  y: 1\n z: 2\n", 4, "yaml-syntax"),  # a bad indent: its own line
        ("kind: A\nx: !!python/name:os.system\n", 2, "yaml-syntax"),
        ("- a\n- b\n", 1, "type"),
        # An explicit tag the text does not fit: PyYAML raises a plain exception.
        ("kind: A\nport: !!int nope\n", 2, "yaml-syntax"),
        ("kind: A\nx:\n  when: !!timestamp zz\n", 3, "yaml-syntax"),
        ("kind: A\nx: [!!float one]\n", 2, "yaml-syntax"),
    ],
)
def test_bad_input_is_reported_at_its_line(text: str, line: int, code: str) -> None:
    errors = load_texts([("bad.yaml", text)]).errors
    assert [(e.file, e.line, e.code) for e in errors] == [("bad.yaml", line, code)]


def test_a_badly_tagged_scalar_names_its_field_and_drops_its_document() -> None:
    result = load_texts([("bad.yaml", "kind: A\nspec:\n  port: !!int nope\n---\nkind: B\n")])
    assert [(e.line, e.field, e.message) for e in result.errors] == [
        (3, "spec.port", "invalid YAML: 'nope' is not a valid !!int")
    ]
    assert [o.kind for o in result.objects] == ["B"]


def test_constructor_keeps_no_nodes_between_scalars(monkeypatch: pytest.MonkeyPatch) -> None:
    """Non-string scalars go through PyYAML's constructor, which would otherwise keep
    every node of a file alive (and the garbage collector busy) until the file ends."""
    kept: list[int] = []
    real = load._Builder._scalar

    def spy(self: load._Builder, node: yaml.Node, path: str) -> object:
        value = real(self, node, path)
        kept.append(len(self._construct.constructed_objects))
        return value

    monkeypatch.setattr(load._Builder, "_scalar", spy)
    load_texts([("t.yaml", TRICKY)])
    assert kept and set(kept) == {0}


def test_composer_resolves_tags_as_pyyaml_does() -> None:
    def tags(loader: type) -> list[str]:
        out = []
        stack = list(yaml.compose_all(TRICKY, Loader=loader))
        while stack:
            node = stack.pop()
            out.append(node.tag)
            if isinstance(node, yaml.MappingNode):
                stack.extend(n for pair in node.value for n in pair)
            elif isinstance(node, yaml.SequenceNode):
                stack.extend(node.value)
        return out

    assert tags(load._Composer) == tags(load.COMPOSER) == tags(yaml.SafeLoader)
