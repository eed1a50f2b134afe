"""A kubeconfig, read as kubectl reads it, into where and how to reach one API server.

The file is read like every other input (``verifier.inputs``: bounded size, the safe
YAML loader, limits on depth and length) and only from a regular file: a FIFO or a
device would hold the tool forever (seen: a kubeconfig that is a FIFO, /dev/zero,
300 MiB of comments). Every field the chosen context uses is checked for its type,
and an error names the file, the line and the field.

A kubeconfig is trusted input, as it is for kubectl: its ``exec`` credential plugin
is a program it names, and it is run, as kubectl runs it (``KUBERNETES_EXEC_INFO``,
the ``ExecCredential`` it prints). It runs on a leash (``verifier.children``): a
timeout, an output budget, nothing it starts left behind. Nothing else runs:
``auth-provider`` entries give the token they hold and are never refreshed (that
would be a network call outside every bound). A ``tokenFile`` is stripped of
surrounding whitespace, as kubectl strips it (a trailing newline is no header).

Several files may be given as ``KUBECONFIG`` lists them (``a:b``): the first file to
name a cluster, user or context wins, as does the first ``current-context``.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shutil
import ssl
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from verifier.errors import InputError, InputErrors
from verifier.inputs import line_of_field, load_yaml, read_text
from verifier.orphans import private_dir

_HEADER_SAFE = re.compile(r"[\x20-\x7e]+")


@dataclass(frozen=True)
class Endpoint:
    """One API server, as the chosen context reaches it."""

    context: str
    server: str  # scheme://host[:port][/prefix], no trailing slash
    tls: ssl.SSLContext | None  # None over plain HTTP
    server_name: str | None  # tls-server-name: the name its certificate is checked for
    proxy: str | None
    authorization: str | None  # the Authorization header, never printed


@dataclass(frozen=True)
class _Doc:
    path: str
    data: Mapping[str, Any]
    node: yaml.Node | None

    def error(self, field: str, code: str, message: str) -> InputErrors:
        line = line_of_field(self.node, field) if self.node is not None else 0
        return InputErrors([InputError(self.path, line, field, code, message)])

    @property
    def folder(self) -> Path:
        return Path(self.path).resolve().parent


@dataclass(frozen=True)
class Entry:
    """A cluster, user or context stanza, and where it was read."""

    doc: _Doc
    where: str  # users[0].user

    @property
    def value(self) -> Mapping[str, Any]:
        found: Any = self.doc.data
        for step in re.findall(r"[^.\[\]]+|\[\d+\]", self.where):
            found = found[int(step[1:-1])] if step.startswith("[") else found.get(step)
        return found if isinstance(found, Mapping) else {}

    def error(self, key: str, message: str, code: str = "kubeconfig") -> InputErrors:
        return self.doc.error(f"{self.where}.{key}" if key else self.where, code, message)

    def text(self, key: str) -> str | None:
        value = self.value.get(key)
        if value is not None and not isinstance(value, str):
            raise self.error(key, f"expected a string, got {type(value).__name__}")
        return value or None

    def flag(self, key: str) -> bool:
        value = self.value.get(key, False)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def path(self, key: str) -> str | None:
        """A file the stanza names, relative to the kubeconfig that holds it."""
        name = self.text(key)
        return None if name is None else str(self.doc.folder / os.path.expanduser(name))

    def data(self, key: str) -> bytes | None:
        """A ``*-data`` field: base64, decoded."""
        text = self.text(key)
        if text is None:
            return None
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise self.error(key, "expected base64") from None

    def data_or_file(self, key: str) -> bytes | None:
        """``key-data`` (preferred, as kubectl prefers it) or the file ``key`` names."""
        data = self.data(f"{key}-data")
        if data is not None:
            return data
        path = self.path(key)
        return None if path is None else read_file(path, self, key).encode()


def read_file(path: str, entry: Entry | None = None, key: str = "") -> str:
    """A file's text, only from a regular file (a FIFO would block, a device never
    end), within --max-input-bytes."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        why = "no such file" if isinstance(exc, FileNotFoundError) else exc.strerror or str(exc)
        if entry is not None:
            raise entry.error(key, f"{path}: {why}", "not-found") from None
        raise InputErrors([InputError(path, 0, "--kubeconfig", "not-found", why)]) from None
    if not stat.S_ISREG(mode):
        what = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else None
        why = f"not a regular file{f' ({what})' if what else ' (a device?)'}: give a file"
        if entry is not None:
            raise entry.error(key, f"{path}: {why}", "not-a-file")
        raise InputErrors([InputError(path, 0, "--kubeconfig", "not-a-file", why)])
    return read_text(path)


def _document(path: str) -> _Doc:
    data, node = load_yaml(read_file(path), path)
    if data is None:
        return _Doc(path, {}, None)  # an empty kubeconfig, as kubectl reads it
    if not isinstance(data, Mapping):
        raise InputErrors([InputError(path, 1, "", "kubeconfig", "a kubeconfig is a mapping")])
    return _Doc(path, data, node)


def _named(doc: _Doc, key: str, inner: str) -> Iterator[tuple[str, Entry]]:
    """The stanzas of one list (``clusters``), each checked for its shape."""
    items = doc.data.get(key)
    if items is None:
        return
    if not isinstance(items, list):
        raise doc.error(key, "kubeconfig", f"expected a list of {key}")
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"{key}[{i}]"
        if not isinstance(item, Mapping):
            raise doc.error(where, "kubeconfig", "expected a mapping with name and " + inner)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise doc.error(f"{where}.name", "kubeconfig", "required: a name")
        if name in seen:
            raise doc.error(f"{where}.name", "kubeconfig", f"{name!r} twice in {key}")
        seen.add(name)
        if item.get(inner) is not None and not isinstance(item.get(inner), Mapping):
            raise doc.error(f"{where}.{inner}", "kubeconfig", "expected a mapping")
        yield name, Entry(doc, f"{where}.{inner}")


@dataclass
class _Merged:
    first: str
    current: tuple[str, _Doc] | None
    stanzas: dict[str, dict[str, Entry]]


def _merged(spec: str) -> _Merged:
    paths = [p for p in spec.split(os.pathsep) if p]
    if not paths:
        raise InputErrors([InputError(spec, 0, "--kubeconfig", "kubeconfig", "no file named")])
    merged = _Merged(paths[0], None, {"clusters": {}, "users": {}, "contexts": {}})
    for path in paths:
        doc = _document(path)
        current = doc.data.get("current-context")
        if current is not None and not isinstance(current, str):
            raise doc.error("current-context", "kubeconfig", "expected a context's name")
        if current and merged.current is None:
            merged.current = (current, doc)
        for key, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for name, entry in _named(doc, key, inner):
                merged.stanzas[key].setdefault(name, entry)
    return merged


def endpoint(spec: str, context: str | None, exec_timeout: float, deadline: float) -> Endpoint:
    """The chosen context's API server and credentials; InputErrors naming the file,
    line and field of whatever is missing or malformed. ``deadline`` (monotonic) also
    bounds the credential plugin."""
    merged = _merged(spec)
    if context is not None:
        name = context
        if name not in merged.stanzas["contexts"]:
            message = f"--context {name}: no such context in the kubeconfig"
            raise InputErrors([InputError(merged.first, 0, "--context", "kubeconfig", message)])
    elif merged.current is not None:
        name, doc = merged.current
        if name not in merged.stanzas["contexts"]:
            raise doc.error("current-context", "kubeconfig", f"no context named {name!r}")
    else:
        message = "no current-context: give --context NAME"
        raise InputErrors([InputError(merged.first, 0, "current-context", "kubeconfig", message)])
    ctx = merged.stanzas["contexts"][name]
    cluster_name = ctx.text("cluster")
    if cluster_name is None:
        raise ctx.error("cluster", "required: the context's cluster")
    cluster = merged.stanzas["clusters"].get(cluster_name)
    if cluster is None:
        raise ctx.error("cluster", f"no cluster named {cluster_name!r}")
    user_name = ctx.text("user")
    user = merged.stanzas["users"].get(user_name) if user_name else None
    if user_name and user is None:
        raise ctx.error("user", f"no user named {user_name!r}")
    server = _server(cluster)
    authorization, cert = _credentials(user, cluster, server, exec_timeout, deadline)
    return Endpoint(
        context=name,
        server=server,
        tls=_tls(cluster, user, cert) if server.startswith("https://") else None,
        server_name=cluster.text("tls-server-name"),
        proxy=_proxy(cluster),
        authorization=authorization,
    )


def _server(cluster: Entry) -> str:
    server = cluster.text("server")
    if server is None:
        raise cluster.error("server", "required: the API server's URL")
    if not re.match(r"^https?://[^/\s]+", server):
        raise cluster.error("server", f"expected http(s)://HOST[:PORT], got {server!r}")
    return server.rstrip("/")


def _proxy(cluster: Entry) -> str | None:
    proxy = cluster.text("proxy-url")
    if proxy is not None and not re.match(r"^https?://[^/\s]+", proxy):
        raise cluster.error("proxy-url", "only http(s):// proxies are supported")
    return proxy


Cert = tuple[bytes, bytes]  # a client certificate and its key, PEM


def _credentials(
    user: Entry | None, cluster: Entry, server: str, exec_timeout: float, deadline: float
) -> tuple[str | None, Cert | None]:
    """(the Authorization header, a client certificate from the exec plugin)."""
    if user is None:
        return None, None
    value = user.value
    methods = [
        m
        for m, keys in (
            ("token", ("token", "tokenFile")),
            ("basic", ("username", "password")),
            ("exec", ("exec",)),
            ("auth-provider", ("auth-provider",)),
        )
        if any(value.get(k) is not None for k in keys)
    ]
    if len(methods) > 1:
        message = f"more than one way to authenticate ({', '.join(methods)}): keep one"
        raise user.error("", message)
    if "token" in methods:
        token = user.text("token")
        key = "token"
        if token is None:
            path = user.path("tokenFile")
            assert path is not None
            token, key = read_file(path, user, "tokenFile").strip(), "tokenFile"
        return f"Bearer {header_safe(token, user, key)}", None
    if "basic" in methods:
        name, password = user.text("username") or "", user.text("password") or ""
        pair = base64.b64encode(f"{name}:{password}".encode()).decode()
        return f"Basic {pair}", None
    if "exec" in methods:
        from verifier.gatewayapi.credentials import exec_credential

        return exec_credential(user, cluster, server, exec_timeout, deadline)
    if "auth-provider" in methods:
        return f"Bearer {_provider_token(user)}", None
    return None, None


def header_safe(token: str, entry: Entry, key: str) -> str:
    if not token:
        raise entry.error(key, "the token is empty")
    if not _HEADER_SAFE.fullmatch(token):
        raise entry.error(key, "the token holds a character no HTTP header can carry")
    return token


def _provider_token(user: Entry) -> str:
    provider = user.value.get("auth-provider")
    config = provider.get("config") if isinstance(provider, Mapping) else None
    token = None
    if isinstance(config, Mapping):
        token = config.get("id-token") or config.get("access-token")
    if not isinstance(token, str) or not token:
        message = (
            "an auth-provider without an id-token or access-token: this tool does not "
            "refresh tokens; use an exec credential plugin (kubelogin, gke-gcloud-auth-plugin)"
        )
        raise user.error("auth-provider", message)
    return header_safe(token, user, "auth-provider.config")


def _tls(cluster: Entry, user: Entry | None, cert: Cert | None) -> ssl.SSLContext:
    """Checked against the kubeconfig's CA only (as kubectl), or the system's without
    one; the client certificate from the user stanza or the exec plugin."""
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca = cluster.data_or_file("certificate-authority")
    if cluster.flag("insecure-skip-tls-verify"):
        if ca is not None:
            message = "a certificate authority and insecure-skip-tls-verify together"
            raise cluster.error("insecure-skip-tls-verify", message)
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    elif ca is not None:
        try:
            tls.load_verify_locations(cadata=ca.decode("ascii"))
        except (ssl.SSLError, ValueError):
            raise cluster.error("certificate-authority-data", "no PEM certificate in it") from None
    else:
        tls.load_default_certs()
    if cert is None and user is not None:
        pem = user.data_or_file("client-certificate")
        key = user.data_or_file("client-key")
        if (pem is None) != (key is None):
            raise user.error("client-key", "client-certificate and client-key go together")
        cert = None if pem is None or key is None else (pem, key)
    if cert is not None:
        _client_cert(tls, cert, user or cluster)
    return tls


def _client_cert(tls: ssl.SSLContext, cert: Cert, entry: Entry) -> None:
    """Loaded from files (the ssl module reads no other way), written to a private
    directory and removed at once."""
    folder = private_dir("edge-verify-kube-")
    try:
        (folder / "cert.pem").write_bytes(cert[0])
        (folder / "key.pem").write_bytes(cert[1])
        tls.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    except (ssl.SSLError, ValueError, OSError):
        raise entry.error("client-certificate", "not a PEM certificate and its key") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
