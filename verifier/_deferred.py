"""Let pydantic build envoy-data-plane's schemas when a message class is first used.

envoy-data-plane's generated modules declare every message a pydantic dataclass, and
pydantic tries to build each one's validator as the class is created. Most attempts
fail on forward references and are thrown away; the rest build validators for classes
a run never validates. Measured on 2026-12-02 (2-core sandbox), importing the six
modules ``check`` needs took 0.50-0.83 s that way and 0.54-0.58 s with pydantic's
documented ``defer_build`` option, which changes when a schema is built, not what it
is: pydantic builds it on the class's first validation (``verifier.xds.codec`` does the
same for the classes it vouches for). The option is set for envoy-data-plane's classes
only, and before its first module runs, by a finder that waits for its import: so
commands that never import it (``--version``, ``--help``) do not import pydantic either.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

PACKAGE = "envoy_data_plane"


def _defer_envoy_data_plane() -> None:
    import pydantic.dataclasses

    original: Callable[..., Any] = pydantic.dataclasses.dataclass

    def dataclass(_cls: type | None = None, /, **options: Any) -> Any:
        def make(cls: type) -> Any:
            if cls.__module__.startswith(PACKAGE + "."):
                config = {**(options.get("config") or {}), "defer_build": True}
                return original(cls, **{**options, "config": config})
            return original(cls, **options)

        return make if _cls is None else make(_cls)

    pydantic.dataclasses.dataclass = dataclass


class _BeforeEnvoyDataPlane:
    """A meta path finder (not derived from importlib.abc's: that import alone takes
    12 ms) that finds nothing; on the package's first import it sets the option and
    leaves."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == PACKAGE:
            sys.meta_path.remove(self)
            _defer_envoy_data_plane()
        return None


def install() -> None:
    if PACKAGE in sys.modules:
        return  # imported before us (a test process): its classes are made already
    if not any(isinstance(f, _BeforeEnvoyDataPlane) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeEnvoyDataPlane())
