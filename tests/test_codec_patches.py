"""verifier.xds.codec's betterproto2 patches give what betterproto2's originals give."""

# betterproto2 declares fields by calling betterproto2.field in dataclass defaults.
# ruff: noqa: RUF009

from __future__ import annotations

import copy
import dataclasses
import inspect
import warnings
from typing import Any

import betterproto2
import pydantic
import pytest
from conftest import FIXTURES
from envoy_data_plane.envoy.config.route.v3 import RouteAction, RouteMatch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_codec import _submessages

from verifier.xds import codec
from verifier.xds.snapshot import KINDS, load_path

_F = betterproto2.field
SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "xds.routes.golden.json").is_file())


def _fixture_messages(scenario: str) -> list[betterproto2.Message]:
    snap, _ = load_path(FIXTURES / scenario)
    return [m for kind in KINDS for top in getattr(snap, kind) for m in _submessages(top)]


@pytest.mark.parametrize("scenario", SCENARIOS[:: max(1, len(SCENARIOS) // 6)])
def test_defaults_equal_the_originals(scenario: str) -> None:
    original = codec.original("_get_field_default")
    seen = 0
    for msg in _fixture_messages(scenario):
        for name in msg._betterproto.meta_by_field_name:
            want, got, again = (
                original(msg, name),
                msg._get_field_default(name),
                msg._get_field_default(name),
            )
            assert type(got) is type(want) and got == want, (type(msg), name)
            if isinstance(want, list | dict):  # mutable: never shared between calls
                assert got is not again
                got.append(1) if isinstance(got, list) else got.update({1: 1})
                assert msg._get_field_default(name) == want
            seen += 1
    assert seen > 100


def _unpatch(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in codec.PATCHES:
        unpatched = codec.original(name)
        if isinstance(inspect.getattr_static(betterproto2.Message, name), classmethod):
            unpatched = classmethod(unpatched)
        monkeypatch.setattr(betterproto2.Message, name, unpatched)


@pytest.mark.parametrize("scenario", SCENARIOS[1 :: max(1, len(SCENARIOS) // 6)])
def test_messages_behave_as_unpatched(scenario: str, monkeypatch: pytest.MonkeyPatch) -> None:
    messages = _fixture_messages(scenario)
    # Schemas are built on first use (verifier/_deferred.py), and the unpatched
    # construction asks pydantic for one: build them, so that the test does not
    # depend on which test ran first.
    for cls in {type(m) for m in messages}:
        pydantic.dataclasses.rebuild_dataclass(cls, force=True)

    def observe() -> list[Any]:
        return [
            (
                bytes(m),
                bool(m),
                repr(m),
                [m.is_set(f) for f in m._betterproto.sorted_field_names],
                m._is_pydantic(),
                copy.copy(m) == m,  # construction runs the oneof check
                type(m)._validate_field_groups(m) is m,
            )
            for m in messages
        ]

    patched = observe()
    _unpatch(monkeypatch)
    assert observe() == patched
    assert len(patched) > 20


@pytest.mark.parametrize(
    "make",
    [
        lambda: RouteMatch(prefix="/", path="/x"),
        lambda: RouteMatch(prefix="/", path="/x", safe_regex=None),
        lambda: RouteAction(cluster="a", cluster_header="b"),
    ],
)
def test_a_broken_oneof_fails_as_unpatched(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pydantic.ValidationError) as patched:
        make()
    _unpatch(monkeypatch)
    with pytest.raises(pydantic.ValidationError) as unpatched:
        make()
    flags: dict[str, bool] = {"include_url": False, "include_context": False}
    assert patched.value.errors(**flags) == unpatched.value.errors(**flags)
    assert "more than one value" in str(patched.value)


def test_a_broken_oneof_found_by_validate_fails_as_unpatched() -> None:
    match = RouteMatch(prefix="/")
    assert RouteMatch._validate_field_groups(match) is match
    match.path = "/both"
    with pytest.raises(ValueError, match="more than one value") as patched:
        RouteMatch._validate_field_groups(match)
    with pytest.raises(ValueError) as unpatched:
        codec.original("_validate_field_groups")(RouteMatch, match)
    assert str(patched.value) == str(unpatched.value)


def test_deprecated_fields_still_warn_from_post_init() -> None:
    """``is_set`` in a generated ``__post_init__`` decides whether to warn; it still does."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RouteAction(cluster="c")
        RouteMatch(prefix="/")
        assert caught == []
        RouteAction(cluster="c", max_internal_redirects=3)
    assert [str(w.message) for w in caught] == ["RouteAction.max_internal_redirects is deprecated"]


def _warning_zero() -> int:
    warnings.warn("default of a deprecated field", DeprecationWarning, stacklevel=2)
    return 0


@dataclasses.dataclass(eq=False, repr=False)
class _Odd(betterproto2.Message):
    """A message whose defaults betterproto2's generator never writes (only enum fields take
    a factory): one factory warns, one gives a mutable value of an unusual type."""

    level: int = _F(1, "enum", default_factory=_warning_zero)
    raw: Any = _F(2, "enum", default_factory=bytearray)
    tags: list[str] = _F(3, "string", repeated=True)


def test_warnings_of_default_factories_stay_suppressed_and_odd_defaults_fresh() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        msg = _Odd()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a DeprecationWarning escaping would raise here
        assert msg._get_field_default("level") == 0
        assert msg._get_field_default("level") == 0
        first, second = msg._get_field_default("raw"), msg._get_field_default("raw")
        assert first == second == bytearray() and first is not second
        assert msg._get_field_default("tags") == []
        assert bytes(msg) == b"" and not msg
        assert codec._PLANS[_Odd] is None  # an unusual default: the original encodes it
        msg.level, msg.tags = 2, ["a"]
        assert bytes(msg) == b"\x08\x02\x1a\x01a" and msg


# --- binary encoding ------------------------------------------------------------------------


class _Colour(betterproto2.Enum):
    RED = 0
    GREEN = 1
    BLUE = 300


@dataclasses.dataclass(eq=False, repr=False)
class _Leaf(betterproto2.Message):
    text: str = betterproto2.field(1, betterproto2.TYPE_STRING)


@dataclasses.dataclass(eq=False, repr=False)
class _AllKinds(betterproto2.Message):
    """A field of every kind betterproto2 serialises, singly, repeated and in maps."""

    i32: int = _F(1, "int32")
    i64: int = _F(2, "int64")
    u32: int = _F(3, "uint32")
    u64: int = _F(4, "uint64")
    s32: int = _F(5, "sint32")
    s64: int = _F(6, "sint64")
    f32: int = _F(7, "fixed32")
    f64: int = _F(8, "fixed64")
    sf32: int = _F(9, "sfixed32")
    sf64: int = _F(10, "sfixed64")
    flt: float = _F(11, "float")
    dbl: float = _F(12, "double")
    flag: bool = _F(13, "bool")
    text: str = _F(14, "string")
    blob: bytes = _F(15, "bytes")
    colour: _Colour = _F(16, "enum", default_factory=lambda: _Colour(0))
    leaf: _Leaf | None = _F(17, "message", optional=True)
    maybe: int | None = _F(18, "int64", optional=True)
    packed_ints: list[int] = _F(19, "sint64", repeated=True)
    packed_doubles: list[float] = _F(20, "double", repeated=True)
    packed_colours: list[_Colour] = _F(21, "enum", repeated=True)
    texts: list[str] = _F(22, "string", repeated=True)
    leaves: list[_Leaf] = _F(23, "message", repeated=True)
    by_name: dict[str, _Leaf] = _F(24, "map", map_meta=betterproto2.map_meta("string", "message"))
    by_number: dict[int, str] = _F(25, "map", map_meta=betterproto2.map_meta("sint32", "string"))
    by_flag: dict[bool, _Colour] = _F(26, "map", map_meta=betterproto2.map_meta("bool", "enum"))
    big: int = _F(1000, "uint64")


def _int_for(kind: str) -> st.SearchStrategy[int]:
    bits = 64 if "64" in kind else 32
    if kind.startswith(("uint", "fixed")):
        return st.integers(0, 2**bits - 1)
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


_LEAF = st.builds(_Leaf, text=st.text(max_size=5))
_COLOUR = st.sampled_from(list(_Colour))
_DOUBLE = st.floats(allow_nan=True, allow_infinity=True)
_ALL_KINDS = st.builds(
    _AllKinds,
    i32=_int_for("int32"),
    i64=_int_for("int64"),
    u32=_int_for("uint32"),
    u64=_int_for("uint64"),
    s32=_int_for("sint32"),
    s64=_int_for("sint64"),
    f32=_int_for("fixed32"),
    f64=_int_for("fixed64"),
    sf32=_int_for("sfixed32"),
    sf64=_int_for("sfixed64"),
    flt=st.floats(width=32),
    dbl=_DOUBLE,
    flag=st.booleans(),
    text=st.text(max_size=200),
    blob=st.binary(max_size=300),
    colour=_COLOUR,
    leaf=st.none() | _LEAF,
    maybe=st.none() | _int_for("int64"),
    packed_ints=st.lists(_int_for("sint64"), max_size=4),
    packed_doubles=st.lists(_DOUBLE, max_size=4),
    packed_colours=st.lists(_COLOUR, max_size=4),
    texts=st.lists(st.text(max_size=3), max_size=4),
    leaves=st.lists(_LEAF, max_size=3),
    by_name=st.dictionaries(st.text(max_size=3), _LEAF, max_size=3),
    by_number=st.dictionaries(_int_for("sint32"), st.text(max_size=3), max_size=3),
    by_flag=st.dictionaries(st.booleans(), _COLOUR, max_size=2),
    big=st.integers(0, 2**64 - 1),
)


@settings(max_examples=300, deadline=None)
@given(_ALL_KINDS)
def test_bytes_of_every_field_kind_are_the_originals(msg: _AllKinds) -> None:
    assert bytes(msg) == codec.original("__bytes__")(msg)
    assert codec._PLANS[_AllKinds] is not None  # encoded by the patch, not handed back


def test_zero_values_and_unknown_fields_are_encoded_as_originally() -> None:
    zero = _AllKinds(maybe=0, leaf=_Leaf(), dbl=-0.0, packed_ints=[0], by_number={0: ""})
    assert bytes(zero) == codec.original("__bytes__")(zero)
    assert bytes(zero) != b""  # set optionals, empty messages and non-empty lists are written
    assert bytes(_AllKinds()) == b""
    parsed = _Leaf.parse(bytes(_AllKinds(text="x", big=2**63, leaves=[_Leaf(text="y")])))
    assert parsed._unknown_fields and parsed.text == ""  # _Leaf's field 1 was not in it
    assert bytes(parsed) == codec.original("__bytes__")(parsed) == parsed._unknown_fields
    parsed.text = "z"
    assert bytes(parsed) == codec.original("__bytes__")(parsed)


def test_invalid_messages_fail_before_encoding_as_originally() -> None:
    """pydantic messages are validated first by both; the error is the same."""
    route = RouteAction(cluster="c")
    route.cluster = 5  # type: ignore[assignment]
    with pytest.raises(pydantic.ValidationError) as patched:
        bytes(route)
    with pytest.raises(pydantic.ValidationError) as unpatched:
        codec.original("__bytes__")(route)
    flags: dict[str, bool] = {"include_url": False, "include_context": False}
    assert patched.value.errors(**flags) == unpatched.value.errors(**flags)
