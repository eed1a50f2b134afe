"""Certificates in PEM bundles, identified by the SHA-256 of their DER bytes.

Client certificate validation (GEP-91) asks one question of a client
certificate: does it chain to a CA the port trusts? Both models answer it by
comparing CA identities, so a client certificate is described by its issuer's
fingerprint (``ClientCert.issuer``) and a trust bundle by the fingerprints of
the certificates in it. Parsing only: no decisions, no signature checks (the
live pass sends real certificates, so a wrong fingerprint would show there).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

_BLOCK = re.compile(
    r"-----BEGIN CERTIFICATE-----\s*(?P<body>[A-Za-z0-9+/=\s]*?)\s*-----END CERTIFICATE-----"
)


def fingerprints(pem: str) -> tuple[str, ...]:
    """SHA-256 (hex) of each well-formed certificate block, in bundle order;
    a block whose body is not base64 is left out."""
    found = []
    for block in _BLOCK.finditer(pem):
        try:
            der = base64.b64decode("".join(block.group("body").split()), validate=True)
        except (binascii.Error, ValueError):
            continue
        if der:
            found.append(hashlib.sha256(der).hexdigest())
    return tuple(found)


def short(fingerprint: str) -> str:
    """The first 12 hex digits: enough to tell a fixture's CAs apart in a message."""
    return fingerprint[:12]
