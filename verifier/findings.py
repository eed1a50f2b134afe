"""Findings and the message catalogue they are built from.

Call sites name a code and pass values; the text comes from
``messages.yaml`` so wording lives in one place and tests assert on
(code, resource, location), never on prose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources as importlib_resources
from typing import Any

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


@cache
def retired() -> frozenset[str]:
    return frozenset((_messages_yaml().get("retired") or {}).keys())


def hint(key: str, **params: Any) -> str:
    """A fix a finding suggests (``hints:`` in messages.yaml), filled with ``params``:
    the wording of a "did you mean" lives in the catalogue like the findings'."""
    template = str(_messages_yaml()["hints"][key])
    return template.format(**params)


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
    )
