"""``findings.new`` for templates whose fields collide with ``new``'s own arguments.

EV102's ``{code}``, EV105's and EV222's ``{expected}``/``{actual}`` share their names
with ``new``'s parameters (the finding code, the structured expected/actual values),
so ``new`` cannot fill them. Until the catalogue renames them, this builds the same
Finding from the same catalogue entry; the text still comes from ``messages.yaml``.
"""

from __future__ import annotations

from typing import Any

from verifier.findings import Finding, catalogue, new

_COLLIDING = frozenset(
    {"code", "rule", "file", "line", "resource", "xds_path", "request", "expected", "actual"}
)


def finding(
    code: str,
    rule: str,
    template: dict[str, Any],
    *,
    file: str = "",
    line: int = 0,
    resource: str = "",
    xds_path: str = "",
    expected: dict[str, Any] | None = None,
    actual: dict[str, Any] | None = None,
) -> Finding:
    if not _COLLIDING & template.keys():
        return new(
            code,
            rule,
            file=file,
            line=line,
            resource=resource,
            xds_path=xds_path,
            expected=expected,
            actual=actual,
            **template,
        )
    msg = catalogue()[code]
    return Finding(
        file=file,
        line=line,
        code=code,
        rule=rule,
        severity=msg.level,
        message=msg.template.format(**template),
        resource=resource,
        xds_path=xds_path,
        expected=expected,
        actual=actual,
        spec_ref=msg.spec_ref,
    )
