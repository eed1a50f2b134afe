"""A kubeconfig's ``exec`` credential plugin, run as kubectl runs it, on a leash.

kubectl runs the program a kubeconfig's user names (``aws eks get-token``,
``gke-gcloud-auth-plugin``, ``kubelogin``) with ``KUBERNETES_EXEC_INFO`` in its
environment and reads the ``ExecCredential`` it prints: a token, or a client
certificate and key. Users rely on it, so it is kept; a kubeconfig is trusted
input (docs/cluster.md). But the program is bounded as every program the tool runs
is (``verifier.children``): ``--exec-timeout`` seconds (and no longer than the
read of the cluster may take, ``--cluster-deadline``), at most --max-input-bytes
of output, standard input closed (never interactive), and nothing it started left
running, even when the tool is killed. A plugin that hangs, floods or fails is
exit 2 naming the kubeconfig, the line of its ``exec`` and the bound; what it
printed is never quoted (it is a credential).
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from verifier import children
from verifier.errors import InputErrors
from verifier.gatewayapi.kubeconfig import Cert, Entry, header_safe
from verifier.inputs import LIMIT_FLAGS, limits, load_json

API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


def exec_credential(
    user: Entry, cluster: Entry, server: str, timeout: float, deadline: float
) -> tuple[str | None, Cert | None]:
    """(the Authorization header, or a client certificate and key) the plugin gives."""
    if not isinstance(user.value.get("exec"), Mapping):
        raise user.error("exec", "expected a mapping with apiVersion and command")
    plugin = Entry(user.doc, f"{user.where}.exec")
    api_version = plugin.text("apiVersion")
    if api_version not in API_VERSIONS:
        raise plugin.error("apiVersion", f"expected one of {', '.join(API_VERSIONS)}")
    if plugin.text("interactiveMode") == "Always":
        message = "the plugin needs a terminal (interactiveMode: Always); this tool has none"
        raise plugin.error("interactiveMode", message)
    env = dict(os.environ)
    env.update(_env(plugin))
    cluster_info = cluster if plugin.flag("provideClusterInfo") else None
    env["KUBERNETES_EXEC_INFO"] = exec_info(api_version, cluster_info, server)
    left = deadline - time.monotonic()
    flag = "--exec-timeout" if timeout <= left else "--cluster-deadline"
    try:
        ended = children.run(
            _argv(plugin),
            timeout=max(min(timeout, left), 0.0),
            max_output=limits().max_bytes,
            env=env,
            flags=(flag, LIMIT_FLAGS["max_bytes"]),
        )
    except children.ChildError as exc:
        hint = plugin.text("installHint") if exc.code == "not-found" else None
        code = {"too-much-output": "too-large"}.get(exc.code, "exec")
        message = f"the credential plugin {exc.message}" + (f"; {hint}" if hint else "")
        raise plugin.error("command", message, code) from None
    if ended.returncode != 0:
        how = f"exited with code {ended.returncode}" if ended.returncode > 0 else "was killed"
        raise plugin.error("command", f"the credential plugin {how}: {ended.last_words()}", "exec")
    status = credential_status(ended.stdout, plugin, api_version)
    token = status.get("token")
    if isinstance(token, str) and token:
        return f"Bearer {header_safe(token, plugin, 'command')}", None
    cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
    if isinstance(cert, str) and isinstance(key, str) and cert and key:
        return None, (cert.encode(), key.encode())
    message = "its ExecCredential has neither a token nor clientCertificateData and clientKeyData"
    raise plugin.error("command", message, "exec")


def _argv(plugin: Entry) -> list[str]:
    """The command (relative to the kubeconfig when it is a path, as kubectl resolves
    it; else looked up on PATH) and its args."""
    command = plugin.text("command")
    if command is None:
        raise plugin.error("command", "required: the program to run")
    args = plugin.value.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise plugin.error("args", "expected a list of strings")
    return [str(plugin.doc.folder / command) if "/" in command else command, *args]


def _env(plugin: Entry) -> dict[str, str]:
    env = {}
    items = plugin.value.get("env") or []
    if not isinstance(items, list):
        raise plugin.error("env", "expected a list of {name, value}")
    for i, item in enumerate(items):
        if not (
            isinstance(item, Mapping)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("value"), str)
        ):
            raise plugin.error(f"env[{i}]", "expected {name: string, value: string}")
        env[item["name"]] = item["value"]
    return env


def credential_status(output: bytes, plugin: Entry, api_version: str) -> Mapping[str, Any]:
    """The ``status`` of the ExecCredential a plugin printed, read as any input is."""
    try:
        doc = load_json(output.decode("utf-8"), "exec")
    except UnicodeDecodeError:
        raise plugin.error("command", "the plugin's output is not UTF-8", "exec") from None
    except InputErrors as exc:
        message = f"the plugin's output is not JSON: {exc.errors[0].message}"
        raise plugin.error("command", message, "exec") from None
    if not isinstance(doc, Mapping) or doc.get("kind") != "ExecCredential":
        raise plugin.error("command", "the plugin's output is not an ExecCredential", "exec")
    if doc.get("apiVersion") != api_version:
        message = f"the plugin's ExecCredential is not {api_version}, as the kubeconfig asks"
        raise plugin.error("command", message, "exec")
    status = doc.get("status")
    if not isinstance(status, Mapping):
        raise plugin.error("command", "the plugin's ExecCredential has no status", "exec")
    return status


def exec_info(api_version: str, cluster: Entry | None, server: str) -> str:
    """``KUBERNETES_EXEC_INFO``: never interactive; the cluster when the plugin asks."""
    spec: dict[str, Any] = {"interactive": False}
    if cluster is not None:
        value = cluster.value
        info: dict[str, Any] = {"server": server}
        ca = cluster.data_or_file("certificate-authority")
        if ca is not None:
            info["certificate-authority-data"] = base64.b64encode(ca).decode()
        for key in ("tls-server-name", "insecure-skip-tls-verify", "proxy-url"):
            if value.get(key) is not None:
                info[key] = value[key]
        for ext in value.get("extensions") or []:
            if isinstance(ext, Mapping) and ext.get("name") == "client.authentication.k8s.io/exec":
                info["config"] = ext.get("extension")
        spec["cluster"] = info
    return json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "spec": spec})
