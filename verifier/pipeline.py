"""`edge-verify check`: find the inputs, get the xDS, run the rules.

A directory laid out like ``fixtures/`` (a ``base/`` plus scenario folders) is
checked scenario by scenario, each with the shared base and its own cases
table, so one command checks a whole suite; anything else is one scenario.
The xDS comes from the reference translator, a file (``--xds``) or an external
translator command (``--translator``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from verifier import expected
from verifier.check import DEFAULT_CONTROLLER, Context
from verifier.errors import InputError, InputErrors
from verifier.features import DEFAULT_PROFILE, PROFILES
from verifier.findings import Finding
from verifier.forked import ForkedCall, can_fork, map_forked
from verifier.gatewayapi import workloads
from verifier.gatewayapi.addresses import (
    Addressing,
    gateway_addresses,
    no_cluster_ip,
    nothing_to_check,
    ours,
)
from verifier.gatewayapi.cluster import ClusterSource, load_cluster_resources
from verifier.gatewayapi.load import CASES, LoadResult, load_paths
from verifier.gatewayapi.mesh_registry import load_mesh_registry
from verifier.gatewayapi.resources import Resources, build, load_resources, skip_warning
from verifier.heap import loaded_objects_frozen
from verifier.inputs import (
    LIMIT_FLAGS,
    limits,
    line_of_field,
    load_json,
    load_yaml,
    load_yaml_file,
    read_text,
)
from verifier.registry import Rule, run
from verifier.report.scenario import ScenarioReport
from verifier.semantics.cases import Case, CaseError, parse_case
from verifier.semantics.envoy.binding import WILDCARDS, reaches, sockets
from verifier.semantics.envoy.model import precompile
from verifier.semantics.request import Source
from verifier.semantics.witness_mesh import mesh_routes
from verifier.suggest import missing
from verifier.xds import validation
from verifier.xds.layout import XdsLoadError, label
from verifier.xds.snapshot import Snapshot, from_config_dump, load_path

if TYPE_CHECKING:
    from verifier.baseline import Baseline
    from verifier.mesh_compare import SidecarXds


# How long one run of an external translator may take (--translator-timeout).
TRANSLATOR_TIMEOUT = 600.0


@dataclass(frozen=True)
class CheckOptions:
    xds: str | None = None
    translator: str | None = None
    profile: str = DEFAULT_PROFILE
    controller_name: str = DEFAULT_CONTROLLER
    trust_domain: str = "cluster.local"
    mesh_registry: str | None = None
    cases: tuple[str, ...] = ()
    addressing: Addressing = field(default_factory=Addressing)
    # --kubeconfig: the resources come from a live cluster instead of PATHs.
    cluster: ClusterSource | None = None
    # --baseline: requests the models agreed on before, not asked again.
    baseline: Baseline | None = None
    # --save-baseline: record the requests the models agree on.
    save_baseline: bool = False
    # --translator-timeout: how long one run of --translator may take.
    translator_timeout: float = TRANSLATOR_TIMEOUT
    # --proxy NS/WORKLOAD: --xds is that workload's sidecar's xDS (docs/mesh.md).
    proxy: str | None = None
    # The command takes --proxy (check, explain, mutate); live and run do not: they
    # serve --xds to the edge and every sidecar its reference translation.
    takes_proxy: bool = True


@dataclass(frozen=True)
class Scenario:
    """What one check judges: its name in every report, the resources and the cases.

    ``suite``: one of the scenarios of a suite directory (``fixtures/``), as opposed
    to a run's explicit paths, which are one scenario."""

    name: str
    paths: tuple[str, ...]
    cases: tuple[str, ...] = ()
    expected_errors: str | None = None
    mesh_registry: str | None = None
    cluster: ClusterSource | None = None
    suite: bool = False
    # expected-findings.yaml: the findings a deliberately broken scenario must report.
    expected_findings: str | None = None


@dataclass
class ScenarioResult:
    scenario: Scenario
    findings: list[Finding] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # What reading the input noted (``input_notes``): printed as ``note:`` lines and
    # counted apart from the findings, whose ``warning`` is a severity.
    warnings: list[str] = field(default_factory=list)
    input_errors: list[InputError] = field(default_factory=list)
    # Each cases table replayed and how many cases it holds, in the order read.
    cases: tuple[tuple[str, int], ...] = ()
    # The witness requests, how many the models were asked about (fewer with a
    # baseline), how many the decision lists proved without asking, and the digests
    # of those they agree on (--save-baseline).
    requests: int = 0
    asked: int = 0
    proven: int = 0
    agreed: frozenset[bytes] = frozenset()
    # Cases stating expectations no model can show (cases.LIVE_ONLY), which only
    # the live pass judges: (file, line, case, those expectations).
    left_to_live: list[tuple[str, int, str, tuple[str, ...]]] = field(default_factory=list)
    # Mesh cases judged by the spec model only: their client's sidecar xDS is not
    # there (check --xds without --proxy, or another workload's), or the profile does
    # not claim the mesh.
    mesh_cases: int = 0
    # Mesh requests compared (on their client's sidecar, or kube-proxy's answer), and
    # those not judged because their client's sidecar xDS is not there, with why.
    mesh_requests: int = 0
    mesh_unjudged: int = 0
    mesh_unjudged_why: str = ""
    # check --xds FILE --proxy NS/WORKLOAD: the sidecar judged; the edge's cases,
    # which nothing judges then (its xDS was not given).
    proxy: str = ""
    edge_cases_unjudged: int = 0
    # How many requests were not judged: their Envoy answer rests on an assumption.
    unjudged: int = 0
    # The findings reported as the scenario's expected-findings.yaml declares them.
    expected: list[Finding] = field(default_factory=list)


MESH_REGISTRY = "mesh-registry.yaml"


def _is_suite(path: Path) -> bool:
    return (path / "base").is_dir() and any(
        (child / "resources.yaml").is_file() for child in path.iterdir() if child.name != "base"
    )


def discover(paths: Sequence[str], opts: CheckOptions) -> list[Scenario]:
    if opts.cluster is not None:  # one scenario: the cluster as it is now
        name = opts.cluster.context or "cluster"
        return [Scenario(name, (), opts.cases, None, opts.mesh_registry, cluster=opts.cluster)]
    if len(paths) == 1 and Path(paths[0]).is_dir() and _is_suite(Path(paths[0])):
        root = Path(paths[0])
        out = []
        for child in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "base"):
            if not (child / "resources.yaml").is_file():
                continue
            cases = child / CASES
            errors = child / "expected-errors.yaml"
            registry = child / MESH_REGISTRY
            declared = child / expected.FILE
            out.append(
                Scenario(
                    child.name,
                    (str(root / "base"), str(child)),
                    (str(cases),) if cases.is_file() else (),
                    str(errors) if errors.is_file() else None,
                    str(registry) if registry.is_file() else None,
                    suite=True,
                    expected_findings=str(declared) if declared.is_file() else None,
                )
            )
        if opts.cases or opts.mesh_registry:
            given = "--cases" if opts.cases else "--mesh-registry"
            raise InputErrors(
                [
                    InputError(
                        given,
                        0,
                        "",
                        "not-applicable",
                        f"{paths[0]} is a suite: each scenario brings its own cases.yaml and "
                        "mesh-registry.yaml; for one scenario give base plus its folder, "
                        "with --cases and --mesh-registry naming its files",
                    )
                ]
            )
        return out
    resources = _resource_paths(paths)
    return [
        Scenario(
            scenario_name(resources),
            tuple(resources),
            _own_cases(paths, opts.cases),
            None,
            _own_registry(paths, opts.mesh_registry),
            expected_findings=_own_file(paths, expected.FILE),
        )
    ]


def _resource_paths(paths: Sequence[str]) -> list[str]:
    """The paths but the cases tables among them. ``check store/*.yaml`` names
    ``store/cases.yaml`` too, and a folder's cases.yaml is its scenario's cases
    whenever a path in that folder is given (``_own_cases``): so the table is replayed
    as cases, as its name says, and only not read as Kubernetes objects as well. Named
    alone, there is nothing left to check, which is bad input."""
    kept = [p for p in paths if p == "-" or Path(p).is_dir() or Path(p).name != CASES]
    if kept or not paths:
        return kept
    message = (
        "a cases table and no resources: give the scenario's resources too (its folder, or "
        "its resource files), and the cases.yaml beside them is replayed"
    )
    raise InputErrors([InputError(paths[0], 0, "", "no-resources", message)])


# A scenario's resources file: named after its folder, as a suite names the scenario.
RESOURCES = "resources.yaml"


def scenario_name(paths: Sequence[str]) -> str:
    """The name of the scenario that explicit paths make, in every report.

    The last path names it: base and shared files come first and the scenario
    last (``fixtures/base fixtures/x`` is ``x``, as the suite names that folder),
    and the name depends on the command line alone, so it is the same on every
    run. A folder is named by its name (``.`` by the current directory's), a file by
    its stem, except a ``resources.yaml``, which is its folder's scenario
    (``shop/resources.yaml`` is ``shop``); standard input is ``stdin``."""
    if not paths:
        return "input"
    last = paths[-1]
    if last == "-":
        return "stdin"
    path = Path(last)
    if path.is_dir():
        return path.name or path.resolve().name or last
    if path.name == RESOURCES:
        return path.parent.name or path.resolve().parent.name or path.stem
    return path.stem or last


def _folders(paths: Sequence[str]) -> list[Path]:
    """The folder of every path given, once each, in order: the folder itself, or the
    folder a file is in. Its cases.yaml and mesh-registry.yaml belong to the scenario,
    whether the folder or one of its files is named (``check shop/resources.yaml`` runs
    ``shop/cases.yaml`` as ``check shop/`` does)."""
    out: dict[Path, Path] = {}
    for p in paths:
        if p == "-":
            continue
        path = Path(p)
        folder = path if path.is_dir() else path.parent
        out.setdefault(folder.resolve(), folder)
    return list(out.values())


def _own_cases(paths: Sequence[str], given: tuple[str, ...]) -> tuple[str, ...]:
    """``--cases`` plus the cases.yaml of the folder of every path given: a scenario's
    own table is always replayed (the suite does the same), so naming its folder, or a
    file in it, checks its cases."""
    out = list(given)
    seen = {Path(p).resolve() for p in given}
    for folder in _folders(paths):
        own = folder / CASES
        if own.is_file() and own.resolve() not in seen:
            seen.add(own.resolve())
            out.append(str(own))
    return tuple(out)


def _own_registry(paths: Sequence[str], given: str | None) -> str | None:
    """``--mesh-registry``, else the mesh-registry.yaml of the folder of a path given (as
    the suite reads it); a folder's registry changes how its backends are dialled."""
    if given is not None:
        return given
    return _own_file(paths, MESH_REGISTRY, "name one with --mesh-registry")


def _own_file(paths: Sequence[str], name: str, choose: str = "give one folder") -> str | None:
    """The file ``name`` of the one folder given (or holding a file given) that has it,
    as the suite reads it (mesh-registry.yaml, expected-findings.yaml); two such
    folders are ambiguous."""
    found = [str(f / name) for f in _folders(paths) if (f / name).is_file()]
    if len(found) > 1:
        why = f"{len(found)} folders bring one ({', '.join(found)}): {choose}"
        raise InputErrors([InputError(found[1], 0, "", "ambiguous", why)])
    return found[0] if found else None


# ---------------------------------------------------------------- cases


def load_cases(path: str) -> tuple[list[Case], dict[str, tuple[str, int]]]:
    """Cases with the line of each, so findings point into the cases table."""
    data, node = load_yaml(read_text(path), path)
    if node is None:
        return [], {}
    if not isinstance(data, list) or not isinstance(node, yaml.SequenceNode):
        raise InputErrors([InputError(path, 1, "", "type", "a cases file is a YAML list of cases")])
    cases, lines, errors = [], {}, []
    for i, (item, item_node) in enumerate(zip(data, node.value, strict=True)):
        try:
            case = parse_case(item, i, base_dir=str(Path(path).parent))
        except CaseError as exc:
            line = line_of_field(node, exc.field)
            errors.append(InputError(path, line, exc.field, "case", exc.message))
            continue
        if case.name in lines:
            errors.append(
                InputError(
                    path,
                    line_of_field(node, f"[{i}].name"),
                    f"[{i}].name",
                    "unique",
                    f"duplicate case name {case.name!r}",
                )
            )
        lines[case.name] = (path, item_node.start_mark.line + 1)
        cases.append(case)
    if errors:
        raise InputErrors(errors)
    return cases, lines


def with_ports(
    res: Resources,
    cases: list[Case],
    path: str,
    lines: Mapping[str, tuple[str, int]] | None = None,
) -> list[Case]:
    """A case may omit the port when its Gateway (or, for a mesh case, its Service) has
    exactly one; a mesh case's client, Service and port must be of the input. Every
    case's problems are reported together. ``lines``: where each case is
    (``load_cases``), for the errors."""
    out, errors = [], []
    for c in cases:
        try:
            out.append(_with_port(res, c, path, (lines or {}).get(c.name, (path, 0))[1]))
        except InputErrors as exc:
            errors += exc.errors
    if errors:
        raise InputErrors(_at_fields(path, errors))
    return out


def _at_fields(path: str, errors: list[InputError]) -> list[InputError]:
    """Each error at its own field's line (a case's ``from:`` or ``service:`` is lines
    below its first), the table read again only now that there are errors."""
    try:
        _data, node = load_yaml(read_text(path), path)
    except InputErrors:
        return errors
    if node is None:
        return errors
    return [
        replace(e, line=line_of_field(node, e.field))
        if e.file == path and e.field.startswith("[")
        else e
        for e in errors
    ]


def _with_port(res: Resources, c: Case, path: str, line: int) -> Case:
    if c.service is not None:
        return _service_port(res, c, path, line)
    gw = res.gateways.get(c.parent_key)
    if gw is None and res.knows(c.parent_key[0]):
        # Sent to no Gateway, the case would be judged as a request nothing serves.
        part, message = missing("Gateway", *c.parent_key, res.gateways)
        field = f"[{c.index}].gateway.{part}"
        raise InputErrors([InputError(path, line, field, "not-found", message)])
    if c.request.port:
        return c
    ports = sorted({lst.port for lst in gw.listeners}) if gw else []
    if len(ports) != 1:
        message = "the Gateway has several ports (or none): give one"
        field = f"[{c.index}].gateway.port"
        raise InputErrors([InputError(path, line, field, "required", message)])
    return replace(c, request=replace(c.request, port=ports[0]))


def _service_port(res: Resources, c: Case, path: str, line: int) -> Case:
    """A mesh case's port: the one it names, which the Service must have, or the Service's
    only one. Its frontend is the ClusterIP: a Service without one cannot be called. Its
    client must be a workload of the input: a mistyped one would read as a pod without
    a sidecar, and the case would be judged as kube-proxy's. Each wrong reference is
    named at its own field (``from.namespace`` or ``from.workload``, ``service.namespace``
    or ``service.name``), all of them."""
    ns, name = c.parent_key
    errors: list[InputError] = []

    def bad(field: str, code: str, message: str) -> None:
        errors.append(InputError(path, line, f"[{c.index}].{field}", code, message))

    source = c.request.source
    if source is not None and workloads.workload(res, source.namespace, source.workload) is None:
        part, message = workloads.workload_missing(res, source.namespace, source.workload)
        bad(f"from.{'workload' if part == 'name' else part}", "not-found", message)
    svc = res.services.get((ns, name))
    if svc is None:
        part, message = missing("Service", ns, name, res.services)
        bad(f"service.{part}", "not-found", message)
        raise InputErrors(errors)
    headless = no_cluster_ip(svc)
    if headless is not None:
        bad("service", "no-cluster-ip", headless)
    ports = sorted(p.port for p in svc.ports)
    port = c.request.port
    if port and port not in ports:
        listed = ", ".join(map(str, ports)) or "none"
        message = f"Service {ns}/{name} has no port {port} (ports: {listed})"
        bad("service.port", "not-found", message)
    elif not port and len(ports) != 1:
        bad("service.port", "required", "the Service has several ports (or none): give one")
    if errors:
        raise InputErrors(errors)
    return c if port else replace(c, request=replace(c.request, port=ports[0]))


# ---------------------------------------------------------------- xDS sources

ORIGINAL_DST = "envoy.extensions.filters.listener.original_dst.v3.OriginalDst"


def sidecar_listeners(snapshot: Snapshot) -> list[str]:
    """The listeners that restore a redirected connection's original destination (the
    ``original_dst`` listener filter): a sidecar's, which an edge does not have."""
    return [
        lst.name
        for lst in snapshot.listeners
        if any(
            f.name == "envoy.filters.listener.original_dst"
            or getattr(f.typed_config, "type_url", "").endswith(ORIGINAL_DST)
            for f in lst.listener_filters
        )
    ]


def sidecar_xds(
    res: Resources,
    opts: CheckOptions,
    registry: frozenset[tuple[str, str]],
    snapshot: Snapshot,
    paths: Sequence[str] = (),
    *,
    records: bool = False,
    mesh_input: bool = False,
    notes: list[str] | None = None,
) -> SidecarXds | None:
    """Where each mesh client's sidecar xDS comes from: ``--xds FILE --proxy NS/WORKLOAD``
    (that workload's only), else the reference translator's per workload when the edge's
    xDS is ours too, or ``--translator``'s, run as ``CMD --proxy NS/WORKLOAD PATH...``
    for every workload with a sidecar when the input has mesh routes or mesh cases
    (``mesh_input``; a translator that fails there fails the check, exit 2, as on the
    edge's); None with ``--xds`` alone, whose xDS is the
    edge's: no sidecar is judged then, and its requests are said to be unjudged. A dump
    whose listeners are a sidecar's, given without --proxy, is bad input: it would be
    judged as an edge that serves no Gateway. With --proxy the xDS is judged as that
    sidecar's, whatever it holds (an edge's would fail every mesh request: findings).
    What reading a translator's sidecar xDS noted is added to ``notes``."""
    from verifier.mesh_compare import SidecarXds, sidecar_clients

    def error(field: str, code: str, message: str) -> InputErrors:
        return InputErrors([InputError(field, 0, "", code, message)])

    if opts.proxy and not opts.xds:
        why = "--proxy says whose sidecar --xds is; without --xds every sidecar is translated"
        raise error("--proxy", "not-applicable", why)
    listeners = sidecar_listeners(snapshot) if opts.xds or opts.translator else []
    if opts.proxy:
        from verifier.gatewayapi.mesh_attach import sidecar_workload

        found = sidecar_workload(res, opts.proxy)
        return SidecarXds(given={Source(found.meta.namespace, found.meta.name): snapshot})
    if listeners:
        raise error(
            "--xds" if opts.xds else "--translator", "sidecar-xds", _sidecar_given(opts, listeners)
        )
    if opts.translator and mesh_input:
        made: dict[Source, Snapshot] = {}
        for client in sidecar_clients(res):
            try:
                made[client], said = external_snapshot(
                    opts.translator,
                    paths,
                    records=records,
                    timeout=opts.translator_timeout,
                    proxy=client.line(),
                )
            except InputErrors as exc:  # said for which sidecar it failed
                raise InputErrors(
                    [replace(e, field=f"--translator --proxy {client.line()}") for e in exc.errors]
                ) from None
            if notes is not None:
                notes += [f"--translator --proxy {client.line()}: {note}" for note in said]
        return SidecarXds(translate=made.__getitem__)
    if opts.xds or opts.translator:
        return None
    return SidecarXds(translate=ReferenceSidecars(res, opts, registry))


def _sidecar_given(opts: CheckOptions, listeners: Sequence[str]) -> str:
    """Why a sidecar's xDS, given where the edge's is read, cannot be judged, and what
    the command can do with it instead."""
    source = opts.xds or f"--translator {opts.translator}"
    said = (
        f"{label(source)} is a sidecar's xDS (listener {listeners[0]} restores original "
        "destinations)"
    )
    if opts.translator:
        return (
            f"{said}, but it was asked for the edge's (run without --proxy; each sidecar's "
            "is asked with --proxy NAMESPACE/WORKLOAD)"
        )
    if opts.takes_proxy:
        return f"{said}: name its workload with --proxy NAMESPACE/WORKLOAD"
    return (
        f"{said}: live and run serve --xds to the edge, and each sidecar the reference "
        "translator's xDS; a sidecar's dump is judged by "
        f"check --xds {label(source)} --proxy NAMESPACE/WORKLOAD"
    )


@dataclass
class ReferenceSidecars:
    """The reference translator's xDS for each client's sidecar (``translate --proxy``),
    from the controller's mesh decisions, made once for all of them."""

    res: Resources
    opts: CheckOptions
    registry: frozenset[tuple[str, str]]
    _graph: Any = None

    def __call__(self, source: Source) -> Snapshot:
        from verifier.gatewayapi import mesh_attach
        from verifier.translate import TranslateOptions
        from verifier.translate.sidecar import translate_sidecar

        if self._graph is None:
            self._graph = mesh_attach.build_mesh(self.res)
        workload = workloads.workload(self.res, source.namespace, source.workload)
        assert workload is not None  # the client of one of the input's requests
        topts = TranslateOptions(trust_domain=self.opts.trust_domain, mesh_registry=self.registry)
        return translate_sidecar(self.res, self._graph, workload, topts)


def reference_snapshot(res: Resources, opts: CheckOptions, registry_file: str | None) -> Snapshot:
    from verifier.gatewayapi.attach import build_graph
    from verifier.translate import TranslateOptions, translate

    registry = load_mesh_registry(registry_file) if registry_file else frozenset()
    graph = build_graph(res, opts.controller_name, shared_address=opts.addressing.shared)
    return translate(
        res,
        graph,
        TranslateOptions(opts.controller_name, opts.trust_domain, registry, opts.addressing),
    )


def sidecar_snapshots(
    res: Resources,
    clients: Iterable[tuple[str, str]],
    trust_domain: str,
    registry: frozenset[tuple[str, str]],
) -> dict[tuple[str, str], Snapshot]:
    """Each client workload's sidecar xDS, as ``translate --proxy NS/WORKLOAD`` writes it
    (the live mesh serves it unrewritten). There is no ``--xds`` for a sidecar yet:
    the reference translator's is the one served and judged."""
    from verifier.gatewayapi import mesh_attach
    from verifier.translate import TranslateOptions
    from verifier.translate.sidecar import translate_sidecar

    graph = mesh_attach.build_mesh(res)
    opts = TranslateOptions(trust_domain=trust_domain, mesh_registry=registry)
    return {
        (ns, name): translate_sidecar(
            res, graph, mesh_attach.sidecar_workload(res, f"{ns}/{name}"), opts
        )
        for ns, name in sorted(set(clients))
    }


def external_snapshot(
    command: str,
    paths: Sequence[str],
    *,
    records: bool = False,
    timeout: float = TRANSLATOR_TIMEOUT,
    proxy: str | None = None,
) -> tuple[Snapshot, list[str]]:
    """Run ``command PATH...``; it must print a config_dump or DiscoveryResponses.
    ``records`` as for ``file_snapshot``: its JSON is read as a file's is. It runs on
    a leash (``verifier.children``): ``timeout`` seconds, at most --max-input-bytes
    of output, and nothing it started outlives the call. ``proxy`` (``NS/WORKLOAD``):
    run as ``command --proxy NS/WORKLOAD PATH...`` for that workload's sidecar, as
    ``edge-verify translate --proxy`` is (docs/mesh.md)."""
    from verifier import children

    def error(code: str, message: str) -> InputErrors:
        return InputErrors([InputError(command, 0, "--translator", code, message)])

    try:
        argv = children.parse_command(command, "--translator")
        asked = ["--proxy", proxy] if proxy is not None else []
        argv = [a for a in argv if a != "{paths}"] + asked + list(paths)
        ended = children.run(
            argv,
            timeout=timeout,
            max_output=limits().max_bytes,
            flags=("--translator-timeout", LIMIT_FLAGS["max_bytes"]),
        )
    except children.ChildError as exc:
        code = {"too-much-output": "too-large"}.get(exc.code, exc.code)
        if code in ("not-found", "cannot-start"):
            code = "translator-failed"
        raise error(code, exc.message) from None
    if ended.returncode != 0:
        how = (
            f"exited with code {ended.returncode}"
            if ended.returncode > 0
            else f"was killed by signal {-ended.returncode}"
        )
        raise error("translator-failed", f"{how}: {ended.last_words()}")
    try:
        stdout = ended.stdout.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"output is not UTF-8 text: {exc.reason} at byte {exc.start}"
        raise error("bad-xds", message) from None
    if not stdout.strip():
        raise error("bad-xds", "printed nothing on stdout")
    try:
        doc = load_json(stdout, command)  # under the input limits, as a file is
    except InputErrors as exc:
        raise InputErrors(
            [
                InputError(command, 0, "--translator", "bad-xds", _output_problem(e))
                for e in exc.errors
            ]
        ) from None
    try:
        snap, skipped = from_config_dump(doc, command, records=records)
    except XdsLoadError as exc:
        raise error("bad-xds", exc.message) from None
    return snap, [f"{s.path}: skipped: {s.reason}" for s in skipped]


def _output_problem(e: InputError) -> str:
    field = f"{e.field}: " if e.field else ""
    return f"output line {e.line}: {field}{e.message}" if e.line else f"output: {e.message}"


def _xds_input_error(exc: XdsLoadError, path: str) -> InputError:
    # "invalid JSON: ... line 2 column 5 ...": surface the line as file:line.
    found = re.search(r"line (\d+)", exc.message)
    line = exc.line or (int(found.group(1)) if found else 0)
    file, _, where = (exc.path or path).partition(":$")
    fld = f"${where}" if where else "--xds"
    return InputError(file, line, fld, exc.code, exc.message)


_REMOTE: dict[tuple[str, bool], tuple[Snapshot, list[str]]] = {}


def remote_snapshot(source: str, *, records: bool = False) -> tuple[Snapshot, list[str]]:
    """The xDS a control plane (``ads://``) serves or an Envoy (``http(s)://``) holds.

    Pulled once per run (a directory of scenarios judges the same edge each time);
    anything short of a complete snapshot is an input error, never a partial check.
    The peer is bounded (``verifier.peers``): ``?timeout=S`` for the whole read
    (default 30 s), ``--max-input-bytes`` for what it sends; past either, exit 2.
    ``records``: an admin endpoint's JSON is read as a file's is (ADS sends messages).
    """
    from verifier import peers
    from verifier.inputs import limits
    from verifier.xds import admin, ads_client

    if (source, records) in _REMOTE:
        return _REMOTE[(source, records)]
    notes: list[str] = []
    try:
        if source.startswith("ads://"):
            host, port, opts = ads_client.parse_ads_url(source)
            budget = ads_client.budget_for(host, port, opts)
            result = peers.run(ads_client.pull(host, port, opts, budget), budget)
            snap = result.snapshot
            notes += [f"{source}: {n.line()}" for n in result.nacks]
        else:
            timeout = admin.url_timeout(source) or peers.DEFAULT_TIMEOUT
            budget = admin.budget_for(source, timeout, limits().max_bytes)
            doc = peers.run(admin.fetch(source, budget), budget)
            notes += [o.line().removeprefix("edge-verify: ") for o in admin.observe(doc)]
            snap, skipped = from_config_dump(doc, source, records=records)
            notes += [peers.printable(f"{s.path}: skipped: {s.reason}") for s in skipped]
    except (ads_client.PullError, admin.AdminError) as exc:
        raise InputErrors([InputError(source, 0, "--xds", "unreachable", str(exc))]) from None
    except peers.PeerLimit as exc:
        raise InputErrors([InputError(source, 0, "--xds", exc.code, exc.message)]) from None
    except XdsLoadError as exc:
        error = _xds_input_error(exc, source)
        raise InputErrors([replace(error, message=peers.printable(error.message))]) from None
    _REMOTE[(source, records)] = (snap, notes)
    return snap, notes


def file_snapshot(path: str, *, records: bool = False) -> tuple[Snapshot, list[str]]:
    """A file or directory of xDS, or a live source: ``ads://`` or ``http(s)://`` admin.
    ``records``: a file is decoded into records where it can be (``check`` and
    ``explain`` only read it; ``serve`` sends messages)."""
    if re.match(r"^(ads|https?)://", path):
        return remote_snapshot(path, records=records)
    if re.match(r"^[a-z][a-z0-9+.-]*://", path):
        raise InputErrors(
            [
                InputError(
                    path,
                    0,
                    "--xds",
                    "not-a-file",
                    "--xds reads a file or directory, ads://HOST:PORT?node=ID or an Envoy "
                    "admin http(s)://HOST:PORT",
                )
            ]
        )
    try:
        snap, skipped = load_path(path, records=records)
    except XdsLoadError as exc:
        raise InputErrors([_xds_input_error(e, path) for e in [exc, *exc.more]]) from None
    validation.adopt(snap, path)  # Envoy's verdict on the file, if asked for at the start
    return snap, [f"{s.path}: skipped: {s.reason}" for s in skipped]


# ---------------------------------------------------------------- running


def _expected_errors(path: str) -> set[tuple[str, int, str, str]]:
    entries = load_yaml_file(path) or []
    return {
        (str(e["file"]), int(e.get("line") or 0), str(e.get("field") or ""), str(e["code"]))
        for e in entries
    }


def _check_negative(scn: Scenario, errors: list[InputError]) -> ScenarioResult:
    """A negative scenario passes when exactly its expected input errors are reported."""
    assert scn.expected_errors is not None
    got = {(Path(e.file).name, e.line, e.field, e.code) for e in errors}
    want = _expected_errors(scn.expected_errors)
    if got == want:
        return ScenarioResult(scn)  # exactly the expected errors: the scenario passes
    missing = [
        InputError(scn.expected_errors, 0, f, c, f"expected error not reported at line {ln}")
        for (_f, ln, f, c) in sorted(want - got)
    ]
    extra = [e for e in errors if (Path(e.file).name, e.line, e.field, e.code) not in want]
    return ScenarioResult(scn, input_errors=missing + extra)


# Below this much YAML, forking a child to load it costs more than it saves.
PARALLEL_LOAD_MIN_BYTES = 256 * 1024


def _resources_in_child(scn: Scenario) -> ForkedCall[LoadResult] | None:
    """The scenario's resources loading in a child process, when they are big
    enough to be worth it: reading 10,000 rules of YAML takes as long as
    reading their xDS, and the two are independent. Not for stdin (``-``),
    which only one process can read."""
    if "-" in scn.paths or scn.cluster is not None:
        return None
    try:
        size = sum(
            f.stat().st_size
            for p in scn.paths
            for f in ([Path(p)] if Path(p).is_file() else Path(p).rglob("*"))
            if f.is_file()
        )
    except OSError:
        return None  # let the loader report it
    if size < PARALLEL_LOAD_MIN_BYTES or not can_fork():
        return None
    paths = list(scn.paths)
    # Parsed, not typed: typed resources took 14 MB of pickle at 10,000 rules and 1.5 s
    # to send and receive (slotted dataclasses unpickle one field at a time); the parsed
    # objects take 10 MB and 0.35 s, and typing them here (1.1 s) costs less than that saves.
    return ForkedCall(lambda: load_paths(paths))


def _resources(scn: Scenario, loading: ForkedCall[LoadResult] | None) -> Resources:
    """Typed from the child's parse, else loaded here (also when the child failed, so
    any unexpected error is raised here, as without a child)."""
    if loading is not None:
        answered, loaded = loading.result()
        if answered and loaded is not None:
            return build(loaded)
    if scn.cluster is not None:
        return load_cluster_resources(scn.cluster)
    return load_resources(list(scn.paths))


def prepare(
    scn: Scenario,
    opts: CheckOptions,
    spec_cache: dict[Any, Any] | None = None,
    *,
    records: bool = False,
) -> tuple[Context | None, ScenarioResult]:
    """The check context of a scenario, or the result that stands instead of one
    (input errors; a negative scenario, which has no context to check). ``records``:
    an ``--xds`` file is read as records (``check``, which only reads it); the live pass
    serves it and the mutation engine edits it, and they need messages."""
    loading = _resources_in_child(scn) if opts.xds else None
    xds: tuple[Snapshot, list[str]] | InputErrors | None = None
    try:
        if loading is not None and opts.xds:
            try:  # while the child reads the YAML
                xds = file_snapshot(opts.xds, records=records)
                precompile(xds[0])
            except InputErrors as exc:
                xds = exc  # reported only if the resources load, as without the child
            except Exception:
                xds = None  # raised again below, in the order of a run without the child
        res = _resources(scn, loading)
    except InputErrors as exc:
        if scn.expected_errors:
            return None, _check_negative(scn, exc.errors)
        return None, ScenarioResult(scn, input_errors=exc.errors)
    finally:
        if loading is not None:
            loading.close()
    warnings = list(res.warnings)
    try:
        cases: list[Case] = []
        locations: dict[str, tuple[str, int]] = {}
        tables: list[tuple[str, int]] = []
        read = [(path, *load_cases(path)) for path in scn.cases]
        where = " ".join(scn.paths) or scn.name
        mesh_cases = any(c.mesh for _path, loaded, _lines in read for c in loaded)
        files = scn.cluster is None
        empty = nothing_to_check(
            res, opts.controller_name, where, mesh_cases=mesh_cases, files=files
        )
        if empty is not None and not opts.proxy:  # with --proxy, a sidecar is what is checked
            raise InputErrors([empty])
        for path, loaded, lines in read:
            cases.extend(with_ports(res, loaded, path, lines))
            locations.update(lines)
            tables.append((path, len(loaded)))
        if isinstance(xds, InputErrors):
            raise xds
        if opts.xds:
            snapshot, notes = xds if xds is not None else file_snapshot(opts.xds, records=records)
            warnings += notes
        elif opts.translator:
            snapshot, notes = external_snapshot(
                opts.translator, scn.paths, records=records, timeout=opts.translator_timeout
            )
            warnings += notes
        else:
            snapshot = reference_snapshot(res, opts, scn.mesh_registry)
        if (opts.xds or opts.translator) and not (snapshot.listeners or snapshot.clusters):
            # Judged as it is (every Gateway unserved), but said first: a pull or a
            # translator that returned nothing would otherwise read as routing bugs.
            source = opts.xds or f"--translator {opts.translator}"
            warnings.append(f"{label(source)}: no listener and no cluster in the xDS read")
        registry = load_mesh_registry(scn.mesh_registry) if scn.mesh_registry else frozenset()
        mesh_input = any(c.mesh for c in cases) or bool(mesh_routes(res))
        sidecars = sidecar_xds(
            res,
            opts,
            registry,
            snapshot,
            scn.paths,
            records=records,
            mesh_input=mesh_input,
            notes=warnings,
        )
    except InputErrors as exc:
        return None, ScenarioResult(scn, input_errors=exc.errors, warnings=warnings)
    try:
        problems = [] if opts.proxy else addressing_problems(res, opts, snapshot)
    except InputErrors as exc:
        problems = exc.errors
    if problems:
        return None, ScenarioResult(scn, input_errors=problems, warnings=warnings)
    ctx = Context(
        res,
        snapshot,
        opts.profile,
        opts.controller_name,
        cases=cases,
        case_locations=locations,
        mesh_registry=registry,
        trust_domain=opts.trust_domain,
        spec_cache=spec_cache,
        addressing=opts.addressing,
        baseline=opts.baseline,
        record_agreement=opts.save_baseline,
        sidecars=sidecars,
        edge_xds=not opts.proxy,
    )
    return ctx, ScenarioResult(scn, warnings=_with_unjudged(warnings, ctx), cases=tuple(tables))


def _with_unjudged(warnings: list[str], ctx: Context) -> list[str]:
    """The load warnings, the skipped route kinds' lines folded into one that also names
    the xDS serving them: what check left alone is said once, in one place."""
    note = ctx.unjudged.warning()
    if note is None:
        return warnings
    folded = {skip_warning(r.meta.raw) for r in ctx.res.other_routes.values() if r.meta.raw}
    return [w for w in warnings if w not in folded] + [note]


def addressing_problems(res: Resources, opts: CheckOptions, snapshot: Snapshot) -> list[InputError]:
    """Why the snapshot's listeners cannot be attributed to the Gateways, if they cannot.

    Requests go to each Gateway's address (verifier.gatewayapi.addresses). A
    ``--gateway-address`` that names no Gateway of ours was ignored, and xDS that binds
    addresses none of the Gateways has (another implementation's, with no wildcard
    listener on that port) would have every request refused for reasons that are
    not the configuration's: both are bad input, said once, rather than a guess."""
    mine = {k: res.gateways[k] for k in ours(res, opts.controller_name)}
    errors = [
        InputError("--gateway-address", 0, f"{ns}/{name}", "not-found", "no Gateway of ours")
        for (ns, name), _ip in opts.addressing.fixed
        if (ns, name) not in mine
    ]
    errors += [
        InputError(
            "--gateway-address",
            0,
            f"{ns}/{name}",
            "not-found",
            f"the port map names port {port}, where the Gateway has no listener",
        )
        for (ns, name), pairs in opts.addressing.ports
        if (ns, name) in mine
        for port, _proxy in pairs
        if all(lst.port != port for lst in mine[(ns, name)].listeners)
    ]
    if errors:
        return errors
    where = gateway_addresses(res, opts.controller_name, opts.addressing)
    bound = sockets(snapshot.listeners)
    served = {ip for ip in where.values()}
    stray = sorted(
        {
            (s.address, s.port)
            for s in bound
            if not ({s.address, s.ipv4} & (served | set(WILDCARDS)))
        }
    )
    if not stray:
        return []
    unreached = sorted(
        f"{ns}/{name} at {where[(ns, name)]}"
        for (ns, name), gw in mine.items()
        if not any(
            reaches(bound, where[(ns, name)], opts.addressing.proxy_port((ns, name), lst.port))
            for lst in gw.listeners
        )
    )
    if not unreached:
        return []
    listed = ", ".join(f"{a}:{p}" for a, p in stray)
    source = opts.xds or opts.translator  # which xDS: the file a user can open
    return [
        InputError(
            "--gateway-address",
            0,
            "",
            "unattributed",
            f"the xDS{f' ({source})' if source else ''} binds {listed}, which is no "
            "Gateway's address, and Gateway "
            f"{'; '.join(unreached)} has no listener: say which Gateway each address "
            "serves with --gateway-address NAMESPACE/NAME=IP",
        )
    ]


def check_scenario(scn: Scenario, opts: CheckOptions, rules: Sequence[Rule]) -> ScenarioResult:
    ctx, result = prepare(scn, opts, records=True)
    if ctx is None:
        return result
    with loaded_objects_frozen():
        ran = run(rules, ctx)
    result.findings, result.ran, result.skipped = ran.findings, ran.rules_run, ran.rules_skipped
    result.mesh_cases = sum(1 for c in ctx.mesh_cases if not ctx.mesh_judges(c.request))
    if "mesh" in ctx.__dict__:  # the mesh was asked (cached_property)
        result.mesh_requests, result.mesh_unjudged = ctx.mesh.asked, len(ctx.mesh.unjudged)
        result.mesh_unjudged_why = ctx.mesh.why
        result.warnings += [f"not judged: {p}" for p in ctx.mesh.problems]
    result.proxy = opts.proxy or ""
    result.edge_cases_unjudged = len(ctx.edge_cases_unjudged)
    result.left_to_live = [
        (*ctx.case_locations.get(c.name, ("", 0)), c.name, c.live_only)
        for c in ctx.cases
        if c.live_only
    ]
    if scn.expected_findings:
        try:
            skipped = {name for name, _why in ran.rules_skipped}
            not_run = frozenset(c for r in rules if r.name in skipped for c in r.codes)
            judged = expected.judge(scn.expected_findings, ran.findings, not_run)
        except InputErrors as exc:
            result.input_errors += exc.errors
        else:
            result.findings, result.expected = judged.unexpected, judged.expected
            result.input_errors += judged.missing
    if "comparisons" in ctx.__dict__:  # the models were asked (cached_property)
        result.requests, result.asked, result.agreed = ctx.requests, ctx.asked, ctx.agreed
        result.proven = ctx.proven
        result.unjudged = len(ctx.assumed)
    return result


def agreements(paths: Sequence[str], opts: CheckOptions) -> tuple[frozenset[bytes], list[str]]:
    """The digests of the requests both models agree on, in every scenario of
    ``paths`` (``check --baseline DIR|REF``: what agreed in the previous
    configuration). Only the models are asked: no other rule, no Envoy. A scenario
    that does not load adds nothing (its requests are asked again) and says why."""
    opts = replace(opts, baseline=None, save_baseline=True)
    agreed: set[bytes] = set()
    problems: list[str] = []
    for scn in discover(paths, opts):
        ctx, result = prepare(scn, opts, records=True)
        if ctx is None:
            if result.input_errors and not scn.expected_errors:
                first = result.input_errors[0]
                more = len(result.input_errors) - 1
                problems.append(
                    f"{scn.name} does not load ({first}{f', and {more} more' if more else ''}): "
                    "its requests are asked again"
                )
            continue
        with loaded_objects_frozen():
            ctx.comparisons  # noqa: B018 (asks the models; sets ctx.agreed)
        agreed |= ctx.agreed
    return frozenset(agreed), problems


def check_all(
    paths: Sequence[str],
    opts: CheckOptions,
    rules: Sequence[Rule],
    progress: Callable[[int, int, ScenarioResult], None] | None = None,
) -> list[ScenarioResult]:
    if opts.profile not in PROFILES:
        raise InputErrors(
            [
                InputError(
                    "--profile", 0, "", "enum", f"expected one of {', '.join(sorted(PROFILES))}"
                )
            ]
        )
    scenarios = discover(paths, opts)
    results = []
    for i, result in enumerate(_check_each(scenarios, opts, rules)):
        results.append(result)
        if progress is not None:
            progress(i + 1, len(scenarios), result)
    return results


def input_notes(results: Sequence[ScenarioResult]) -> list[str]:
    """What reading the input noted: endpoints derived from workloads, kinds the edge
    does not read, xDS passed over. Facts about the input (``file:line: ...`` where
    they have a line), not findings: no ``--fail-on`` counts them. In a suite each
    starts with its scenario's name."""
    many = len(results) > 1
    return [f"{r.scenario.name}: {w}" if many else w for r in results for w in r.warnings]


# Scenarios are independent: a suite of them (``edge-verify check fixtures/``)
# is split over the cores, results in scenario order. A worker checks its
# scenario serially (no grandchildren: see ``verifier.forked.can_fork``).
PARALLEL_MIN_SCENARIOS = 4


def _check_each(
    scenarios: list[Scenario], opts: CheckOptions, rules: Sequence[Rule]
) -> Iterator[ScenarioResult]:
    def one(scn: Scenario) -> ScenarioResult:
        return check_scenario(scn, opts, rules)

    return map_forked(one, scenarios, min_items=PARALLEL_MIN_SCENARIOS)


def reported(result: ScenarioResult) -> ScenarioReport:
    """A scenario's result as the reports name it."""
    return ScenarioReport(
        result.scenario.name,
        result.cases,
        tuple(result.findings),
        tuple(result.ran),
        tuple(result.skipped),
        tuple(result.warnings),
    )


def summary(results: Sequence[ScenarioResult], *, baseline: bool = False) -> dict[str, Any]:
    findings = [f for r in results for f in r.findings]
    out: dict[str, Any] = {
        "errors": sum(1 for f in findings if f.severity == "error"),
        "warnings": sum(1 for f in findings if f.severity == "warning"),
        "rules_run": max((len(r.ran) for r in results), default=0),
        "rules_skipped": max((len(r.skipped) for r in results), default=0),
    }
    if any(r.expected for r in results):  # declared by their scenarios: they pass
        out["expected"] = sum(len(r.expected) for r in results)
    notes = sum(len(r.warnings) for r in results)
    if notes:  # counted apart: a note is about the input, never a finding
        out["input_notes"] = notes
    if len(results) > 1 or (results and results[0].scenario.suite):
        out["scenarios"] = len(results)
    left = sum(len(r.left_to_live) for r in results)
    if left:  # said, never silently dropped: these cases are judged in part only
        out["left_to_live"] = left
    asked = sum(r.mesh_requests for r in results)
    if asked:  # the mesh requests compared, on their client's sidecar or kube-proxy's
        out["mesh_requests"] = asked
    mesh = sum(r.mesh_cases for r in results)
    if mesh:  # said, never silently passed: judged by one model, not two
        out["mesh_cases_spec_only"] = mesh
    mesh_unjudged = sum(r.mesh_unjudged for r in results)
    if mesh_unjudged:  # their client's sidecar xDS is not there: said, never dropped
        out["mesh_unjudged"] = mesh_unjudged
    edge = sum(r.edge_cases_unjudged for r in results)
    if edge:  # check --xds --proxy: the edge's xDS was not given
        out["edge_cases_unjudged"] = edge
    unjudged = sum(r.unjudged for r in results)
    if unjudged:  # requests whose Envoy answer rests on an assumption (EV110)
        out["unjudged"] = unjudged
    if baseline:
        out["baseline"] = {
            "requests": sum(r.requests for r in results),
            "asked": sum(r.asked for r in results),
            # Proven by the decision lists, never asked (docs/check.md): without them a
            # reader could not tell a cache hit from a proof.
            "proven": sum(r.proven for r in results),
        }
    return out
