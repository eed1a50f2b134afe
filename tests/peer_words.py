"""What hostile peers say: private keys in every form JSON can carry, and words that
would drive a terminal or forge a line of the tool's output; and how to tell either
got through (``leaked_key``, ``raw_control``). Shared by tests/hostile_ads.py,
hostile_admin.py and hostile_clients.py.
"""

from __future__ import annotations

import base64
from typing import Any, Final

from conftest import FIXTURES
from hypothesis import strategies as st

KEY_PEM: Final = (
    FIXTURES / "gateway-frontend-client-certificate-validation" / "client-a.key"
).read_text(encoding="utf-8")
_KEY_BODY: Final = "".join(ln for ln in KEY_PEM.splitlines() if not ln.startswith("-----"))
KEY_DER: Final = base64.b64decode(_KEY_BODY)
# Every form a key can take in JSON text: PEM, base64 of PEM, base64 of DER, hex of DER.
KEY_FORMS: Final = (
    KEY_PEM,
    base64.b64encode(KEY_PEM.encode()).decode(),
    base64.b64encode(KEY_DER).decode(),
    KEY_DER.hex(),
)
# Substrings only key material has, in each form: any of them in the output is a leak.
KEY_MARKERS: Final = (
    "PRIVATE KEY",
    _KEY_BODY[10:50],
    KEY_FORMS[1][20:60],
    KEY_FORMS[2][20:60],
    KEY_FORMS[3][20:80],
)
FORGED: Final = "edge-verify: ACK clusters version forged-by-the-peer"
PEER_WORDS: Final = (
    "plain words",
    f"\x1b[31mred\x1b[0m\n{FORGED}",
    f"ok\r{FORGED}",
    "\u202eesrever",
    "\x00\x07\x08",
    KEY_PEM,
    f"key: {KEY_FORMS[2]}",
    "x" * 5000,
)
PEER_TEXT = st.one_of(st.sampled_from(PEER_WORDS), st.text(max_size=20))


def leaked_key(text: str) -> bool:
    return any(m in text for m in KEY_MARKERS)


def raw_control(text: str) -> bool:
    """A control character (but newline and tab) or a forged line in the tool's output."""
    forged = any(line.startswith(FORGED) for line in text.splitlines())
    return forged or any((c < " " and c not in "\n\t") or c == "\x7f" for c in text)


def weighted(*pairs: tuple[int, Any]) -> st.SearchStrategy[Any]:
    """One of the values, each drawn ``weight`` times as often as a weight of 1."""
    return st.sampled_from([value for weight, value in pairs for _ in range(weight)])
