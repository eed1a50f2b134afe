"""Private keys recognised by what they are, wherever they sit.

Envoy's admin output redacts the fields its protos mark ``sensitive``, and so does
``verifier.xds.snapshot.redacted``; but a peer puts a key where no field table
expects one (cluster metadata, an unknown extra field of a DataSource, a
``private_key`` given as a plain string, the details of a rejected update), and
what the tool writes or prints must not carry it. So a key is also found by its
content, in any form JSON can carry it:

- PEM text (``-----BEGIN ... PRIVATE KEY-----``, whole or cut short);
- base64 (standard or URL-safe, wrapped or not) or hex of a PEM key;
- base64 or hex of a DER key: PKCS#1 (RSA, DSA), SEC1 (EC), PKCS#8 plain or
  encrypted, recognised by their ASN.1 structure, not guessed from length.

Certificates (public) in the same forms are kept: they are how a reader tells which
certificate a listener serves.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Final

REDACTED: Final = "[redacted]"

_PEM_KEY: Final = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*)",
    re.DOTALL,
)
# Runs of base64 (either alphabet), wrapped at any width, long enough to hold the
# smallest key (Ed25519 in PKCS#8: 48 bytes, 64 characters); and runs of hex.
_B64_RUN: Final = re.compile(r"(?:[A-Za-z0-9+/_-][\r\n\t ]*){64,}={0,2}")
_HEX_RUN: Final = re.compile(r"(?:[0-9A-Fa-f]{2}){48,}")
_MARKER: Final = b"PRIVATE KEY"
# AlgorithmIdentifier OIDs of password-based encryption (PKCS#5 PBES2, PKCS#12 PBE):
# an EncryptedPrivateKeyInfo starts with one of these.
_PBE_OIDS: Final = (
    bytes.fromhex("2a864886f70d01050d"),  # 1.2.840.113549.1.5.13 PBES2
    bytes.fromhex("2a864886f70d010c01"),  # 1.2.840.113549.1.12.1.x pkcs-12 PBE
    bytes.fromhex("2a864886f70d010503"),  # 1.2.840.113549.1.5.3 PBE-MD5-DES
)


def _header(data: bytes, at: int) -> tuple[int, int, int] | None:
    """(tag, start of content, length) of the DER element at ``at``, if well-formed."""
    if at + 2 > len(data):
        return None
    tag, first = data[at], data[at + 1]
    if first < 0x80:
        return tag, at + 2, first
    width = first & 0x7F
    if not 1 <= width <= 4 or at + 2 + width > len(data):
        return None
    return tag, at + 2 + width, int.from_bytes(data[at + 2 : at + 2 + width], "big")


def is_der_key(data: bytes) -> bool:
    """Whether ``data`` starts with a DER private key: a SEQUENCE of at least 40
    bytes (Ed25519 in PKCS#8, the smallest, has 48) within it that opens as
    PKCS#1/DSA (``INTEGER 0, INTEGER``), PKCS#8 (``INTEGER 0|1, SEQUENCE``), SEC1
    (``INTEGER 1, OCTET STRING``) or EncryptedPrivateKeyInfo (``SEQUENCE {OID of a
    password-based encryption}``)."""
    outer = _header(data, 0)
    if outer is None or outer[0] != 0x30 or not 40 <= outer[1] + outer[2] <= len(data):
        return False
    body = outer[1]
    if data[body : body + 2] == b"\x02\x01":  # INTEGER of one byte: the version
        version, after = data[body + 2 : body + 3], data[body + 3 : body + 4]
        return (version == b"\x00" and after in (b"\x02", b"\x30")) or (
            version == b"\x01" and after in (b"\x04", b"\x30")
        )
    inner = _header(data, body)
    if inner is None or inner[0] != 0x30:
        return False
    oid = _header(data, inner[1])
    if oid is None or oid[0] != 0x06:
        return False
    value = data[oid[1] : oid[1] + oid[2]]
    return any(value.startswith(known) for known in _PBE_OIDS)


def _holds_key(data: bytes) -> bool:
    return _MARKER in data or is_der_key(data)


def _decoded(run: str) -> list[bytes]:
    """What a run of base64 could be: in standard and URL-safe alphabets, padded; the
    whole run, each long word of it, and the run without its first few words (text
    before a wrapped key: "the key MIIEvQ...")."""
    words = run.split()
    candidates = {"".join(words[i:]) for i in range(min(len(words), 6))}
    candidates.update(w for w in words if len(w) >= 64)
    out = []
    for compact in candidates:
        if len(compact) < 64:
            continue
        padded = compact.rstrip("=") + "=" * (-len(compact.rstrip("=")) % 4)
        for alt in (None, b"-_"):
            try:
                out.append(base64.b64decode(padded, altchars=alt, validate=True))
            except (binascii.Error, ValueError):
                continue
    return out


def _key_span(match: re.Match[str]) -> bool:
    return any(_holds_key(data) for data in _decoded(match.group()))


def _hex_key(match: re.Match[str]) -> bool:
    return _holds_key(bytes.fromhex(match.group()))


def holds_key(text: str) -> bool:
    """Whether ``text`` carries a private key in any of the forms above."""
    if "PRIVATE KEY" in text:
        return bool(_PEM_KEY.search(text))
    if len(text) < 64:
        return False
    return any(_key_span(m) for m in _B64_RUN.finditer(text)) or any(
        _hex_key(m) for m in _HEX_RUN.finditer(text)
    )


def redact_text(text: str) -> str:
    """``text`` with every private key in it replaced by ``[redacted]``, the rest kept
    (a message quoting a key stays readable around it)."""
    if "PRIVATE KEY" in text:
        text = _PEM_KEY.sub(REDACTED, text)
    if len(text) < 64:
        return text
    text = _B64_RUN.sub(lambda m: REDACTED if _key_span(m) else m.group(), text)
    return _HEX_RUN.sub(lambda m: REDACTED if _hex_key(m) else m.group(), text)


def redact_json(doc: Any) -> Any:
    """Parsed JSON with every string that carries a key (a value, or an object's key)
    replaced by ``[redacted]``; a document with none is returned as it is."""
    if isinstance(doc, str):
        return REDACTED if holds_key(doc) else doc
    if isinstance(doc, list):
        items = [redact_json(v) for v in doc]
        return doc if all(a is b for a, b in zip(items, doc, strict=True)) else items
    if isinstance(doc, dict):
        out: dict[Any, Any] = {}
        changed = False
        for key, value in doc.items():
            new_key = key
            if isinstance(key, str) and holds_key(key):
                new_key = f"{REDACTED} {len(out)}"  # distinct, if several keys were keys
            new_value = redact_json(value)
            changed = changed or new_key is not key or new_value is not value
            out[new_key] = new_value
        return out if changed else doc
    return doc
