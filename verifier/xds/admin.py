"""Read a running Envoy's admin ``/config_dump`` and say what it did not take.

What a proxy holds is only half of what an SRE needs: the other half is what it
refused (``error_state``, with Envoy's own words), what it has not finished loading
(warming listeners and clusters), and whether its types come from one control-plane
push or several (resources of one type at different versions). These are facts about
one running proxy at one moment, not findings about the xDS against the spec, so they
are report lines, not rule findings with codes (see docs/pull.md).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qs, urlsplit

import aiohttp

from verifier.inputs import decode, load_json
from verifier.peers import Budget, check_timeout, printable
from verifier.xds.codec import Json
from verifier.xds.layout import DUMP_TYPES

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
# The charsets a JSON body may declare: JSON is UTF-8 (RFC 8259), ASCII a subset.
_UTF8: Final = frozenset({"utf-8", "utf8", "us-ascii", "ascii"})
# How much of an error answer's body is read, to quote its start.
ERROR_BODY: Final = 4096


class AdminError(Exception):
    """The admin endpoint could not be read, or what it answered is not a config_dump."""


@dataclass(frozen=True)
class Observation:
    level: str  # "error": Envoy rejected an update; "warning": warming or mixed versions
    kind: str
    name: str
    message: str

    def line(self) -> str:
        """The report line; the name and message are the peer's words, so they are
        printed escaped and without any key they quote (``printable``)."""
        where = f"{self.kind}/{printable(self.name)}" if self.name else self.kind
        return f"edge-verify: {self.level}: {where}: {printable(self.message)}"


def config_dump_url(base: str) -> str:
    """``http(s)://HOST:PORT`` (any path ignored) -> its ``/config_dump?include_eds``."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise AdminError(f"{base}: expected http://HOST:PORT or https://HOST:PORT")
    return f"{parts.scheme}://{parts.netloc}/config_dump?include_eds"


def url_timeout(base: str) -> float | None:
    """The ``timeout=S`` of a ``--xds http(s)://HOST:PORT?timeout=S`` source, if given
    (as ``ads://`` sources take it); refused unless a finite number above 0."""
    values = parse_qs(urlsplit(base).query, keep_blank_values=True).get("timeout")
    if not values:
        return None
    try:
        return check_timeout(float(values[-1]))
    except ValueError:
        raise AdminError(f"{base}: timeout must be a finite number of seconds above 0") from None


def budget_for(base: str, timeout: float, max_bytes: int) -> Budget:
    return Budget(f"admin {config_dump_url(base)}", timeout, max_bytes)


async def fetch(base: str, budget: Budget) -> dict[str, Json]:
    """The config_dump document, within ``budget``: its deadline from connect to the
    last byte, its byte budget over the body (an announced Content-Length past it is
    refused before reading). Redirects are not followed (an Envoy's admin endpoint
    never redirects; one that does is not one, and may point anywhere, the cloud's
    metadata address included), nor is any encoding but identity accepted. The body
    is read as a file is (``verifier.inputs``: UTF-8, depth, integers, duplicates)."""
    url = config_dump_url(base)
    try:
        async with asyncio.timeout(budget.left()):
            status, body, charset = await _get(url, budget)
    except TimeoutError:
        raise budget.expired() from None
    except aiohttp.ClientError as exc:
        raise AdminError(f"{url}: {printable(exc)}") from None
    except OSError as exc:
        raise AdminError(f"{url}: {printable(exc.strerror or exc)}") from None
    if status != 200:
        start = body.decode("utf-8", "replace").strip()
        raise AdminError(f"{url}: HTTP {status}: {printable(start, 200)}")
    if charset is not None and charset.lower() not in _UTF8:
        raise AdminError(
            f"{url}: answered in charset {printable(charset, 60)}; a config_dump is UTF-8 JSON"
        )
    doc = load_json(decode(body, url), url)
    return config_dump(doc, url)


async def _get(url: str, budget: Budget) -> tuple[int, bytes, str | None]:
    """(status, body, declared charset) of one GET, the body counted into ``budget``."""
    async with (
        aiohttp.ClientSession(auto_decompress=False) as http,
        http.get(url, allow_redirects=False, headers={"Accept-Encoding": "identity"}) as resp,
    ):
        if 300 <= resp.status < 400:
            where = printable(resp.headers.get("Location", "(no Location)"), 200)
            raise AdminError(
                f"{url}: HTTP {resp.status}, a redirect to {where}: not followed "
                "(give the admin endpoint's own address)"
            )
        encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise AdminError(
                f"{url}: answered with Content-Encoding {printable(encoding, 60)}, "
                "though only identity was accepted"
            )
        error = resp.status != 200
        if resp.content_length is not None and not error:
            budget.announce(resp.content_length, "a Content-Length")
        parts: list[bytes] = []
        read = 0
        async for chunk in resp.content.iter_any():
            if error:  # only the start of an error answer is quoted: the rest is not read
                parts.append(chunk[: ERROR_BODY - read])
                read += len(parts[-1])
                if read >= ERROR_BODY:
                    break
                continue
            budget.take(len(chunk))
            parts.append(chunk)
        return resp.status, b"".join(parts), resp.charset


def config_dump(doc: Json, url: str) -> dict[str, Json]:
    """``doc`` if it has the shape of an Envoy's config_dump: an object whose
    ``configs`` list holds at least one of the dumps of xDS resources. Anything else
    (``configs`` missing, not a list, or empty) read nothing, and says so."""
    configs = doc.get("configs") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(configs, list):
        raise AdminError(f"{url}: not a config_dump (no configs list)")
    types = {str(c.get("@type", "")).rsplit("/", 1)[-1] for c in configs if isinstance(c, dict)}
    if not types & DUMP_TYPES:
        raise AdminError(
            f"{url}: a config_dump with no dump of clusters, endpoints, listeners, routes "
            "or secrets in its configs: nothing to read"
        )
    return doc


def _text(value: Json) -> str:
    """A value the peer wrote where text belongs; anything else as JSON would show it."""
    return value if isinstance(value, str) else json.dumps(value)[:200]


def _named(inner: Json) -> str:
    if not isinstance(inner, dict):
        return ""
    for key in ("name", "cluster_name"):
        if isinstance(inner.get(key), str) and inner[key]:
            return str(inner[key])
    return ""


def _name(entry: dict[str, Json]) -> str:
    if isinstance(entry.get("name"), str):
        return str(entry["name"])
    for key in ("cluster", "route_config", "endpoint_config", "secret"):
        if isinstance(entry.get(key), dict):
            return _named(entry[key])
    failed = entry.get("error_state")
    if isinstance(failed, dict):
        return _named(failed.get("failed_configuration"))
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
            entries = config.get(section)
            for entry in entries if isinstance(entries, list) else ():
                if isinstance(entry, dict):
                    yield kind, warming, entry


def _version(entry: dict[str, Json]) -> str:
    for state in ("active_state", "warming_state"):
        inner = entry.get(state)
        if isinstance(inner, dict) and "version_info" in inner:
            return _text(inner["version_info"])
    return _text(entry.get("version_info", ""))


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
            details = _text(failed.get("details", "")).strip()
            tried = failed.get("version_info")
            at = f" version {_text(tried)}" if tried else ""
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
    parts = [f"{k} {printable('/'.join(sorted(v)), 400)}" for k, v in sorted(seen.items())]
    return "edge-verify: versions: " + ("; ".join(parts) if parts else "none")
