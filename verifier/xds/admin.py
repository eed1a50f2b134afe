"""Read a running Envoy's admin ``/config_dump`` and say what it did not take.

What a proxy holds is only half of what an SRE needs: the other half is what it
refused (``error_state``, with Envoy's own words), what it has not finished loading
(warming listeners and clusters), and whether its types come from one control-plane
push or several (resources of one type at different versions). These are facts about
one running proxy at one moment, not findings about the xDS against the spec, so they
are report lines, not rule findings with codes (see docs/pull.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import aiohttp

from verifier.xds.codec import Json

# @type suffix -> (kind, the lists of entries it holds, and whether they are warming)
_SECTIONS: Final = {
    "ClustersConfigDump": (
        "clusters",
        (("dynamic_active_clusters", False), ("dynamic_warming_clusters", True)),
    ),
    "EndpointsConfigDump": ("endpoints", (("dynamic_endpoint_configs", False),)),
    "ListenersConfigDump": ("listeners", (("dynamic_listeners", False),)),
    "RoutesConfigDump": ("routes", (("dynamic_route_configs", False),)),
    "SecretsConfigDump": (
        "secrets",
        (("dynamic_active_secrets", False), ("dynamic_warming_secrets", True)),
    ),
}


class AdminError(Exception):
    """The admin endpoint could not be read, or what it answered is not a config_dump."""


@dataclass(frozen=True)
class Observation:
    level: str  # "error": Envoy rejected an update; "warning": warming or mixed versions
    kind: str
    name: str
    message: str

    def line(self) -> str:
        where = f"{self.kind}/{self.name}" if self.name else self.kind
        return f"edge-verify: {self.level}: {where}: {self.message}"


def config_dump_url(base: str) -> str:
    """``http(s)://HOST:PORT`` (any path ignored) -> its ``/config_dump?include_eds``."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise AdminError(f"{base}: expected http://HOST:PORT or https://HOST:PORT")
    return f"{parts.scheme}://{parts.netloc}/config_dump?include_eds"


async def fetch(base: str, timeout: float) -> dict[str, Json]:
    """The config_dump document, bounded by ``timeout`` from connect to last byte."""
    url = config_dump_url(base)
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http,
            http.get(url) as resp,
        ):
            text = await resp.text()
            if resp.status != 200:
                raise AdminError(f"{url}: HTTP {resp.status}: {text.strip()[:200]}")
    except TimeoutError:
        raise AdminError(f"{url}: no complete answer within {timeout:g}s") from None
    except aiohttp.ClientError as exc:
        raise AdminError(f"{url}: {exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AdminError(f"{url}: not JSON: {exc.msg}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("configs"), list):
        raise AdminError(f"{url}: not a config_dump (no configs list)")
    return doc


def _name(entry: dict[str, Json]) -> str:
    if isinstance(entry.get("name"), str):
        return str(entry["name"])
    for key in ("cluster", "route_config", "endpoint_config", "secret"):
        inner = entry.get(key)
        if isinstance(inner, dict):
            return str(inner.get("name") or inner.get("cluster_name") or "")
    failed = entry.get("error_state")
    if isinstance(failed, dict) and isinstance(failed.get("failed_configuration"), dict):
        conf = failed["failed_configuration"]
        assert isinstance(conf, dict)
        return str(conf.get("name") or conf.get("cluster_name") or "")
    return ""


def _entries(doc: dict[str, Json]) -> Iterator[tuple[str, bool, dict[str, Json]]]:
    """(kind, warming, entry) for every dynamic resource entry of the five types."""
    for config in doc.get("configs") or []:
        if not isinstance(config, dict):
            continue
        suffix = str(config.get("@type", "")).rsplit(".", 1)[-1]
        if suffix not in _SECTIONS:
            continue
        kind, sections = _SECTIONS[suffix]
        for section, warming in sections:
            for entry in config.get(section) or []:
                if isinstance(entry, dict):
                    yield kind, warming, entry


def _version(entry: dict[str, Json]) -> str:
    for state in ("active_state", "warming_state"):
        inner = entry.get(state)
        if isinstance(inner, dict) and "version_info" in inner:
            return str(inner["version_info"])
    return str(entry.get("version_info", ""))


def _active(kind: str, warming: bool, entry: dict[str, Json]) -> bool:
    return not warming and (kind != "listeners" or "active_state" in entry)


def observe(doc: dict[str, Json]) -> list[Observation]:
    """Rejected updates (Envoy's message verbatim), warming resources, and types whose
    resources are at more than one version."""
    out: list[Observation] = []
    versions: dict[str, set[str]] = {}
    for kind, warming, entry in _entries(doc):
        name = _name(entry)
        failed = entry.get("error_state")
        if isinstance(failed, dict):
            details = str(failed.get("details", "")).strip()
            tried = failed.get("version_info")
            at = f" version {tried}" if tried else ""
            out.append(
                Observation("error", kind, name, f"Envoy rejected the update{at}: {details}")
            )
        if warming or (kind == "listeners" and "warming_state" in entry):
            out.append(
                Observation("warning", kind, name, f"warming (version {_version(entry) or '?'})")
            )
        if _active(kind, warming, entry):
            versions.setdefault(kind, set()).add(_version(entry))
    for kind, seen in sorted(versions.items()):
        seen.discard("")
        if len(seen) > 1:
            listed = ", ".join(sorted(seen))
            out.append(
                Observation(
                    "warning",
                    kind,
                    "",
                    f"active resources are at {len(seen)} versions ({listed}): "
                    "not all from one push",
                )
            )
    return out


def version_summary(doc: dict[str, Json]) -> str:
    """One line: each type's active versions, so types from different pushes stand out."""
    seen: dict[str, set[str]] = {}
    for kind, warming, entry in _entries(doc):
        if _active(kind, warming, entry):
            v = _version(entry)
            if v:
                seen.setdefault(kind, set()).add(v)
    parts = [f"{k} {'/'.join(sorted(v))}" for k, v in sorted(seen.items())]
    return "edge-verify: versions: " + ("; ".join(parts) if parts else "none")
