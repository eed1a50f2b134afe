"""The quick pass for anchor-free YAML (``verifier.inputs._tree_fits``) decides as the
graph walk of ``check_yaml_shape`` does.

Loading 10,000 rules of YAML spent 44% of its time in that walk; a text with no ``&``
defines no anchor, so its nodes form a tree and a plain count and depth decide every
limit. Here, for drawn documents and drawn limits, the quick pass lets a document
through exactly when the walk does, and when it does not, the error is the walk's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from verifier.errors import InputErrors
from verifier.inputs import Limits, _limits, check_yaml_shape, load_yaml, set_limits

scalars = st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none())
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(st.text(max_size=4), inner, max_size=6),
    ),
    max_leaves=60,
)
limits = st.builds(
    Limits,
    max_depth=st.integers(1, 12),
    max_items=st.integers(0, 8),
    alias_expansion=st.integers(0, 3),
)


@contextmanager
def limited(new: Limits) -> Iterator[None]:
    before = _limits
    set_limits(new)
    try:
        yield
    finally:
        set_limits(before)


def _verdict(node: yaml.Node, *, anchors: bool) -> str | None:
    try:
        check_yaml_shape(node, "doc.yaml", anchors=anchors)
    except InputErrors as exc:
        return repr(exc.errors)
    return None


@settings(max_examples=400, deadline=None)
@given(doc=documents, lim=limits)
def test_the_quick_pass_decides_as_the_walk(doc: Any, lim: Limits) -> None:
    text = yaml.safe_dump(doc)
    node = yaml.compose(text)
    assert node is not None
    with limited(lim):
        assert _verdict(node, anchors=False) == _verdict(node, anchors=True)


def test_a_text_with_anchors_gets_the_walk() -> None:
    """An alias bomb is only found by the walk: ``load_yaml`` must not skip it."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdef", "bcdefg", strict=True)
    )
    with pytest.raises(InputErrors) as exc:
        load_yaml(bomb, "bomb.yaml")
    assert exc.value.errors[0].code == "yaml-aliases"


def test_limits_still_bite_without_anchors() -> None:
    deep = "a:\n" + "".join("  " * i + "  b:\n" for i in range(1, 30)) + "  " * 30 + "  c: 1\n"
    with limited(Limits(max_depth=10)), pytest.raises(InputErrors) as exc:
        load_yaml(deep, "deep.yaml")
    assert exc.value.errors[0].code == "too-deep"


def test_the_quick_pass_takes_every_fixture() -> None:
    """Real files within the limits never need the walk (else nothing is saved)."""
    from conftest import FIXTURES

    from verifier.inputs import _tree_fits

    files = [p for p in sorted(FIXTURES.rglob("*.yaml")) if "invalid-" not in str(p)]
    texts = [p.read_text(encoding="utf-8") for p in files]
    nodes = [n for t in texts if "&" not in t for n in yaml.compose_all(t) if n is not None]
    assert len(nodes) > 200
    assert all(_tree_fits(n) for n in nodes)
