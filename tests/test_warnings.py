"""Deprecations: none from our code, and the one of envoy-data-plane's generated code
silenced precisely (pyproject.toml's ``filterwarnings`` says why).

A deprecated API we call warns from our module (pydantic and the standard library warn
at their caller), and the project's pytest configuration makes that an error, so the
test that meets it fails rather than adding a line to a summary nobody reads. These
tests hold that configuration, as pytest applies it to every test.
"""

from __future__ import annotations

import warnings

import pytest

# pydantic's words, as envoy-data-plane's modules make it say them on import.
THIRD_PARTY = (
    "Using `@model_validator` with mode='after' on a classmethod is deprecated. "
    "Instead, use an instance method."
)


def _warn(message: str, category: type[Warning], module: str) -> None:
    """A warning as raised in ``module`` (how filters see where it comes from)."""
    filename = module.replace(".", "/") + ".py"
    warnings.warn_explicit(message, category, filename, 1, module=module, registry={})


@pytest.mark.parametrize("category", [DeprecationWarning, PendingDeprecationWarning])
@pytest.mark.parametrize("module", ["verifier.xds.codec", "verifier.rules.no_orphan_clusters"])
def test_a_deprecation_in_our_code_fails_the_test(category: type[Warning], module: str) -> None:
    with pytest.raises(category):
        _warn("this API is deprecated", category, module)


def test_only_envoy_data_planes_own_deprecation_is_silenced() -> None:
    with warnings.catch_warnings(record=True) as seen:
        _warn(THIRD_PARTY, DeprecationWarning, "envoy_data_plane.envoy.type.matcher.v3")
    assert seen == []
    # The same words from our code, or another deprecation from theirs, still count.
    with pytest.raises(DeprecationWarning):
        _warn(THIRD_PARTY, DeprecationWarning, "verifier.xds.codec")
    with warnings.catch_warnings(record=True) as seen:
        _warn("another API is deprecated", DeprecationWarning, "envoy_data_plane.envoy")
    assert [str(w.message) for w in seen] == ["another API is deprecated"]
