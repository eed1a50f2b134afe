"""The network surfaces against peers that lie, stall or flood (issue 34).

``pull --ads``, ``check --xds ads://`` and ``serve --xds ads://`` talk to an ADS
server; ``pull --admin``, ``check --xds http://`` and ``serve --xds http://`` to an
Envoy's admin endpoint; ``serve`` answers any client. Each of them met a peer that
crashed it, hung it or took gigabytes (issue 34's list): each such peer is a
regression case here, and a standing property draws a few hundred more per surface
(tests/hostile_ads.py, hostile_admin.py, hostile_clients.py have the misbehaviour;
tests/hostile_peers.py runs the tool in a bounded forked child against each and
says what must hold: exit 0/1/2, no traceback, within the deadline, bounded RSS,
nothing left behind, no key and no raw control character printed, no silent green).

The tool runs with ``--timeout 0.3 --max-input-bytes 1048576`` (and ``?timeout=0.3``
in ``--xds`` sources), so a peer that would hang it or fill memory ends fast. As
tests/test_fuzz_entry_points.py does for files, the surfaces' properties run in
forked workers, one surface per worker at a time, costliest first; derandomized
when CI=true. The counts per surface are printed at the end of the session.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Iterator
from functools import partial
from typing import Any

import hostile_admin as adm
import hostile_ads as ads
import hostile_peers as hp
import peer_surfaces as ps
import peer_words as words
import pytest
from conftest import REPO_ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from verifier.forked import ForkedCall, can_fork

DATABASE = REPO_ROOT / ".hypothesis" / "hostile-peers"


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> ps.Workspace:
    """The valid world and its xDS, every surface run once on them (warm for the forks)."""
    space = ps.workspace(tmp_path_factory.mktemp("peers"))
    ps.warm(space)
    return space


CONTROL_S = 10.0  # the deadline where a case must succeed, on however loaded a host
CASE_S = 3.0  # the deadline of a case whose bound is not the deadline


def _ads(surface: str, ws: ps.Workspace, plan: ads.AdsPlan, deadline: float = CASE_S) -> hp.Ended:
    ended, found = ps.against(ps.SURFACES[surface], ws, plan, deadline)
    hp.measured(surface, ended, found, drawn=False)
    assert not found, ps.problem_report(surface, plan, ended, found)
    return ended


def _admin(
    surface: str, ws: ps.Workspace, plan: adm.AdminPlan, deadline: float = CASE_S
) -> hp.Ended:
    ended, found = ps.against(ps.SURFACES[surface], ws, plan, deadline)
    hp.measured(surface, ended, found, drawn=False)
    assert not found, ps.problem_report(surface, plan, ended, found)
    return ended


# --- controls: honest peers are read as they are ----------------------------------------------


@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
def test_an_honest_ads_server_is_pulled_whole(ws: ps.Workspace, delta: bool) -> None:
    ended = _ads("pull --ads", ws, ads.AdsPlan(delta=delta), CONTROL_S)
    assert ended.code == 0, ended.err
    import json

    from verifier.xds.snapshot import from_config_dump

    pulled, skipped = from_config_dump(json.loads(ended.written))
    assert not skipped
    assert ads.snapshot_json(pulled) == ads.snapshot_json(ws.served.snap)
    assert _ads("check --xds ads://", ws, ads.AdsPlan(delta=delta), CONTROL_S).code == 0


def test_an_honest_admin_endpoint_is_pulled_whole(ws: ps.Workspace) -> None:
    ended = _admin("pull --admin", ws, adm.AdminPlan(), CONTROL_S)
    assert ended.code == 0, ended.err
    import json

    assert json.loads(ended.written) == ws.dump
    assert _admin("check --xds http://", ws, adm.AdminPlan(), CONTROL_S).code == 0
    served = _admin("serve --xds http://", ws, adm.AdminPlan(), CONTROL_S)
    assert served.code == 130 and "serving 1 clusters, 0 endpoints, 1 listeners" in served.err


def test_serve_gives_an_honest_client_everything(ws: ps.Workspace) -> None:
    ended, found = ps.against_clients(ws, ())
    hp.measured("serve (hostile clients)", ended, found, drawn=False)
    assert not found, found


# --- issue 34's cases: ADS ----------------------------------------------------------------------

END_OK = ads.AdsPlan(after="end", end_code="0", end_message="")


@pytest.mark.parametrize("surface", ["pull --ads", "check --xds ads://", "serve --xds ads://"])
@pytest.mark.parametrize(
    ("plan", "said"),
    [
        (END_OK, "gRPC status 0 (OK): no message"),
        (ads.AdsPlan(after="end", end_code="14", end_message="go away"), "status 14 (UNAVAILABLE)"),
        (ads.AdsPlan(after="reset"), "reset the stream"),
    ],
    ids=["status-0-no-message", "error-status", "reset"],
)
def test_a_stream_ended_early_is_exit_2_saying_how(
    ws: ps.Workspace, surface: str, plan: ads.AdsPlan, said: str
) -> None:
    """Was h2's StreamClosedError, printed as a traceback ("Task exception was never
    retrieved") after check's own error."""
    ended = _ads(surface, ws, plan)
    assert ended.code == 2 and said in ended.err and "[unreachable]" in ended.err, ended.err


BAD_ENUM = ads.Resp("resources", resources=(ads.Res("bad-enum"),))
UNKNOWN_ANY = ads.Resp("resources", resources=(ads.Res("unknown-any"),))


@pytest.mark.parametrize("surface", ["pull --ads", "check --xds ads://", "serve --xds ads://"])
@pytest.mark.parametrize(
    ("resp", "reason"),
    [(BAD_ENUM, "KeyError: 'enum'"), (UNKNOWN_ANY, "no.Such")],
    ids=["hcm-bytes-garbage", "unknown-type-url"],
)
def test_a_listener_that_does_not_decode_is_nacked_and_the_pull_fails(
    ws: ps.Workspace, surface: str, resp: ads.Resp, reason: str
) -> None:
    """Was ``KeyError: 'enum'`` (garbage HttpConnectionManager bytes) and an escaping
    XdsLoadError (an Any of an unknown type) from pull. The listener is NACKed with
    the reason; a server that never sends a good one leaves the pull incomplete."""
    plan = ads.AdsPlan(answers=(ads.HONEST, resp, resp, resp), after="end")
    ended = _ads(surface, ws, plan)
    assert ended.code == 2 and "[unreachable]" in ended.err, ended.err
    assert "; NACKed listeners: a resource" in ended.err and reason in ended.err, ended.err


def test_a_nacked_listener_then_a_good_one_is_a_complete_pull(ws: ps.Workspace) -> None:
    push = ads.Resp("push", type_choice=ads.LISTENER_TYPE)
    ended = _ads("pull --ads", ws, ads.AdsPlan(answers=(ads.HONEST, BAD_ENUM, push)), CONTROL_S)
    assert ended.code == 0, ended.err
    assert (
        "edge-verify: NACK sent for type.googleapis.com/envoy.config.listener.v3.Listener"
        in ended.err
    )


@pytest.mark.parametrize("surface", ["pull --ads", "check --xds ads://"])
def test_a_version_flood_ends_at_the_deadline(ws: ps.Workspace, surface: str) -> None:
    """5,000 RDS names, then route responses that never stop changing: killed from
    outside after minutes before; now the flood counts against --timeout."""
    plan = ads.AdsPlan(answers=(ads.HONEST, ads.Resp("flood", count=5000)), after="stall")
    ended = _ads(surface, ws, plan, ps.DEADLINE_S)
    # Whichever bound it meets first: 3,000 versions are about 1 MiB, the budget here.
    assert ended.code == 2, ended.err
    assert "[timed-out]" in ended.err or "[too-large]" in ended.err, ended.err


def test_a_trickling_ads_server_ends_at_the_deadline(ws: ps.Workspace) -> None:
    ended = _ads("pull --ads", ws, ads.AdsPlan(trickle=0.3, chunk=1), ps.DEADLINE_S)
    assert ended.code == 2 and "no complete answer within 0.3s" in ended.err, ended.err


@pytest.mark.parametrize(
    "resp", [ads.Resp("huge-prefix", data=b"x" * 4096), ads.Resp("big", count=3 << 20)],
    ids=["4GiB-length-prefix", "3MiB-resource"],
)  # fmt: skip
def test_a_message_past_the_byte_budget_is_refused_before_it_is_read(
    ws: ps.Workspace, resp: ads.Resp
) -> None:
    ended = _ads("pull --ads", ws, ads.AdsPlan(answers=(resp,)))
    assert ended.code == 2 and "[too-large]" in ended.err, ended.err
    assert "over the limit of 1,048,576 bytes (raise it with --max-input-bytes)" in ended.err


@pytest.mark.parametrize(
    "form", range(len(words.KEY_FORMS)), ids=["pem", "b64-pem", "b64-der", "hex-der"]
)
def test_a_key_in_cluster_metadata_over_ads_is_redacted(ws: ps.Workspace, form: int) -> None:
    keyed = ads.Resp("resources", resources=(ads.Res("key-metadata", which=form), ads.Res("valid")))
    ended = _ads("pull --ads", ws, ads.AdsPlan(answers=(keyed,)), CONTROL_S)
    assert ended.code == 0 and "[redacted]" in ended.written, ended.err


# --- issue 34's cases: admin ------------------------------------------------------------------

ADMIN_CASES = {
    "not-utf8": (adm.AdminPlan(body="recoded", form=2), "[encoding]"),
    "unknown-charset": (adm.AdminPlan(charset="x-unknown"), "answered in charset x-unknown"),
    "5000-digit-integer": (adm.AdminPlan(body="huge-int"), "[bad-json]"),
    "nested-600": (adm.AdminPlan(body="deep", form=0), "[too-deep]"),
    "nested-5000": (adm.AdminPlan(body="deep", form=880), "[too-deep]"),
    "wrong-type": (adm.AdminPlan(body="wrong-type", form=0, where=2), "expected a JSON array"),
    "5GB-content-length": (adm.AdminPlan(length="huge"), "a Content-Length of 5,000,000,000 bytes"),
    "endless-chunked": (adm.AdminPlan(length="endless"), "more than 1,048,576 bytes"),
    "gzip-bomb": (adm.AdminPlan(encoding="bomb"), "Content-Encoding gzip"),
    "huge-500": (adm.AdminPlan(status=500), "HTTP 500"),
    "trickle": (adm.AdminPlan(delivery="trickle"), "no complete answer within 0.3s"),
    "redirect-to-metadata": (adm.AdminPlan(status=307), "not followed"),
    "redirect-to-itself": (
        adm.AdminPlan(status=307, location="/config_dump?again"),
        "not followed",
    ),
    "no-configs": (adm.AdminPlan(body="empty-configs"), "nothing to read"),
}


@pytest.mark.parametrize("surface", ["pull --admin", "check --xds http://"])
@pytest.mark.parametrize("case", list(ADMIN_CASES))
def test_a_hostile_admin_answer_is_exit_2_naming_why(
    ws: ps.Workspace, surface: str, case: str
) -> None:
    """Each was a traceback, a hang killed from outside, gigabytes of memory, a
    redirect followed to the metadata address, or (a charset nobody knows) exit 0."""
    plan, said = ADMIN_CASES[case]
    ended = _admin(surface, ws, plan, ps.DEADLINE_S if case == "trickle" else CASE_S)
    assert ended.code == 2 and said in ended.err, ended.err


def test_serve_from_a_hostile_admin_endpoint_is_exit_2(ws: ps.Workspace) -> None:
    for plan, said in (ADMIN_CASES["5000-digit-integer"], ADMIN_CASES["wrong-type"]):
        ended = _admin("serve --xds http://", ws, plan)
        assert ended.code == 2 and said in ended.err, ended.err


@pytest.mark.parametrize("surface", ["pull --admin", "check --xds http://"])
@pytest.mark.parametrize(
    "where", range(4), ids=["metadata", "datasource-extra", "plain-string", "details"]
)
def test_a_key_anywhere_in_a_config_dump_is_never_printed_or_written(
    ws: ps.Workspace, surface: str, where: int
) -> None:
    for form in range(len(words.KEY_FORMS)):
        plan = adm.AdminPlan(body="key", where=where, form=form)
        ended = _admin(surface, ws, plan, CONTROL_S)
        assert ended.code in (0, 1), ended.err  # read; hp's checks found no key anywhere


@pytest.mark.parametrize("surface", ["pull --admin", "check --xds http://"])
def test_a_rejected_updates_details_are_printed_escaped(ws: ps.Workspace, surface: str) -> None:
    plan = adm.AdminPlan(body="details", words=words.PEER_WORDS[1])
    ended = _admin(surface, ws, plan, CONTROL_S)
    assert "\\x1b[31mred\\x1b[0m\\nedge-verify: ACK" in ended.err, ended.err


# --- timeouts mean one thing ------------------------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "0", "-1", "nan"])
def test_a_timeout_that_is_no_deadline_is_refused_alike_everywhere(
    ws: ps.Workspace, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--timeout inf`` raised OverflowError; ``0`` meant "no timeout" for --admin and
    "give up at once" for --ads. Both are refused now, the same way for every peer."""
    from verifier.cli import main

    argvs = [
        ["pull", "--ads", "127.0.0.1:1", "--node-id", "e", "--timeout", value],
        ["pull", "--admin", "http://127.0.0.1:1", "--timeout", value],
        ["check", ws.world, "--xds", f"ads://127.0.0.1:1?node=e&timeout={value}"],
        ["check", ws.world, "--xds", f"http://127.0.0.1:1?timeout={value}"],
    ]
    for argv in argvs:
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse refusing --timeout: exit 2 by design
            code = exc.code
        assert code == 2, argv
    err = capsys.readouterr().err
    assert err.count("finite number of seconds above 0") == len(argvs), err


# --- serve ------------------------------------------------------------------------------------


def test_one_clients_nack_never_changes_what_another_gets(ws: ps.Workspace) -> None:
    """After a single NACK from any client, serve never sent clusters to a later one."""
    import hostile_clients as hc

    ended, found = ps.against_clients(ws, (hc.ClientPlan("nack-all", words="no"),))
    hp.measured("serve (hostile clients)", ended, found, drawn=False)
    assert not found, found
    assert "NACK clusters" in ended.err


def test_a_client_past_the_byte_budget_is_cut_off_and_others_still_served(
    ws: ps.Workspace,
) -> None:
    import hostile_clients as hc

    ended, found = ps.against_clients(ws, (hc.ClientPlan("huge"), hc.ClientPlan("huge")))
    hp.measured("serve (hostile clients)", ended, found, drawn=False)
    assert not found, found


@pytest.mark.parametrize("kind", ["empties", "unknown-fields"])
def test_bytes_costly_to_parse_end_at_the_deadline(ws: ps.Workspace, kind: str) -> None:
    """800 KB of empty resources or of fields no table has, under the byte budget:
    seconds of parsing (minutes once: unknown fields were kept by a quadratic copy),
    which no deadline could interrupt on the loop; parsed on a thread now."""
    ended = _ads(
        "pull --ads", ws, ads.AdsPlan(answers=(ads.Resp(kind, count=400_000),)), ps.DEADLINE_S
    )
    assert ended.code == 2 and "[timed-out]" in ended.err, ended.err


def test_a_request_costly_to_parse_holds_no_other_client_up(ws: ps.Workspace) -> None:
    import hostile_clients as hc

    plans = (hc.ClientPlan("heavy", count=20_001), hc.ClientPlan("heavy", count=20_000))
    ended, found = ps.against_clients(ws, plans)
    hp.measured("serve (hostile clients)", ended, found, drawn=False)
    assert not found, found


def test_a_clients_words_are_printed_escaped(ws: ps.Workspace) -> None:
    import hostile_clients as hc

    said = words.PEER_WORDS[1]
    plans = (hc.ClientPlan("nack-all", words=said), hc.ClientPlan("node-text", words=said))
    ended, found = ps.against_clients(ws, plans)
    hp.measured("serve (hostile clients)", ended, found, drawn=False)
    assert not found, found  # no raw control character, no forged line
    assert "\\x1b[31mred\\x1b[0m\\nedge-verify: ACK clusters version forged" in ended.err


# --- the standing property ----------------------------------------------------------------------

# Seconds each surface's examples took one after another on the 2-core machine (measured
# 2026-12-04): only the order the workers take them in (costliest first) depends on it.
MEASURED_S = {
    "pull --ads": 40.0,
    "pull --admin": 40.0,
    "check --xds ads://": 20.0,
    "check --xds http://": 20.0,
    "serve (hostile clients)": 15.0,
    "serve --xds ads://": 8.0,
    "serve --xds http://": 8.0,
}


def _strategy(surface: ps.Surface) -> Any:
    import hostile_clients as hc

    return {"ads": ads.PLANS, "admin": adm.PLANS, "clients": hc.CLIENTS}[surface.peer]


def _one(surface: ps.Surface, ws: ps.Workspace, plan: Any) -> None:
    if surface.peer == "clients":
        ended, found = ps.against_clients(ws, plan)
    else:
        ended, found = ps.against(surface, ws, plan)
    hp.measured(surface.name, ended, found)
    assert not found, ps.problem_report(surface.name, plan, ended, found)


WORKERS = 3  # most of a run is waiting for a deadline: 3 workers keep 2 cores busy


def _run_property(ws: ps.Workspace, derandomize: bool, name: str) -> str | None:
    """``name``'s property to the end wherever this runs (a worker, or here): its
    failure as Hypothesis reported it, None when every peer held."""
    surface = ps.SURFACES[name]
    database = None if derandomize else DirectoryBasedExampleDatabase(DATABASE / name)

    @settings(
        max_examples=surface.examples,
        deadline=None,
        derandomize=derandomize,
        database=database,
        suppress_health_check=list(HealthCheck),
    )
    @given(plan=_strategy(surface))
    def holds(plan: Any) -> None:
        _one(surface, ws, plan)

    try:
        holds()
    except Exception as exc:
        return "".join(traceback.format_exception(exc))
    return None


Shard = tuple[dict[str, str | None], hp.Tallies]


def _run_shard(ws: ps.Workspace, derandomize: bool, names: list[str]) -> Shard:
    """Some surfaces' properties, and what was counted running them (a worker's
    counts go back with its answer, so the caller adds them once)."""
    before = hp.tallies()
    failures = {name: _run_property(ws, derandomize, name) for name in names}
    return failures, hp.since(before)


def _shards(names: list[str]) -> list[list[str]]:
    """The surfaces in ``WORKERS`` groups of about equal measured cost."""
    groups: list[list[str]] = [[] for _ in range(WORKERS)]
    cost = [0.0] * WORKERS
    for name in sorted(names, key=lambda n: -MEASURED_S.get(n, 0.0)):
        least = cost.index(min(cost))
        groups[least].append(name)
        cost[least] += MEASURED_S.get(name, 0.0)
    return [g for g in groups if g]


@pytest.fixture(scope="module", autouse=True)
def _started(request: pytest.FixtureRequest, ws: ps.Workspace) -> Iterator[list[Any]]:
    """The selected surfaces' properties, started in forked workers as the module
    starts, so that they run while the cases above run here; collected at the end."""
    wanted = sorted(
        {
            item.callspec.params["name"]
            for item in request.session.items
            if getattr(item, "module", None) is request.module
            and getattr(item, "originalname", "") == "test_hostile_peers_end_in_a_report_or_exit_2"
        }
    )
    derandomize = os.environ.get("CI") == "true"
    if not wanted or not can_fork():
        yield [(names, None) for names in ([wanted] if wanted else [])]
        return
    calls = [
        (names, ForkedCall(partial(_run_shard, ws, derandomize, names)))
        for names in _shards(wanted)
    ]
    try:
        yield calls
    finally:
        for _, call in calls:
            call.close()


@pytest.fixture(scope="module")
def properties(_started: list[Any], ws: ps.Workspace) -> dict[str, str | None]:
    """Each property's failure (None: every peer held), the workers' counts added here."""
    derandomize = os.environ.get("CI") == "true"
    started = time.monotonic()
    ended: dict[str, str | None] = {}
    for names, call in _started:
        answered, shard = call.result() if call is not None else (False, None)
        if answered and shard is not None:
            failures, counted = shard
            hp.add(counted)
        else:  # no worker (or it died): run them here, where a failure shows
            failures, _ = _run_shard(ws, derandomize, names)
        ended.update(failures)
    waited = time.monotonic() - started
    print(f"\n{len(ended)} surfaces' properties collected, {waited:.1f}s after the cases")
    return ended


@pytest.mark.parametrize("name", list(ps.SURFACES))
def test_hostile_peers_end_in_a_report_or_exit_2(
    name: str, properties: dict[str, str | None]
) -> None:
    failure = properties[name]
    if failure is not None:
        pytest.fail(f"{name}:\n{failure}", pytrace=False)
