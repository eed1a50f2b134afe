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
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import as_records
from foreign import reencode
from test_check_cli import CLI, cli  # noqa: F401
from test_parallel_check import FIXTURES, all_contexts
from verifier.rules import RULES

from verifier import check
from verifier.forked import map_forked
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


def _fixture_judged_alike(ctx: check.Context) -> int:
    judged = 0
    for messages in (ctx, _on(ctx, reencode(ctx.snapshot, ctx.res))):
        records = _on(messages, as_records(messages.snapshot))
        _records_only(records)
        assert _findings(records) == _findings(messages), ctx.res
        for w in messages.witnesses:
            want, got = messages.envoy.evaluate(w.request), records.envoy.evaluate(w.request)
            assert (got.outcome, got.trace) == (want.outcome, want.trace), w
            judged += 1
    return judged


def test_every_fixture_is_judged_alike(contexts: list[check.Context]) -> None:
    # One fixture per forked worker: a failure is raised here again, as in a loop.
    assert sum(map_forked(_fixture_judged_alike, contexts, min_items=2)) > 4000


def _mutants_judged_alike(ctx: check.Context) -> tuple[int, int]:
    mutated = ruled = 0
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
    return mutated, ruled


def test_every_mutant_is_judged_alike(contexts: list[check.Context]) -> None:
    counts = list(map_forked(_mutants_judged_alike, contexts, min_items=2))
    assert sum(m for m, _ in counts) > 3000
    assert sum(r for _, r in counts) > 600


def _first(doc: Any, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first JSON object, depth first, that ``pred`` takes."""
    todo = [doc]
    while todo:
        node = todo.pop(0)
        if isinstance(node, dict):
            if pred(node):
                return node
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    raise AssertionError("no such object")


def _route(d: dict[str, Any]) -> bool:
    return "match" in d and isinstance(d.get("route"), dict)


# A number an enum does not define: the records decoder declines the resource, and the
# message decoder keeps the number (envoy-data-plane's enums are open). Each once broke
# a rule or the model that turned it into one of verifier.xds.enums' closed enums.
UNDEFINED_ENUMS: dict[str, tuple[str, Callable[[Any], None]]] = {
    "escaped slashes action": (
        "httproute-header-matching",
        lambda doc: _first(doc, lambda d: str(d.get("@type", "")).endswith("Manager")).update(
            path_with_escaped_slashes_action=9
        ),
    ),
    "cluster type": (
        "httproute-header-matching",
        lambda doc: _first(doc, lambda d: "connect_timeout" in d).update(type=42),
    ),
    "cluster_not_found_response_code": (
        "httproute-weighted-backends",
        lambda doc: _first(doc, _route)["route"].update(cluster_not_found_response_code=7),
    ),
    "request header append_action": (
        "httproute-request-header-modifier",
        lambda doc: _first(doc, lambda d: "request_headers_to_add" in d)["request_headers_to_add"][
            0
        ].update(append_action=9),
    ),
    "response header append_action": (
        "httproute-response-header-modification",
        lambda doc: _first(doc, lambda d: "response_headers_to_add" in d)[
            "response_headers_to_add"
        ][0].update(append_action=9),
    ),
    "SAN type": (
        "httproute-mesh-backend",
        lambda doc: _first(doc, lambda d: "san_type" in d).update(san_type=9),
    ),
}


@pytest.mark.parametrize("case", sorted(UNDEFINED_ENUMS))
def test_an_undefined_enum_number_is_a_report_not_a_crash(
    case: str,
    cli: CLI,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Found by a differential trial of check --xds before and after records."""
    scenario, edit = UNDEFINED_ENUMS[case]
    base, here = str(FIXTURES / "base"), str(FIXTURES / scenario)
    assert cli("translate", base, here, "-o", str(tmp_path / "x.json")).rc == 0
    doc = json.loads((tmp_path / "x.json").read_text())
    edit(doc)
    (tmp_path / "x.json").write_text(json.dumps(doc))
    run = cli("check", base, here, "--xds", str(tmp_path / "x.json"), "--format", "json")
    assert run.rc in (0, 1), run.err
    assert run.json()["summary"]
