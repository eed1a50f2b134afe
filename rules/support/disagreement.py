"""Building block for rules that report spec/Envoy disagreements they own.

The comparisons and their attribution happen once in ``verifier.check``; a
feature rule only says which code it reports and where in the HTTPRoute the
finding should point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from verifier.check import Comparison, Context
from verifier.findings import Finding
from verifier.registry import Rule

Locator = Callable[[Comparison, Context], str]


def filter_path(kind: str) -> Locator:
    """Point at the rule's first filter of ``kind`` (falls back to the match)."""

    def locate(c: Comparison, ctx: Context) -> str:
        rule = ctx.rule_of(c)
        if rule is None:
            return ""
        for f in rule.filters:
            if f.type == kind:
                return f.path
        for b in rule.backend_refs:
            for f in b.filters:
                if f.type == kind:
                    return f.path
        return ""

    return locate


def rule_path(c: Comparison, ctx: Context) -> str:
    return "" if c.witness.rule is None else f"spec.rules[{c.witness.rule}]"


def disagreement_rule(
    *,
    name: str,
    code: str,
    features: tuple[str, ...],
    spec_ref: str,
    doc: str,
    locate: Locator | None = None,
) -> Rule:
    def check(ctx: Context) -> Iterable[Finding]:
        for c in ctx.disagreements.get(name, []):
            path = locate(c, ctx) if locate else ""
            yield ctx.comparison_finding(code, name, c, path)

    return Rule(name, (code,), features, spec_ref, (doc or "").strip(), check, reads_models=True)
