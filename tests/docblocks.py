"""Generated blocks inside hand-written docs, kept current like goldens.

A doc marks a block ``<!-- BEGIN GENERATED: name -->`` ... ``<!-- END GENERATED: name -->``;
a test renders the block from the code or from a real run and compares. Prose around it
stays hand-written, but no number in the block comes from memory.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_goldens import check_golden


def begin(name: str) -> str:
    return f"<!-- BEGIN GENERATED: {name} -->"


def end(name: str) -> str:
    return f"<!-- END GENERATED: {name} -->"


def check_block(path: Path, name: str, body: str, update: bool, how: str) -> str | None:
    """Compare (or rewrite) one block of ``path``; ``how`` names the test that refreshes it."""
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(begin(name)) + ".*?" + re.escape(end(name)), re.S)
    found = pattern.findall(text)
    if len(found) != 1:
        return f"{path.name} needs exactly one {begin(name)} block, has {len(found)}"
    block = "\n".join([begin(name), body.rstrip("\n"), end(name)])
    problem = check_golden(path, pattern.sub(lambda _: block, text), update)
    return problem.replace("pytest --update-goldens", how) if problem else None
