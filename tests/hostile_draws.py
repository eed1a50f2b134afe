"""What tests/test_hostile_cluster.py draws: the lies of an API server (as
tests/hostile_k8s.py tells them), and credential plugins and translators that
misbehave, each with the exit codes an honest tool may answer it with.

A peer is a lie when what it gives is not what was asked for: the tool must then
never pass (exit 2 for a read that failed; for a translator whose JSON is only the
wrong xDS, a finding, exit 1, is right too). Honest peers, some slow, some leaving
a daemon or a background child behind, must pass: the control.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from k8s_standin import TOKEN

from verifier.gatewayapi.cluster import LISTED

PLURALS = [kind.plural for kind in LISTED]
FAILED, FOUND = frozenset({2}), frozenset({1, 2})
PASSED = frozenset({0})

ODD = st.sampled_from(["\x1b[31mred", "a\rb", "\x00", "\u202e", "é", "line\nline", "x" * 3000])
LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    ODD,
)
JSON: st.SearchStrategy[Any] = st.recursive(
    LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
NOT_A_LIST = JSON.filter(lambda v: not isinstance(v, list))
NOT_NAMED = JSON.filter(
    lambda v: (
        not (
            isinstance(v, dict)
            and isinstance(v.get("metadata"), dict)
            and isinstance(v["metadata"].get("name"), str)
            and v["metadata"]["name"]
        )
    )
)


@dataclass(frozen=True)
class Peer:
    """One drawn peer: what it does (``name``, for the counts), the exit codes a right
    answer has, and what makes it up (a behaviour, or a program's body and files)."""

    name: str
    allowed: frozenset[int]
    behaviour: dict[str, Any] | None = None
    body: str = ""
    files: tuple[tuple[str, bytes], ...] = ()
    suffix: str = ""  # after the program's path in the command line


def _api(how: str, allowed: frozenset[int] = FAILED, **fields: st.SearchStrategy[Any]) -> Any:
    return st.fixed_dictionaries({"how": st.just(how), **fields}).map(
        lambda b: Peer(f"api:{b['how']}", allowed, behaviour=b)
    )


API_LIES = st.one_of(
    _api("items", value=NOT_A_LIST),
    _api("items", drop=st.just(True)),
    _api("item", value=NOT_NAMED),
    _api(
        "status",
        code=st.sampled_from([200, 201, 204, 400, 401, 403, 409, 410, 429, 500, 503]),
        message=st.one_of(st.text(max_size=30), ODD),
    ),
    _api("json", value=JSON.filter(lambda v: not (isinstance(v, dict) and "items" in v))),
    _api("bytes", data=st.binary(max_size=200).map(lambda b: base64.b64encode(b).decode())),
    _api("deep", depth=st.integers(201, 5000)),
    _api("bigint", digits=st.integers(4301, 8000)),
    _api("pages", with_items=st.booleans(), fresh=st.booleans()),
    _api("stall", after_headers=st.booleans()),
    _api("trickle", pause=st.floats(0.05, 0.2)),
    _api("flood"),
    _api("length", claims=st.integers(10**7, 10**10)),
    _api("gzip"),
    _api(
        "redirect",
        code=st.sampled_from([301, 302, 303, 307, 308]),
        to=st.sampled_from(["http://169.254.169.254/latest/", "/api/v1/namespaces", "x"]),
    ),
    _api("close"),
    _api("headers", count=st.integers(150, 600), width=st.sampled_from([10, 9000])),
)
API_HONEST = st.one_of(_api("honest", PASSED), _api("slow", PASSED, pause=st.floats(0, 0.05)))


@st.composite
def api_peers(draw: st.DrawFn) -> Peer:
    """A lie told to one kind (or all), or an honest server now and then."""
    peer = draw(st.one_of(API_LIES, API_LIES, API_LIES, API_LIES, API_HONEST))
    assert peer.behaviour is not None
    plural = draw(st.sampled_from([*PLURALS, "*"]))
    behaviour = {**peer.behaviour, "plural": plural}
    allowed = peer.allowed
    if behaviour["how"] == "bytes" and _a_list(behaviour["data"]):
        allowed = PASSED | FAILED  # drawn bytes that happen to be an honest answer
    return Peer(peer.name, allowed, behaviour=behaviour)


def _a_list(data: str) -> bool:
    try:
        doc = json.loads(base64.b64decode(data))
    except ValueError:
        return False
    return isinstance(doc, dict) and isinstance(doc.get("items"), list)


# ------------------------------------------------------------------ programs

EXEC_VERSION = "client.authentication.k8s.io/v1"


def credential(**status: Any) -> bytes:
    return json.dumps(
        {"apiVersion": EXEC_VERSION, "kind": "ExecCredential", "status": status}
    ).encode()


HONEST_CREDENTIAL = credential(token=TOKEN)
DAEMON = "setsid sleep 300 </dev/null >/dev/null 2>&1 &\n"
BACKGROUND = "sleep 300 &\n"


def _program(name: str, allowed: frozenset[int], body: str, **files: bytes) -> Peer:
    return Peer(name, allowed, body=body, files=tuple(files.items()))


def programs(
    honest: bytes, lies: st.SearchStrategy[Peer], kind: str, garbage: frozenset[int] = FAILED
) -> st.SearchStrategy[Peer]:
    """A program that answers ``honest`` (at once, slowly, leaving a daemon or a
    background child holding its output), or one of ``lies``, or one that never
    ends, floods, or fails: what every program the tool runs may do. ``garbage``:
    the right exits for drawn bytes (which may happen to be JSON)."""
    answers = st.one_of(
        st.just(_program(f"{kind}:honest", PASSED, "cat A", A=honest)),
        st.floats(0.01, 0.1).map(
            lambda s: _program(f"{kind}:slow", PASSED, f"sleep {s:.2f}\ncat A", A=honest)
        ),
        st.just(_program(f"{kind}:daemon", PASSED, DAEMON + "cat A", A=honest)),
        st.just(_program(f"{kind}:background", PASSED, BACKGROUND + "cat A", A=honest)),
    )
    failing = st.one_of(
        st.tuples(st.integers(1, 255), st.binary(max_size=300)).map(
            lambda t: _program(f"{kind}:exit", FAILED, f"cat E >&2\nexit {t[0]}", E=t[1])
        ),
        st.binary(max_size=300).map(lambda b: _program(f"{kind}:garbage", garbage, "cat G", G=b)),
        st.just(_program(f"{kind}:never", FAILED, "sleep 300")),
        st.just(_program(f"{kind}:flood", FAILED, "yes ' '")),
        st.just(_program(f"{kind}:stderr-flood", FAILED, "yes err >&2")),
        st.just(_program(f"{kind}:closed", FAILED, "exec >&- 2>&-\nsleep 300")),
        st.just(_program(f"{kind}:empty", FAILED, "true")),
        st.integers(201, 5000).map(
            lambda d: _program(f"{kind}:deep", FAILED, "cat D", D=b"[" * d + b"]" * d)
        ),
        st.integers(1, 40).map(
            lambda n: _program(
                f"{kind}:not-utf8", FAILED, "cat U", U=honest[:n] + b"\xff" + honest[n:]
            )
        ),
    )
    return st.one_of(answers, failing, failing, lies, lies)


CREDENTIAL_LIES = st.one_of(
    st.sampled_from(
        [
            {"token": "nope"},
            {"token": ""},
            {"token": "a\nb"},
            {"token": 5},
            {"token": ["x"]},
            {"token": "\x1b[31m"},
            {"token": "é"},
            {},
            {"clientCertificateData": "x", "clientKeyData": "y"},
        ]
    ).map(lambda s: _program("exec:bad-status", FAILED, "cat J", J=credential(**s))),
    JSON.map(lambda v: _program("exec:json", FAILED, "cat J", J=json.dumps(v).encode())),
    st.sampled_from(["client.authentication.k8s.io/v1beta1", "v1", ""]).map(
        lambda v: _program(
            "exec:version",
            FAILED,
            "cat J",
            J=json.dumps(
                {"apiVersion": v, "kind": "ExecCredential", "status": {"token": TOKEN}}
            ).encode(),
        )
    ),
)


def translator_lies(honest: bytes) -> st.SearchStrategy[Peer]:
    """xDS that is not the answer: JSON of another shape (a finding or an error), the
    honest answer cut short, or a command line with an unbalanced quote."""
    return st.one_of(
        JSON.map(lambda v: _program("translator:json", FOUND, "cat J", J=json.dumps(v).encode())),
        st.integers(1, len(honest.rstrip()) - 1).map(
            lambda n: _program("translator:truncated", FAILED, "cat T", T=honest[:n])
        ),
        st.sampled_from([" 'x", ' "x', " x'"]).map(
            lambda q: Peer("translator:unsplittable", FAILED, body="cat A", suffix=q)
        ),
    )
