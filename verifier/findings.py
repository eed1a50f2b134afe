"""Findings and the message catalogue they are built from.

Call sites name a code and pass values; the text comes from
``messages.yaml`` so wording lives in one place and tests assert on
(code, resource, location), never on prose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any, Final

import yaml

from verifier.errors import clip_message
from verifier.inputs import COMPOSER

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Message:
    code: str
    level: str
    template: str
    spec_ref: str


@cache
def _messages_yaml() -> dict[str, Any]:
    """messages.yaml, read once a process, by libyaml where PyYAML has it (2 ms; 29 ms
    in Python, each time a run made its first finding)."""
    text = importlib_resources.files("verifier").joinpath("messages.yaml").read_text("utf-8")
    data: dict[str, Any] = yaml.load(text, Loader=COMPOSER)
    return data


@cache
def catalogue() -> dict[str, Message]:
    return {
        code: Message(code, str(m["level"]), str(m["template"]), str(m.get("spec_ref", "")))
        for code, m in _messages_yaml()["messages"].items()
    }


# A reference to a page of these docs, as messages.yaml and the rules write it:
# ``docs/<page>.md#<anchor>``. Every other reference is an https URL.
DOCS: Final = "docs/"


def reference(spec_ref: str) -> str:
    """Where a finding's reference can be read. A URL is itself; a page of these docs
    is the ``file://`` URI of that page in this copy: the package's own ``docs``
    (installed from docs/ as package data, pyproject.toml) or, in a source checkout,
    docs/ beside the package. ``fixtures/README.md`` and the like exist in neither."""
    if not spec_ref.startswith(DOCS):
        return spec_ref
    page, _, anchor = spec_ref.removeprefix(DOCS).partition("#")
    package = Path(__file__).resolve().parent
    for docs in (package / "docs", package.parent / "docs"):
        if (docs / page).is_file():
            return (docs / page).as_uri() + (f"#{anchor}" if anchor else "")
    return spec_ref


@cache
def retired() -> frozenset[str]:
    return frozenset((_messages_yaml().get("retired") or {}).keys())


def hint(key: str, **params: Any) -> str:
    """A fix a finding suggests (``hints:`` in messages.yaml), filled with ``params``:
    the wording of a "did you mean" lives in the catalogue like the findings'."""
    template = str(_messages_yaml()["hints"][key])
    return template.format(**params)


@dataclass(frozen=True, order=True)
class Related:
    """Another place a finding is about: the resource line behind a failing case, the
    case behind a mistake. ``what`` names it in a few words."""

    file: str
    line: int
    what: str

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.file else ""

    def to_json(self) -> dict[str, Any]:
        return {"location": self.location, "what": self.what}


@dataclass(frozen=True, order=True)
class Finding:
    """One problem: where it is in the YAML and the xDS, and a request that shows it."""

    file: str
    line: int
    code: str
    rule: str
    severity: str
    message: str
    resource: str = ""
    xds_path: str = ""
    request: dict[str, Any] | None = field(default=None, compare=False)
    expected: dict[str, Any] | None = field(default=None, compare=False)
    actual: dict[str, Any] | None = field(default=None, compare=False)
    spec_ref: str = field(default="", compare=False)
    related: tuple[Related, ...] = field(default=(), compare=False)

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.file else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "resource": self.resource,
            "location": self.location,
            "xds_path": self.xds_path,
            "request": self.request,
            "expected": self.expected,
            "actual": self.actual,
            "related": [r.to_json() for r in self.related],
        }


def new(
    code: str,
    rule: str,
    *,
    file: str = "",
    line: int = 0,
    resource: str = "",
    xds_path: str = "",
    request: dict[str, Any] | None = None,
    expected: dict[str, Any] | None = None,
    actual: dict[str, Any] | None = None,
    related: tuple[Related, ...] = (),
    **params: Any,
) -> Finding:
    """Build a finding from the catalogue; unknown codes are a programming error."""
    msg = catalogue()[code]
    return Finding(
        file=file,
        line=line,
        code=code,
        rule=rule,
        severity=msg.level,
        message=clip_message(msg.template.format(**params)),
        resource=resource,
        xds_path=xds_path,
        request=request,
        expected=expected,
        actual=actual,
        spec_ref=msg.spec_ref,
        related=related,
    )
