"""Witnesses stamped with their destination as they are kept are the witnesses
stamped afterwards: same requests, same order, on every fixture."""

from __future__ import annotations

import dataclasses

import pytest
from test_parallel_check import all_contexts

from verifier.semantics import witness as wt
from verifier.semantics.request import ClientCert, Request, evolve


def test_stamped_as_kept_equals_stamped_after() -> None:
    compared = 0
    for ctx in all_contexts():
        after = [ctx._sent(w) for w in wt.witnesses(ctx.res, ctx.controller_name)]
        kept = wt.witnesses(ctx.res, ctx.controller_name, sent=ctx.sent)
        assert kept == after
        assert [w.note for w in kept] == [w.note for w in after]  # same witness kept
        compared += len(kept)
    assert compared > 1_000


def test_stamping_changes_requests() -> None:
    """The comparison above is not vacuous: stamping gives most requests an address."""
    ctx = next(c for c in all_contexts() if c.addresses)
    kept = wt.witnesses(ctx.res, ctx.controller_name, sent=ctx.sent)
    assert sum(w.request.address != "" for w in kept) > len(kept) // 2


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"address": "10.0.0.1"},
        {"host": "a.example:8080", "proxy_port": 10080},
        {"client_cert": ClientCert("ab" * 32), "headers": (("x", ("1",)),)},
    ],
)
def test_evolve_on_slotted_dataclasses_is_replace(changes: dict[str, object]) -> None:
    request = Request(method="POST", host="b.example", path="/p?q=1", sni="b.example")
    assert not hasattr(request, "__dict__")
    assert evolve(request, **changes) == dataclasses.replace(request, **changes)  # type: ignore[arg-type]
    w = wt.Witness(("ns", "gw"), request, wt.HOST, note="n")
    moved = evolve(w, request=evolve(request, **changes))
    assert moved == dataclasses.replace(w, request=dataclasses.replace(request, **changes))  # type: ignore[arg-type]
    assert w.request is request  # the original is untouched


def test_evolve_refuses_a_field_the_class_does_not_have() -> None:
    """As ``dataclasses.replace`` does: a misspelt field must not be dropped silently."""
    request = Request(host="b.example")
    with pytest.raises(TypeError, match="adress"):
        evolve(request, adress="10.0.0.1")
    with pytest.raises(TypeError, match="adress"):
        dataclasses.replace(request, adress="10.0.0.1")  # type: ignore[call-arg]
