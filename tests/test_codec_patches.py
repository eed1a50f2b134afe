"""verifier.xds.codec's betterproto2 patches give what betterproto2's originals give."""

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
from test_codec import _submessages

from verifier.xds import codec
from verifier.xds.snapshot import KINDS, load_path

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

    level: int = betterproto2.field(1, betterproto2.TYPE_ENUM, default_factory=_warning_zero)
    raw: Any = betterproto2.field(  # noqa: RUF009
        2, betterproto2.TYPE_ENUM, default_factory=bytearray
    )
    tags: list[str] = betterproto2.field(  # noqa: RUF009
        3, betterproto2.TYPE_STRING, repeated=True
    )


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
        msg.level, msg.tags = 2, ["a"]
        assert bytes(msg) == b"\x08\x02\x1a\x01a" and msg
