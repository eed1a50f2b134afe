"""Drawn Gateway/HTTPRoute worlds: the translator and the spec model, written
separately, must agree on every one (``check`` finds nothing), in the reference
encoding and in another implementation's (tests/foreign.py).

The worlds are the fuzzer's (verifier/fuzz/worlds.py): one or two Gateways with
listeners on shared ports with and without hostnames (exact and wildcard),
routes whose parentRefs pick a sectionName or a port, route hostnames that do
or do not intersect, allowedRoutes from Same/All/Selector, every match kind and
filter, and several routes competing for one host. ``edge-verify fuzz`` searches
the same space for longer; this is its share on every test run.
"""

from __future__ import annotations

from hypothesis import given
from worlds import assert_fuzz_world_checks_clean, world_settings

from verifier.fuzz.worlds import World, worlds


@world_settings(50)
@given(world=worlds())
def test_translator_and_spec_model_agree_on_attachment(world: World) -> None:
    assert_fuzz_world_checks_clean(world)
