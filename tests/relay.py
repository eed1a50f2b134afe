"""Bytes both ways between two connections, for tests that stand in for a network hop
(a LoadBalancer in front of the edge, the kubelet dialling a pod's port)."""

from __future__ import annotations

import asyncio
import contextlib


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """``reader`` to ``writer`` until its end, which is passed on (the other way may go on)."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.write_eof()


async def splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """``a`` and ``b`` joined until both ends are done, then both closed."""
    try:
        await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))
    finally:
        a[1].close()
        b[1].close()
