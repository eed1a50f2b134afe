"""The quick pass over parsed JSON (``verifier.inputs._json_fits``) decides as the
value-by-value walk of ``check_json_shape`` does.

The walk took 0.37 s on the xDS of 10,000 rules; the quick pass visits containers
only, a level at a time (0.11 s). For drawn documents and drawn limits, a document
passes exactly when the walk lets it, and when it does not, the error is the walk's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_yaml_shape_trees import documents, limited

from verifier import inputs
from verifier.errors import InputErrors
from verifier.inputs import Limits, check_json_shape, load_json

limits = st.builds(
    Limits,
    max_depth=st.integers(0, 10),
    max_items=st.integers(0, 7),
)


def _verdict(doc: Any) -> str | None:
    try:
        check_json_shape(doc, "doc.json")
    except InputErrors as exc:
        return repr(exc.errors)
    return None


@settings(max_examples=500, deadline=None)
@given(doc=documents, lim=limits)
def test_the_quick_pass_decides_as_the_walk(doc: Any, lim: Limits) -> None:
    doc = json.loads(json.dumps(doc))  # as load_json has it
    with limited(lim):
        quick = _verdict(doc)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(inputs, "_json_fits", lambda _doc: False)  # always walk
            walked = _verdict(doc)
    assert quick == walked


@settings(max_examples=300, deadline=None)
@given(doc=documents, lim=limits)
def test_the_line_finder_agrees_on_whether_a_limit_is_passed(doc: Any, lim: Limits) -> None:
    """Re-read for the line of the value past a limit, the text finds one exactly
    when the walk does, of a kind the walk finds somewhere, on a line of the text."""
    doc = json.loads(json.dumps(doc))
    text = json.dumps(doc, indent=1)
    with limited(lim):
        found = inputs._shape_line(text)
        walked = {
            "too-deep" if level > lim.max_depth else "too-long"
            for value, level in inputs._values(doc)
            if level > lim.max_depth
            or (isinstance(value, dict | list) and len(value) > lim.max_items)
        }
    if lim.max_depth < 1:  # the document itself is too deep: the walk says line 1
        return
    assert (found is not None) == bool(walked), (found, walked)
    if found is not None:
        code, _, line = found
        assert code in walked and 1 <= line <= text.count("\n") + 1


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("[" * 5 + "]" * 5, "too-deep"),
        ("[1, 2, 3, 4]", "too-long"),
        ('{"a": {"b": [1, 2, 3, 4]}}', "too-long"),
        ('{"a": {"b": {"c": {"d": {"e": 1}}}}}', "too-deep"),
    ],
)
def test_limits_still_bite(text: str, code: str) -> None:
    with limited(Limits(max_depth=4, max_items=3)), pytest.raises(InputErrors) as exc:
        load_json(text, "doc.json")
    assert exc.value.errors[0].code == code


def test_within_the_limits_passes() -> None:
    with limited(Limits(max_depth=4, max_items=3)):
        assert load_json('{"a": {"b": [1, 2, {}]}}', "doc.json") is not None
