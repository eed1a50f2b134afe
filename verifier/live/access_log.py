"""Envoy's access log, read as it grows, within a fixed memory bound.

The access log (``served.with_access_log``) is how a live answer is attributed to
the xDS route that served it: one JSON object per request, carrying our request
id. The file is Envoy's to write and may be anything (a run of a huge table, a
line without its end, bytes that are not JSON), so it is read from where the last
read stopped, a bounded piece at a time; a line longer than ``MAX_LINE`` is
dropped whole, and only the lines of requests the harness sent and has not yet
claimed are kept. What stays in memory is bounded by the requests this run sent,
never by what the file holds.
"""

from __future__ import annotations

import json
from pathlib import Path

from verifier.live.client import AccessEntry

MAX_LINE = 4096  # our format's line is ~200 bytes; a longer one is not ours
READ_CHUNK = 64 * 1024
MAX_READ = 4 * 1024 * 1024  # per poll: a huge log is caught up with over several polls
KEYS = frozenset({"id", "route", "cluster", "code", "flags"})  # served.LOG_FORMAT's


def parse_line(line: bytes) -> tuple[str, AccessEntry] | None:
    """(request id, entry) of one line of our format; None for any other line."""
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not doc.keys() >= KEYS:
        return None
    rid = doc.get("id")
    if not isinstance(rid, str) or not rid or rid == "-":
        return None
    code = str(doc.get("code"))

    def text(key: str, empty: str) -> str:
        value = doc.get(key)
        return value if isinstance(value, str) and value not in ("", "-") else empty

    entry = AccessEntry(
        route=text("route", ""),
        cluster=text("cluster", ""),
        code=int(code) if code.isdigit() and len(code) <= 3 else 0,
        flags=text("flags", "-"),
    )
    return rid, entry


class AccessLogReader:
    """The entries of the requests ``expect``ed, read incrementally from ``path``.

    ``expect(id)`` when a request is sent; ``poll()`` reads what Envoy has written
    since the last poll; ``claim(ids)`` hands over (and forgets) the entries found.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""
        self._overlong = False  # inside a line already past MAX_LINE: drop to its end
        self._expected: set[str] = set()
        self._found: dict[str, AccessEntry] = {}

    def expect(self, rid: str) -> None:
        self._expected.add(rid)

    def poll(self) -> None:
        """Read at most ``MAX_READ`` new bytes (a missing file is an empty one)."""
        try:
            with self.path.open("rb") as f:
                if f.seek(0, 2) < self.offset:  # truncated: start again
                    self.offset, self._partial, self._overlong = 0, b"", False
                f.seek(self.offset)
                budget = MAX_READ
                while budget > 0:
                    chunk = f.read(min(READ_CHUNK, budget))
                    if not chunk:
                        break
                    self.offset += len(chunk)
                    budget -= len(chunk)
                    self._feed(chunk)
        except OSError:
            return

    def _feed(self, chunk: bytes) -> None:
        *lines, rest = chunk.split(b"\n")
        for piece in lines:
            if self._overlong:
                self._overlong = False  # the end of the overlong line
            else:
                self._take(self._partial + piece)
            self._partial = b""
        if self._overlong:
            return
        self._partial += rest
        if len(self._partial) > MAX_LINE:
            self._partial, self._overlong = b"", True

    def _take(self, line: bytes) -> None:
        if len(line) > MAX_LINE:
            return
        parsed = parse_line(line)
        if parsed is not None and parsed[0] in self._expected:
            self._found[parsed[0]] = parsed[1]

    def has(self, ids: set[str]) -> bool:
        return ids <= self._found.keys()

    def claim(self, ids: set[str]) -> dict[str, AccessEntry]:
        """The entries of ``ids`` found so far; those ids are no longer expected."""
        self._expected -= ids
        return {rid: self._found.pop(rid) for rid in ids if rid in self._found}
