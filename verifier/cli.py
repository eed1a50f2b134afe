"""Command line: argument parsing, and turning bad input into exit code 2.

Each command is one small function that calls the library. Only the project's
own error types and OSError are caught here, and both are reported as
``file:line: field: message [code]`` lines; anything else is a bug in the tool
and keeps its traceback so it can be reported.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from rich.console import Console

from verifier.errors import InputError, InputErrors
from verifier.gatewayapi.attach import DEFAULT_CONTROLLER, build_graph
from verifier.gatewayapi.mesh_registry import load_mesh_registry
from verifier.gatewayapi.resources import Resources, load_resources
from verifier.report import status as report

EXIT_OK = 0
EXIT_BAD_INPUT = 2  # the same code argparse uses for a bad command line
DEFAULT_TRUST_DOMAIN = "cluster.local"

Command = Callable[[argparse.Namespace], int]


def _version() -> str:
    try:
        return version("edge-verifier")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def _warn(res: Resources) -> None:
    """Ignored kinds are reported, so nothing in the input is dropped silently."""
    for warning in res.warnings:
        print(f"warning: {warning}", file=sys.stderr)


def _write(text: str, output: str | None) -> None:
    """Write to stdout or to ``output``; the file is only touched once the result exists."""
    if not text.endswith("\n"):
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


def cmd_translate(args: argparse.Namespace) -> int:
    """Write the config_dump the aether edge would serve for the given resources."""
    # Imported here so `status` and `--version` do not pay for loading the xDS
    # protobuf types.
    from verifier.translate import TranslateOptions, translate
    from verifier.xds.snapshot import dumps

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
    graph = build_graph(res, args.controller_name)
    opts = TranslateOptions(
        controller_name=args.controller_name,
        trust_domain=args.trust_domain,
        mesh_registry=registry,
    )
    _write(dumps(translate(res, graph, opts)), args.output)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    """Print the Gateway and HTTPRoute status a controller would write."""
    res = load_resources(args.paths)
    _warn(res)
    graph = build_graph(res, args.controller_name)
    if args.output == "yaml":
        sys.stdout.write(report.format_yaml(report.status_documents(res, graph)))
        return EXIT_OK
    lines = report.status_lines(res, graph)
    if not lines:
        print(f"no Gateway of controller {args.controller_name} found", file=sys.stderr)
    elif sys.stdout.isatty():
        report.print_rich(lines, Console())
    else:
        sys.stdout.write(report.format_text(lines))
    return EXIT_OK


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="YAML files or directories (read recursively); '-' reads stdin",
    )
    p.add_argument(
        "--controller-name",
        default=DEFAULT_CONTROLLER,
        metavar="NAME",
        help=f"GatewayClass controllerName to act for (default: {DEFAULT_CONTROLLER})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edge-verify",
        description="Translate Kubernetes Gateway API resources into the Envoy xDS "
        "the aether edge proxy serves, and report their status.",
        epilog="Exit codes: 0 success, 2 bad input or bad command line.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tr = sub.add_parser(
        "translate",
        help="write the xDS config_dump JSON",
        description="Write the Envoy config_dump JSON the aether edge would serve.",
    )
    _add_common(tr)
    tr.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    tr.add_argument(
        "--trust-domain",
        default=DEFAULT_TRUST_DOMAIN,
        metavar="TD",
        help=f"SPIFFE trust domain of mesh backends (default: {DEFAULT_TRUST_DOMAIN})",
    )
    tr.add_argument(
        "--mesh-registry",
        metavar="FILE",
        help="YAML list of the Services enrolled in the mesh (reached over mTLS on :15008)",
    )
    tr.set_defaults(run=cmd_translate)

    st = sub.add_parser(
        "status",
        help="print Gateway and HTTPRoute status",
        description="Print the status a Gateway API controller would write.",
    )
    _add_common(st)
    st.add_argument(
        "-o",
        "--output",
        choices=("text", "yaml"),
        default="text",
        help="text: one line per condition (default); yaml: the status stanzas",
    )
    st.set_defaults(run=cmd_status)
    return parser


def _report(errors: Sequence[InputError]) -> int:
    for err in errors:
        print(err, file=sys.stderr)
    n = len(errors)
    print(f"edge-verify: {n} input error{'s' if n != 1 else ''}", file=sys.stderr)
    return EXIT_BAD_INPUT


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run: Command = args.run
    try:
        return run(args)
    except InputErrors as exc:
        return _report(exc.errors)
    except BrokenPipeError:
        # The reader went away (`| head`): not an input problem, and Python would
        # complain again while flushing stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as exc:
        where = str(exc.filename) if exc.filename is not None else "<io>"
        return _report([InputError(where, 0, "", "os-error", exc.strerror or str(exc))])


if __name__ == "__main__":
    sys.exit(main())
