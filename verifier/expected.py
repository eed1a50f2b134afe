"""The findings a deliberately broken scenario declares, in ``expected-findings.yaml``.

A fixture that shows a configuration mistake on purpose (a backendRef to a Service
that does not exist, a route no listener accepts) makes ``check`` report it, as it
should. Declaring those findings beside the scenario keeps ``check fixtures/``
meaningful: the scenario passes when exactly the declared findings are reported, and
fails on an extra one (reported as found) or a missing one (an input error at its
declaration, as a negative scenario's missing ``expected-errors.yaml`` entry is; the
extra ones are then input errors beside it, so the whole difference shows at once).
A declaration is a list of::

    - {code: EV905, file: resources.yaml, line: 29, resource: HTTPRoute edge-infra/missing-backend}

``file`` is relative to the scenario's folder (``../base/gateways.yaml`` for the base).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from verifier.errors import InputError, InputErrors
from verifier.findings import Finding
from verifier.inputs import line_of_field, load_yaml, read_text

FILE = "expected-findings.yaml"
FIELDS = {"code": str, "file": str, "line": int, "resource": str}

# (code, resolved file, line, resource)
Key = tuple[str, str, int, str]


@dataclass(frozen=True)
class Judged:
    """A scenario's findings against its declaration."""

    unexpected: list[Finding]  # reported and not declared: the scenario fails on them
    expected: list[Finding]  # reported as declared
    missing: list[InputError]  # declared and not reported, at the declaration's line


def _key(f: Finding) -> Key:
    return (f.code, str(Path(f.file).resolve()) if f.file else "", f.line, f.resource)


def load(path: str) -> dict[Key, int]:
    """Each declared finding, with the line that declares it; a malformed declaration
    is bad input (exit 2), never a declaration of nothing."""
    data, node = load_yaml(read_text(path), path)
    if node is None:
        return {}
    if not isinstance(data, list) or not isinstance(node, yaml.SequenceNode):
        raise InputErrors([InputError(path, 1, "", "type", "a list of expected findings")])
    folder = Path(path).parent
    out: dict[Key, int] = {}
    errors = []
    for i, (item, item_node) in enumerate(zip(data, node.value, strict=True)):
        line = item_node.start_mark.line + 1
        problem = _problem(item)
        if problem is not None:
            field, message = problem
            at = line_of_field(node, f"[{i}].{field}") if field else line
            errors.append(InputError(path, at, f"[{i}].{field}".rstrip("."), "type", message))
            continue
        file = str((folder / item["file"]).resolve())
        out[(item["code"], file, item["line"], item["resource"])] = line
    if errors:
        raise InputErrors(errors)
    return out


def _problem(item: object) -> tuple[str, str] | None:
    """(field, what is wrong) with one declared finding, or None."""
    if not isinstance(item, dict):
        return "", "an expected finding is a mapping of " + ", ".join(FIELDS)
    for key in item:
        if key not in FIELDS:
            return str(key), f"unknown field {key!r}: expected " + ", ".join(FIELDS)
    for key, kind in FIELDS.items():
        value = item.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            return key, f"{key} is required, a {kind.__name__}"
    return None


def judge(path: str, findings: list[Finding], not_run: frozenset[str] = frozenset()) -> Judged:
    """``findings`` against the declaration at ``path``. ``not_run``: the codes of the
    rules that did not run (a profile that does not claim their feature): a finding
    they would report is not missing, and the report says those rules were skipped."""
    want = {key: line for key, line in load(path).items() if key[0] not in not_run}
    unexpected = [f for f in findings if _key(f) not in want]
    expected = [f for f in findings if _key(f) in want]
    got = {_key(f) for f in expected}
    missing = [
        InputError(path, line, code, "expected-finding", f"not reported: {code} at {where}")
        for (code, file, ln, resource), line in sorted(want.items(), key=lambda kv: kv[1])
        if (code, file, ln, resource) not in got
        for where in [f"{Path(file).name}:{ln} ({resource})"]
    ]
    if missing:
        # The declaration is out of date: show the whole difference in one place, the
        # findings it does not declare beside the ones it misses (the report, which
        # would carry them, is not written for bad input).
        missing += [
            InputError(f.file, f.line, f.code, "unexpected-finding", f"not declared: {f.message}")
            for f in unexpected
        ]
        unexpected = []
    return Judged(unexpected, expected, missing)
