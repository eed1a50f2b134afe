"""Errors that are part of the interface: bad input is reported, never a traceback."""

from __future__ import annotations

import re
from dataclasses import dataclass

# How much of one value a message quotes, and of one message (findings, errors).
QUOTE_LIMIT = 200
MESSAGE_LIMIT = 2_000
_LONG_WORD = re.compile(rf"\S{{{QUOTE_LIMIT + 1},}}")


def clip(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` whole up to ``limit`` characters, else its start and end around how
    much was left out: a 1 MB regex is still recognisable without a megabyte of
    output each time a message mentions it."""
    if len(text) <= limit:
        return text
    keep = limit // 2
    return f"{text[:keep]}...[{len(text) - 2 * keep:,} characters]...{text[-keep:]}"


def clip_message(text: str) -> str:
    """A message for people: each overlong run of non-blanks (a quoted value, or
    Envoy's own words quoting one) clipped, then the whole if it is still too long."""
    if len(text) <= QUOTE_LIMIT:
        return text
    return clip(_LONG_WORD.sub(lambda m: clip(m.group()), text), MESSAGE_LIMIT)


@dataclass(frozen=True, order=True)
class InputError:
    """A problem in the user's input, pointing at the line they must edit.

    ``code`` is stable (tests and scripts match on it); ``message`` says what
    was expected in words. ``line`` 0 means the whole file (unreadable, missing).
    """

    file: str
    line: int
    field: str
    code: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        fld = f" {self.field}:" if self.field else ""
        return f"{where}:{fld} {clip_message(self.message)} [{self.code}]"


class InputErrors(Exception):
    """Raised with every error found, so one run reports all bad objects at once."""

    def __init__(self, errors: list[InputError]) -> None:
        super().__init__(f"{len(errors)} input error(s)")
        self.errors = sorted(errors)
