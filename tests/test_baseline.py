"""check --baseline reports exactly what a full check reports.

A baseline run skips the witnesses whose digest an earlier run recorded as agreed
(verifier.baseline). It is exact when every skipped witness would agree again, and
that is what is asserted, witness by witness, on changed configurations: every xDS
mutant of the fixtures (the translator's plausible mistakes, in the route
configuration, the clusters, the listeners), and line-for-line edits of the
fixtures' HTTPRoutes, checked both against their own translation and against the
stale xDS of the unedited YAML. The CLI tests then compare whole reports.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import astuple
from pathlib import Path

import pytest
from test_check_cli import CLI, cli  # noqa: F401
from test_parallel_check import FIXTURES, all_contexts
from verifier.rules import RULES

from verifier import baseline, check, pipeline
from verifier.gatewayapi.addresses import PER_GATEWAY, SHARED, Addressing
from verifier.mutate.catalog import mutants
from verifier.mutate.operators import clusters as cluster_operators
from verifier.xds.snapshot import Snapshot, from_config_dump, to_config_dump


def _agreed(ctx: check.Context) -> frozenset[bytes]:
    """What --save-baseline records for ``ctx``."""
    recording = dataclasses.replace(ctx, record_agreement=True)
    _ = recording.comparisons
    return recording.agreed


def _skipped_agree(
    ctx: check.Context, agreed: frozenset[bytes], snapshot: Snapshot | None = None
) -> tuple[int, int]:
    """Assert that every witness a baseline run would skip agrees on the changed
    configuration; (skipped, witnesses)."""
    changed = dataclasses.replace(ctx, snapshot=snapshot or ctx.snapshot)
    if changed.models_problem is not None:
        return 0, 0  # the model rules are skipped: nothing is compared at all
    digests = baseline.Digests(changed)
    skipped = 0
    for w in changed.witnesses:
        if digests.of(w) in agreed:
            skipped += 1
            assert changed.compare(w) is None, w
    return skipped, len(changed.witnesses)


@pytest.fixture(scope="module")
def contexts() -> list[check.Context]:
    return all_contexts()


def test_an_unchanged_configuration_skips_every_agreeing_witness(
    contexts: list[check.Context],
) -> None:
    for ctx in contexts:
        agreed = _agreed(ctx)
        rerun = dataclasses.replace(ctx, baseline=baseline.Baseline(agreed))
        assert rerun.comparisons == ctx.comparisons
        assert rerun.asked == len(ctx.comparisons)  # only the disagreeing ones again
        assert len(agreed) + len(ctx.comparisons) >= len({*ctx.witnesses}) - 1


def _as_read(snap: Snapshot) -> Snapshot:
    """``snap`` written as a config_dump and read back, as ``--xds`` reads it: its
    virtual hosts are digested as the JSON was written (Snapshot.read_as)."""
    found, _skipped = from_config_dump(json.loads(json.dumps(to_config_dump(snap))))
    vhosts = [vh for rc in found.routes for vh in rc.virtual_hosts]
    assert all(found.digest_as_read(vh) is not None for vh in vhosts)
    return found


def test_every_skipped_witness_agrees_on_every_xds_mutant(contexts: list[check.Context]) -> None:
    """The translator's plausible mistakes, one at a time: a witness whose digest did
    not change must not tell the mutant from the original. Every other scenario's xDS
    is read from JSON, so that unchanged virtual hosts are digested as read and the
    mutant's changed ones (copies) as messages."""
    mutated = skipped = total = partial = cluster_partial = 0
    for n, translated in enumerate(contexts):
        ctx = translated
        if n % 2:
            ctx = dataclasses.replace(translated, snapshot=_as_read(translated.snapshot))
        agreed = _agreed(ctx)
        for i, mutant in enumerate(mutants(ctx.snapshot)):
            if i % 3:  # a third of them, every operator: the suite's time
                continue
            s, n = _skipped_agree(ctx, agreed, mutant.snapshot)
            mutated += 1
            skipped += s
            total += n
            partial += 0 < s < n
            cluster_partial += 0 < s < n and mutant.operator in CLUSTER_OPERATORS
    assert mutated > 800
    # The digests are not all-or-nothing: most mutants leave some witnesses alone
    # (the fixtures are small: many have one virtual host, which a mutant changes).
    assert partial > mutated // 2
    assert skipped > total // 4
    # A changed cluster asks again only the requests of the virtual hosts naming it.
    assert cluster_partial > 100


_EDITS = (
    # (a line of an HTTPRoute, how to change it) -- each keeps the line count
    (re.compile(r"^(\s+(?:- )?value: )(\"?)(/[^\"\s]*)(\"?)\s*$"), r"\1\2\3x\4"),
    (re.compile(r"^(\s+- )(\"?)([a-z0-9.*-]+\.[a-z]+)(\"?)\s*$"), r"\1\2edited.\3\4"),
    (re.compile(r"^(\s+weight: )(\d+)\s*$"), r"\g<1>7"),
    (re.compile(r"^(\s+(?:- )?type: )(PathPrefix)\s*$"), r"\1Exact"),
    (re.compile(r"^(\s+(?:- )?name: )([a-z][a-z0-9-]*)\s*$"), r"\1\2-edited"),
)


_BACKEND_EDITS = (
    # (a line of a Service, EndpointSlice or workload, how to change it)
    (re.compile(r"^(\s+(?:- )?port: )(\d+)\s*$"), r"\g<1>9191"),
    (re.compile(r"^(\s+targetPort: )(\d+)\s*$"), r"\g<1>3001"),
    (re.compile(r"^(\s+clusterIP: )(\S+)\s*$"), r"\g<1>10.96.99.99"),
    (re.compile(r"^(\s+- )(10\.244\.\d+\.\d+)\s*$"), r"\g<1>10.244.99.99"),
    (re.compile(r"^(\s+ready: )true\s*$"), r"\g<1>false"),
    (re.compile(r"^(\s+replicas: )(\d+)\s*$"), r"\g<1>0"),
    (re.compile(r"^(\s+appProtocol: )(\S+)\s*$"), r"\g<1>kubernetes.io/h2c"),
)
BACKEND_KINDS = ("Service", "EndpointSlice", "Deployment", "StatefulSet", "DaemonSet")


def _line_edits(
    text: str,
    most: int = 8,
    kinds: tuple[str, ...] = ("HTTPRoute",),
    edits: tuple[tuple[re.Pattern[str], str], ...] = _EDITS,
) -> list[str]:
    """The file with one line of an object of ``kinds`` changed, for lines an edit
    applies to (at most ``most``, spread over the file)."""
    lines = text.splitlines(keepends=True)
    kind = ""
    sites: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        if line.startswith("kind:"):
            kind = line.split(":", 1)[1].strip()
        if kind not in kinds:
            continue
        for pattern, repl in edits:
            if pattern.match(line):
                sites.append((i, pattern.sub(repl, line.rstrip("\n")) + "\n"))
                break
    step = max(1, len(sites) // most)
    return ["".join([*lines[:i], edited, *lines[i + 1 :]]) for i, edited in sites[::step][:most]]


def _changed_line(before: str, after: str) -> str:
    return next(b for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b)


SCENARIOS = (
    "httproute-matching-precedence",
    "httproute-hostname-intersection",
    "httproute-weighted-backends",
    "httproute-path-prefix-matching",
    "gateway-http-listener-isolation",
    "httproute-header-matching",
    "httproute-request-redirect",
    "httproute-multiple-parent-refs",
    "listener-set",
)


def _edited(
    tmp_path: Path,
    scenarios: tuple[str, ...],
    files: Callable[[Path], list[Path]],
    edits: Callable[[str], list[str]],
    options: pipeline.CheckOptions | None = None,
) -> tuple[int, int]:
    """Each scenario saved (what agreed), then each edit of each of its ``files``: every
    request a baseline run would skip is asked and agrees, against the edited YAML's
    own translation and against the unedited YAML's xDS, as a translator that missed
    the change would serve. (edits made, edits that left some requests unasked)"""
    options = options or OPTIONS
    shutil.copytree(FIXTURES / "base", tmp_path / "base")
    made = partial = 0
    for name in scenarios:
        shutil.copytree(FIXTURES / name, tmp_path / name)
        (scn,) = [s for s in pipeline.discover([str(tmp_path)], options) if s.name == name]
        original, _ = pipeline.prepare(scn, options)
        assert original is not None
        agreed = _agreed(original)
        for path in files(tmp_path / name):
            text = path.read_text()
            for edited in edits(text):
                path.write_text(edited)
                try:
                    ctx, _result = pipeline.prepare(scn, options)
                finally:
                    path.write_text(text)
                if ctx is None:
                    continue  # the edit made the YAML invalid: nothing to compare
                made += 1
                _skipped_agree(ctx, agreed)  # its own translation
                s, n = _skipped_agree(ctx, agreed, original.snapshot)  # the stale xDS
                partial += 0 < s < n
        shutil.rmtree(tmp_path / name)
    return made, partial


def test_every_skipped_witness_agrees_after_a_route_edit(tmp_path: Path) -> None:
    """Line-for-line HTTPRoute edits: a path, a hostname, a weight, a match type, a
    backend."""
    edits, partial = _edited(
        tmp_path, SCENARIOS, lambda scenario: [scenario / "resources.yaml"], _line_edits
    )
    assert edits > 5 * len(SCENARIOS)
    assert partial > edits // 2


OPTIONS = pipeline.CheckOptions()
CLUSTER_OPERATORS = frozenset(op.name for op in cluster_operators.OPERATORS)
SIMPLE = (str(FIXTURES / "base"), str(FIXTURES / "httproute-simple-same-namespace"))


BACKEND_SCENARIOS = (
    "httproute-simple-same-namespace",
    "httproute-weighted-backends",
    "httproute-cross-namespace",
    "httproute-backend-protocol-h2c",
    "httproute-destination-port-matching",
    "httproute-mesh-backend",
    "httproute-hostname-intersection",
)


def test_every_skipped_witness_agrees_after_a_backend_edit(tmp_path: Path) -> None:
    """Services, EndpointSlices and workloads are digested per request (those its
    routes' backendRefs name and its clusters' endpoints reach): line-for-line edits
    of them (a port, a targetPort, a clusterIP, an endpoint address, readiness,
    replicas, appProtocol), in base/ and in the scenarios."""
    edits, partial = _edited(
        tmp_path,
        BACKEND_SCENARIOS,
        lambda scenario: [scenario.parent / "base" / "backends.yaml", scenario / "resources.yaml"],
        lambda text: _line_edits(text, 6, BACKEND_KINDS, _BACKEND_EDITS),
    )
    assert edits > 40
    # Most fixtures send every host to the same few backends: an edit of one asks
    # again nearly everything; where hosts have backends of their own, not.
    assert partial > 5


_GATEWAY_EDITS = (
    # (a line of a Gateway, how to change it)
    (re.compile(r"^(\s+port: )(\d+)\s*$"), r"\g<1>9393"),
    (re.compile(r"^(\s+hostname: )(\"?)([a-z0-9.*-]+)(\"?)\s*$"), r"\1\2edited.\3\4"),
    (re.compile(r"^(\s+from: )Same\s*$"), r"\g<1>All"),
    (re.compile(r"^(\s+from: )All\s*$"), r"\g<1>Same"),
    (re.compile(r"^(\s+- name: )([a-z][a-z0-9-]*)\s*$"), r"\1\2-edited"),
)
GATEWAY_SCENARIOS = (
    "gateway-multiple-gateways-same-port",
    "gateway-multiple-gateways-same-hostname",
    "gateway-http-listener-isolation",
    "httproute-multiple-parent-refs",
    "gateway-allowed-routes-namespace-selector",
    "listener-set",
)


@pytest.mark.parametrize("mode", [PER_GATEWAY, SHARED])
def test_every_skipped_witness_agrees_after_a_gateway_edit(tmp_path: Path, mode: str) -> None:
    """Gateways (with their ListenerSets) are digested per request (the one it is sent
    to, and those sharing its address) and listeners per destination: line-for-line
    edits of Gateways and ListenerSets (a port, a hostname, allowedRoutes, a
    listener's name), in base/ and in the scenarios, with an address per Gateway and
    with one address for all."""
    options = pipeline.CheckOptions(addressing=Addressing(mode=mode))
    edits, partial = _edited(
        tmp_path,
        GATEWAY_SCENARIOS,
        lambda scenario: [scenario.parent / "base" / "gateways.yaml", scenario / "resources.yaml"],
        lambda text: _line_edits(text, 6, ("Gateway", "ListenerSet"), _GATEWAY_EDITS),
        options,
    )
    assert edits > 30
    # An address each: an edit of one Gateway leaves the requests to the others alone
    # (64 edits, 24 asking some of a scenario's requests again, not all; the rest are
    # of a Gateway that every request or no request is sent to). One address: every
    # Gateway may answer for another, so every request is asked again.
    assert partial > edits // 3 if mode == PER_GATEWAY else partial == 0


def _report(run: CLI, *args: str) -> tuple[int, dict[str, object]]:
    got = run(*args, "--format", "json")
    assert got.rc in (0, 1), got.err
    return got.rc, got.json()


def _copied(run: CLI, tmp_path: Path) -> tuple[tuple[str, str], Path, Path]:
    """A copy of the hostname-intersection scenario: its paths, its translation (the
    xDS that goes stale once the copy is edited) and its resources.yaml."""
    shutil.copytree(FIXTURES / "base", tmp_path / "base")
    shutil.copytree(FIXTURES / "httproute-hostname-intersection", tmp_path / "s")
    paths = (str(tmp_path / "base"), str(tmp_path / "s"))
    stale = tmp_path / "xds.json"
    assert run("translate", *paths, "-o", str(stale)).rc == 0
    return paths, stale, tmp_path / "s" / "resources.yaml"


def test_a_baseline_run_reports_what_a_full_run_reports(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """Saved on the unedited YAML, then one route's hostname edited: checked against
    its own translation, and against the unedited YAML's (stale) xDS."""
    paths, stale, route = _copied(cli, tmp_path)
    text = route.read_text()
    # Not a backend: a new cluster changes what every request may read.
    edited = [e for e in _line_edits(text) if "name:" not in _changed_line(text, e)][-1]
    saved = tmp_path / "baseline.json"
    codes: list[set[str]] = []
    for extra in ((), ("--xds", str(stale))):
        route.write_text(text)
        code, _ = _report(cli, "check", *paths, *extra, "--save-baseline", str(saved))
        assert code == 0
        doc = json.loads(saved.read_text())
        assert doc["format"] == baseline.FORMAT and doc["agreed"]
        route.write_text(edited)
        full_code, full = _report(cli, "check", *paths, *extra)
        code, rerun = _report(cli, "check", *paths, *extra, "--baseline", str(saved))
        assert (code, rerun["findings"]) == (full_code, full["findings"])
        asked = rerun["summary"]["baseline"]  # type: ignore[index]
        assert 0 < asked["asked"] < asked["requests"]
        codes.append({f["code"] for f in full["findings"]})  # type: ignore[attr-defined]
    # The cases.yaml beside the YAML fails in both (it expects the old hostname); the
    # stale xDS also disagrees with the edited route.
    assert codes[0] == {"EV703"} and codes[1] - {"EV701", "EV703"}


def test_a_baseline_from_another_build_is_a_full_check(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    saved = tmp_path / "baseline.json"
    scenario = (str(FIXTURES / "base"), str(FIXTURES / "httproute-simple-same-namespace"))
    assert cli("check", *scenario, "--save-baseline", str(saved)).rc == 0
    doc = json.loads(saved.read_text())
    for field, value in (("tool", "0" * 32), ("version", 99)):
        changed = {**doc, field: value}
        saved.write_text(json.dumps(changed))
        code, out, err = astuple(cli("check", *scenario, "--baseline", str(saved)))
        assert code == 0
        assert "another build of edge-verify" in err and "full check" in err
        assert "requests asked" not in err + out  # the summary does not claim a baseline


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("{not json", "--baseline"),
        ('{"format": "edge-verify baseline", "format": "edge-verify baseline"}', "format"),
        ('{"format": "something else"}', "format"),
        (
            '{"format": "edge-verify baseline", "version": 1, "tool": "TOOL", "agreed": ["zz"]}',
            "agreed",
        ),
        (
            '{"format": "edge-verify baseline", "version": 1, "tool": "TOOL", "agreed": ["'
            + "g" * 32
            + '"]}',
            "agreed",
        ),
    ],
)
def test_a_file_that_is_not_a_baseline_is_bad_input(
    cli: CLI,  # noqa: F811
    tmp_path: Path,
    text: str,
    field: str,
) -> None:
    bad = tmp_path / "baseline.json"
    bad.write_text(text.replace("TOOL", baseline.tool_digest()))
    code, out, err = astuple(cli("check", *SIMPLE, "--baseline", str(bad)))
    assert code == 2, err
    assert str(bad) in err and "Traceback" not in err
    assert field in err
    assert out == ""


def test_the_baseline_file_holds_digests_only(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """No configuration and no key material: the gateway-https-listener scenario's
    private key and host names must not be in it."""
    saved = tmp_path / "baseline.json"
    scenario = (str(FIXTURES / "base"), str(FIXTURES / "gateway-https-listener"))
    assert cli("check", *scenario, "--save-baseline", str(saved)).rc == 0
    text = saved.read_text()
    doc = json.loads(text)
    assert set(doc) == {"format", "version", "tool", "agreed"}
    assert all(re.fullmatch(r"[0-9a-f]{32}", d) for d in doc["agreed"])
    assert "PRIVATE" not in text and "example.com" not in text


def test_fixture_suite_baseline_run_matches(tmp_path: Path) -> None:
    """The whole fixture suite: saved, then checked again with the baseline. What
    ``--baseline DIR|REF`` works out for a configuration (``pipeline.agreements``,
    only the models asked) is exactly what ``--save-baseline`` writes for it."""
    opts = pipeline.CheckOptions(save_baseline=True)
    full = pipeline.check_all([str(FIXTURES)], opts, RULES)
    agreed = frozenset().union(*(r.agreed for r in full))
    assert pipeline.agreements([str(FIXTURES)], pipeline.CheckOptions()) == (agreed, [])
    again = pipeline.check_all(
        [str(FIXTURES)], pipeline.CheckOptions(baseline=baseline.Baseline(agreed)), RULES
    )
    assert [r.findings for r in again] == [r.findings for r in full]
    assert sum(r.asked for r in again) < sum(r.requests for r in full) // 20


def _first_virtual_hosts(doc: object) -> list[dict[str, object]] | None:
    if isinstance(doc, dict):
        if doc.get("virtual_hosts"):
            return doc["virtual_hosts"]  # type: ignore[no-any-return]
        children: list[object] = list(doc.values())
    elif isinstance(doc, list):
        children = doc
    else:
        return None
    for child in children:
        found = _first_virtual_hosts(child)
        if found is not None:
            return found
    return None


def test_an_xds_edit_is_asked_again(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """--xds read from JSON: virtual hosts are digested as written. One route's match
    edited in the JSON: its virtual host's requests are asked again, the others not,
    and the report is a full run's."""
    scenario = (str(FIXTURES / "base"), str(FIXTURES / "httproute-hostname-intersection"))
    xds = tmp_path / "xds.json"
    assert cli("translate", *scenario, "-o", str(xds)).rc == 0
    saved = tmp_path / "baseline.json"
    code, _ = _report(cli, "check", *scenario, "--xds", str(xds), "--save-baseline", str(saved))
    assert code == 0
    doc = json.loads(xds.read_text())
    vhosts = _first_virtual_hosts(doc)
    assert vhosts is not None and len(vhosts) > 1
    route = vhosts[0]["routes"][0]  # type: ignore[index]
    route["match"] = {"prefix": "/only-this"}
    xds.write_text(json.dumps(doc))
    full_code, full = _report(cli, "check", *scenario, "--xds", str(xds))
    code, rerun = _report(cli, "check", *scenario, "--xds", str(xds), "--baseline", str(saved))
    assert full_code == 1
    assert (code, rerun["findings"]) == (full_code, full["findings"])
    asked = rerun["summary"]["baseline"]  # type: ignore[index]
    assert 0 < asked["asked"] < asked["requests"]


def test_lines_that_only_moved_are_not_asked_again(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """A comment above every route moves them all a line down: nothing they say
    changed, so nothing is asked but the requests that disagreed, and the findings
    point at the new lines, as a full run's do."""
    paths, stale, route = _copied(cli, tmp_path)
    text = route.read_text()
    route.write_text(_line_edits(text)[-1])  # the stale xDS disagrees with this
    saved = tmp_path / "baseline.json"
    args = (*paths, "--xds", str(stale))
    code, before = _report(cli, "check", *args, "--save-baseline", str(saved))
    assert code == 1
    route.write_text("# moved\n" + route.read_text())
    full_code, full = _report(cli, "check", *args)
    code, rerun = _report(cli, "check", *args, "--baseline", str(saved))
    assert (code, rerun["findings"]) == (full_code, full["findings"])
    moved = [f["location"] for f in full["findings"]]  # type: ignore[attr-defined]
    assert moved != [f["location"] for f in before["findings"]]  # type: ignore[attr-defined]
    asked = rerun["summary"]["baseline"]  # type: ignore[index]
    assert 0 < asked["asked"] < asked["requests"] // 4


def test_a_baseline_is_read_under_the_input_limits(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 2000 + "]" * 2000)
    code, _out, err = astuple(cli("check", *SIMPLE, "--baseline", str(deep)))
    assert code == 2 and "Traceback" not in err and f"{deep}:1" in err
    # A device that never ends is refused at the size limit, not read forever.
    for flag in ("--baseline", "--xds"):
        code, _out, err = astuple(
            cli("check", *SIMPLE, flag, "/dev/zero", "--max-input-bytes", "100000")
        )
        assert code == 2 and "/dev/zero" in err and "too-large" in err, err


def test_a_baseline_that_cannot_be_written_is_refused_before_the_check(
    cli: CLI,  # noqa: F811
    tmp_path: Path,
) -> None:
    (tmp_path / "adir").mkdir()
    for target in (tmp_path / "nodir" / "b.json", tmp_path / "adir"):
        code, out, err = astuple(cli("check", *SIMPLE, "--save-baseline", str(target)))
        assert code == 2 and f"{target}: --save-baseline:" in err and "[unwritable]" in err
        assert "rules run" not in out + err  # refused before checking
    same = str(tmp_path / "b.json")
    code, _out, err = astuple(cli("check", *SIMPLE, "--save-baseline", same, "-o", same))
    assert code == 2 and "the same file" in err
    assert list(tmp_path.iterdir()) == [tmp_path / "adir"]  # nothing written, no temp file


def test_a_baseline_from_standard_input(
    cli: CLI,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    saved = tmp_path / "b.json"
    assert cli("check", *SIMPLE, "--save-baseline", str(saved)).rc == 0
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(saved.read_bytes())))
    code, out, _err = astuple(cli("check", *SIMPLE, "--baseline", "-"))
    assert code == 0 and "0 of " in out


def test_a_listener_address_is_compared_in_one_spelling() -> None:
    """A listener bound to an address spelt otherwise than the request's (IPv6 zeros,
    an IPv4-mapped IPv6 address) is still one that can take the connection: missing
    it would skip a request whose answer the listener changed."""
    assert baseline._ip("2001:db8:0::1") == baseline._ip("2001:db8::1")
    assert baseline._ip("::ffff:192.0.2.1") == baseline._ip("192.0.2.1") == "192.0.2.1"
    assert baseline._ip("0.0.0.0") is None and baseline._ip("::") is None  # wildcards
    assert baseline._ip("edge.example") is None  # a name: on every address
