"""The fields of a case only a live data plane can judge, checked when the table is read.

``samples``, the ratios, mirrors, ``websocket``, ``request.protocol`` and the echo's
``proto`` mean nothing to the models, so the live pass used to read them on its own,
late and unchecked: ``samples: many`` or a status ratio of ``abc`` ended ``live`` in a
traceback, a ``mirrored_to`` without a namespace in a KeyError, and ``samples`` in the
billions ran the machine out of memory. They are checked here, with the rest of the
case, by every command that reads a cases table (``check`` too): an error names the
file, the line and the field, exit 2, before anything is sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from verifier.semantics.cases import CaseError, _int, unknown_key

# Requests one sampled case may send: a ratio's tolerance of a few percent needs a
# few hundred; more is a typo, and each sample's answer is held until judged.
MAX_SAMPLES: Final = 10_000
PROTOCOLS: Final = ("http1", "h2c")  # request.protocol: how the live client speaks
_POD_KEYS: Final = frozenset({"name", "namespace"})
_RATIO_KEYS: Final = frozenset({"ratio", "tolerance"})


def check_live_fields(item: Mapping[str, Any], where: str) -> None:
    """Every live-only field of one case, for its type and bounds; CaseError if not."""
    samples = item.get("samples")
    if samples is not None:
        n = _int(samples, f"{where}.samples")
        if not 1 <= n <= MAX_SAMPLES:
            raise CaseError(f"{where}.samples", f"expected 1 to {MAX_SAMPLES:,}, got {n:,}")
    request = _mapping(item.get("request"))
    protocol = request.get("protocol")
    if protocol is not None and protocol not in PROTOCOLS:
        message = f"expected one of {', '.join(PROTOCOLS)}, got {protocol!r}"
        raise CaseError(f"{where}.request.protocol", message)
    expect = _mapping(item.get("expect"))
    at = f"{where}.expect"
    for key in ("method", "proto"):
        _text(_mapping(expect.get("request")).get(key), f"{at}.request.{key}")
    response = _mapping(expect.get("response"))
    for key in ("valid_header_values", "header_lists"):
        for name, values in _entries(response.get(key), f"{at}.response.{key}"):
            _texts(values, f"{at}.response.{key}.{name}", empty=False)
    websocket = expect.get("websocket")
    if websocket is not None:
        if not isinstance(websocket, Mapping) or set(websocket) - {"messages"}:
            raise CaseError(f"{at}.websocket", "expected {messages: [text, ...]}")
        _texts(websocket.get("messages") or [], f"{at}.websocket.messages", empty=True)
    for status, ratio in _entries(expect.get("status_ratio"), f"{at}.status_ratio"):
        code = _int(status, f"{at}.status_ratio.{status}")
        if not (code == 0 or 100 <= code <= 599):
            raise CaseError(f"{at}.status_ratio.{status}", "expected an HTTP status (or 0)")
        _ratio(ratio, f"{at}.status_ratio.{status}", _RATIO_KEYS)
    for backend, ratio in _entries(expect.get("backend_ratio"), f"{at}.backend_ratio"):
        _ratio(ratio, f"{at}.backend_ratio.{backend}", _RATIO_KEYS)
    for key in ("mirrored_to", "not_mirrored_to"):
        for i, pod in enumerate(_list(expect.get(key), f"{at}.{key}")):
            _pod(pod, f"{at}.{key}[{i}]", _POD_KEYS)
    for i, pod in enumerate(_list(expect.get("mirrored_ratio"), f"{at}.mirrored_ratio")):
        _pod(pod, f"{at}.mirrored_ratio[{i}]", _POD_KEYS | _RATIO_KEYS)
        _ratio(pod, f"{at}.mirrored_ratio[{i}]", _POD_KEYS | _RATIO_KEYS)


# How a mesh case is sent, whatever the command: the in-mesh client (its pod's echo, by
# ForwardEcho) speaks HTTP/1.1 in cleartext to the Service, and its sidecar adds mTLS.
MESH_CLIENT: Final = (
    "a mesh case is sent over cleartext HTTP/1.1 by the in-mesh client (its sidecar adds mTLS)"
)


def check_mesh_fields(item: Mapping[str, Any], where: str) -> None:
    """What a mesh case cannot ask of that client, all of it in one error (CaseError): a
    TLS request (scheme https, sni, client_cert), h2c, or a WebSocket upgrade. Left to
    the live pass, such a case passed check and then failed there, retried until the
    deadline, with the failure laid on Envoy."""
    request = _mapping(item.get("request"))
    gaps = []
    if str(request.get("scheme", "http")) != "http":
        gaps.append(("request.scheme", f"scheme {request['scheme']}"))
    gaps += [(f"request.{k}", k) for k in ("sni", "client_cert") if request.get(k) is not None]
    if request.get("protocol", "http1") != "http1":
        gaps.append(("request.protocol", f"protocol {request['protocol']}"))
    if _mapping(item.get("expect")).get("websocket") is not None:
        gaps.append(("expect.websocket", "a WebSocket upgrade (expect.websocket)"))
    if gaps:
        listed = ", ".join(what for _field, what in gaps)
        raise CaseError(f"{where}.{gaps[0][0]}", f"{MESH_CLIENT}: no {listed}")


def _mapping(value: Any) -> Mapping[str, Any]:
    """A level ``parse_case`` has already judged: a mapping, or absent."""
    return value if isinstance(value, Mapping) else {}


def _text(value: Any, where: str) -> None:
    if value is not None and not isinstance(value, str):
        raise CaseError(where, f"expected a string, got {_shown(value)}")


def _texts(value: Any, where: str, *, empty: bool) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CaseError(where, "expected a list of strings")
    if not value and not empty:
        raise CaseError(where, "expected at least one value")


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CaseError(where, "expected a list")
    return value


def _entries(value: Any, where: str) -> list[tuple[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        raise CaseError(where, "expected a mapping")
    return [(str(k), v) for k, v in value.items()]


def _pod(value: Any, where: str, allowed: frozenset[str]) -> None:
    """``{name, namespace}``: an echo pod by name prefix, both required."""
    if not isinstance(value, Mapping):
        raise CaseError(where, f"expected {{{', '.join(sorted(allowed))}}}")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise unknown_key(f"{where}.{unknown[0]}", unknown[0], allowed)
    for key in sorted(_POD_KEYS):
        if not isinstance(value.get(key), str) or not value.get(key):
            raise CaseError(f"{where}.{key}", "required: the echo pod's " + key)


def _ratio(value: Any, where: str, allowed: frozenset[str]) -> None:
    """``{ratio, tolerance}``, each a number from 0 to 1; the ratio required."""
    if not isinstance(value, Mapping):
        raise CaseError(where, "expected {ratio: 0..1, tolerance: 0..1}")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise unknown_key(f"{where}.{unknown[0]}", unknown[0], allowed)
    if "ratio" not in value:
        raise CaseError(f"{where}.ratio", "required: the expected share, from 0 to 1")
    for key in ("ratio", "tolerance"):
        number = value.get(key, 0)
        if (
            isinstance(number, bool)
            or not isinstance(number, int | float)
            or not (math.isfinite(number) and 0 <= number <= 1)
        ):
            message = f"expected a number from 0 to 1, got {_shown(number)}"
            raise CaseError(f"{where}.{key}", message)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
