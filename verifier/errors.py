"""Errors that are part of the interface: bad input is reported, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass


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
        return f"{where}:{fld} {self.message} [{self.code}]"


class InputErrors(Exception):
    """Raised with every error found, so one run reports all bad objects at once."""

    def __init__(self, errors: list[InputError]) -> None:
        super().__init__(f"{len(errors)} input error(s)")
        self.errors = sorted(errors)
