"""A check reads records exactly as it reads messages.

``check --xds`` decodes the file into records (verifier.xds.records) and the Envoy model
and the rules read them through the messages' attribute names and verifier.xds.read;
the translator, the ADS server and the mutation engine make messages. Proved here on
every fixture and its foreign re-encoding (every rule's findings, and every witness's
evaluation with its trace: enum numbers and names print alike), and on the mutation
engine's mutants of every fixture (every rule's findings and the bootstrap Envoy
is asked about on a fifth of them, the model's answer to every witness on half
of them): a check on the records of a snapshot finds exactly what a check on its
messages finds.
"""

from __future__ import annotations

import dataclasses

import pytest
from conftest import as_records
from foreign import reencode
from test_parallel_check import all_contexts
from verifier.rules import RULES

from verifier import check
from verifier.mutate.catalog import mutants
from verifier.registry import Rule, run
from verifier.xds import read
from verifier.xds.snapshot import bootstrap_for_validation


@pytest.fixture(scope="module")
def contexts() -> list[check.Context]:
    return all_contexts()


def _on(ctx: check.Context, snap: object) -> check.Context:
    return dataclasses.replace(ctx, snapshot=snap)


def _findings(ctx: check.Context, rules: tuple[Rule, ...] = tuple(RULES)) -> list[object]:
    return [dataclasses.asdict(f) for f in run(rules, ctx).findings]


# Envoy's own verdict (a process per run) is compared on the fixtures; on the mutants,
# what it is asked about is: the bootstrap written for it, the same JSON either way.
WITHOUT_ENVOY = tuple(r for r in RULES if r.name != "envoy-accepts-config")


def _records_only(ctx: check.Context) -> int:
    snap = ctx.snapshot
    resources = (*snap.clusters, *snap.endpoints, *snap.listeners, *snap.routes, *snap.secrets)
    assert all(read.is_record(r) for r in resources)
    return len(resources)


def test_every_fixture_is_judged_alike(contexts: list[check.Context]) -> None:
    judged = 0
    for ctx in contexts:
        for messages in (ctx, _on(ctx, reencode(ctx.snapshot, ctx.res))):
            records = _on(messages, as_records(messages.snapshot))
            _records_only(records)
            assert _findings(records) == _findings(messages), ctx.res
            for w in messages.witnesses:
                want, got = messages.envoy.evaluate(w.request), records.envoy.evaluate(w.request)
                assert (got.outcome, got.trace) == (want.outcome, want.trace), w
                judged += 1
    assert judged > 4000


def test_every_mutant_is_judged_alike(contexts: list[check.Context]) -> None:
    mutated = ruled = 0
    for ctx in contexts:
        for i, mutant in enumerate(mutants(ctx.snapshot)):
            messages = _on(ctx, mutant.snapshot)
            records = _on(ctx, as_records(mutant.snapshot))
            if (messages.models_problem is None) != (records.models_problem is None):
                raise AssertionError((mutant.operator, messages.models_problem))
            if messages.models_problem is None and i % 2 == 0:  # half of them: the time
                for w in ctx.witnesses:
                    want = messages.envoy.evaluate(w.request, trace=False).outcome
                    assert records.envoy.evaluate(w.request, trace=False).outcome == want
            if i % 5 == 0:  # every rule on a fifth of them, every operator: the suite's time
                assert _findings(records, WITHOUT_ENVOY) == _findings(messages, WITHOUT_ENVOY)
                want = bootstrap_for_validation(messages.snapshot)
                assert bootstrap_for_validation(records.snapshot) == want, mutant.operator
                ruled += 1
            mutated += 1
    assert mutated > 3000
    assert ruled > 600
