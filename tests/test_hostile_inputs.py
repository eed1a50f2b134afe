"""Hostile input is bad input (exit 2, file:line, no traceback), whatever file it is in.

Each of these ended in a Python traceback before (issue 12's list): bytes that are not
UTF-8, nesting deeper than Python recurses, a YAML tag the safe loader refuses, an
unhashable key, an impossible float, a self-referencing alias, an integer of 5,000
digits in xDS JSON, a bracketed host that is no IPv6 address, and a Gateway CIDR too
small for the Gateways. They all go through verifier/inputs.py now.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import BASE, FIXTURES, REPO_ROOT, rel
from test_check_cli import CLI, cli, translated  # noqa: F401  (the fixture)

SCENARIO = FIXTURES / "httproute-exact-path-matching"
MANY = FIXTURES / "gateway-multiple-gateways-same-port"
CLIENT_CERT = FIXTURES / "gateway-frontend-client-certificate-validation"

Make = Callable[[Path], list[str]]


def _file(name: str, data: bytes) -> Callable[[Path], Path]:
    def write(tmp: Path) -> Path:
        path = tmp / name
        path.write_bytes(data)
        return path

    return write


def _given(flag: str, name: str, data: bytes) -> Make:
    """check of the scenario with ``flag`` naming a file holding ``data``."""
    return lambda tmp: ["check", rel(BASE), rel(SCENARIO), flag, str(_file(name, data)(tmp))]


def _cases(data: bytes) -> Make:
    return _given("--cases", "cases.yaml", data)


def _xds(data: bytes) -> Make:
    return _given("--xds", "x.json", data)


DEEP = b"- " + b"[" * 5000 + b"]" * 5000 + b"\n"
# Nine levels of ten aliases each: a billion strings once expanded.
BOMB = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb, namespace: a}\ndata:\n" + (
    b'  a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]\n'
    + b"".join(
        b"  a%d: &a%d [" % (i, i) + b",".join([b"*a%d" % (i - 1)] * 10) + b"]\n"
        for i in range(1, 9)
    )
)
CASES: dict[str, tuple[Make, str]] = {
    "cases not UTF-8": (_cases(b"\xff\xfe- name: x\n"), "[encoding]"),
    "cases nested 5,000 deep": (_cases(DEEP), "[yaml-depth]"),
    "cases python tag": (_cases(b'- !!python/object/apply:os.system ["true"]\n'), "[yaml-"),
    "cases unhashable key": (_cases(b"- {[a]: 1}\n"), "[yaml-"),
    "cases impossible float": (_cases(b"- name: !!float x\n"), "[yaml-value]"),
    "registry not UTF-8": (
        _given("--mesh-registry", "reg.yaml", b"\xff services:\n"),
        "[encoding]",
    ),
    "resources self-referencing alias": (
        lambda tmp: [
            "check",
            rel(BASE),
            str(
                _file("r.yaml", b"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: &x1 [*x1]\n")(
                    tmp
                )
            ),
        ],
        "[yaml-aliases]",
    ),
    # libyaml refuses past 1,000 levels itself: the same error as the Python parser's.
    "resources nested 5,000 deep": (
        lambda tmp: [
            "check",
            rel(BASE),
            str(
                _file(
                    "deep.yaml", b"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + DEEP[2:]
                )(tmp)
            ),
        ],
        "[yaml-depth]",
    ),
    "resources alias bomb": (
        lambda tmp: ["check", rel(BASE), str(_file("bomb.yaml", BOMB)(tmp))],
        "[yaml-aliases]",
    ),
    "registry alias bomb": (
        _given("--mesh-registry", "reg.yaml", BOMB.replace(b"data:", b"services:")),
        "[yaml-aliases]",
    ),
    "an HTTPRoute with 10,000 parentRefs": (
        lambda tmp: [
            "check",
            rel(BASE),
            str(
                _file(
                    "refs.yaml",
                    b"apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n"
                    b"metadata: {name: r, namespace: edge-infra}\nspec:\n  parentRefs:\n"
                    + b"".join(b"  - name: gw%d\n" % i for i in range(10_000)),
                )(tmp)
            ),
        ],
        "[max-items]",
    ),
    "a parentRef whose name is a list": (
        lambda tmp: [
            "check",
            rel(BASE),
            str(
                _file(
                    "ref.yaml",
                    b"apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n"
                    b"metadata: {name: r, namespace: edge-infra}\n"
                    b"spec:\n  parentRefs:\n  - name: [same-namespace]\n",
                )(tmp)
            ),
        ],
        "ref.yaml:6: spec.parentRefs[0].name: expected string",
    ),
    "xds nested 100,000 deep": (
        _xds(b'{"configs":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        "(--max-depth) [too-deep]",
    ),
    "xds integer of 5,000 digits": (
        _xds(
            b'{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump", '
            b'"dynamic_active_clusters": [{"cluster": {"name": "a", '
            b'"per_connection_buffer_limit_bytes": ' + b"9" * 5000 + b"}}]}]}"
        ),
        "[bad-xds]",
    ),
    "explain host [zz]": (
        lambda tmp: [
            "explain",
            rel(BASE),
            rel(SCENARIO),
            "--gateway",
            "edge-infra/same-namespace",
            "--request",
            "GET http://[zz]/",
        ],
        "[request]",
    ),
    "a CA certificate that is not UTF-8": (
        lambda tmp: [
            "explain",
            rel(BASE),
            rel(CLIENT_CERT),
            *["--request", "GET https://secure.example.com:8451/"],
            "--client-cert-issuer",
            str(_file("ca.crt", b"\xff" + (CLIENT_CERT / "client-ca-a.crt").read_bytes())(tmp)),
        ],
        "ca.crt:1: not UTF-8: byte 0xff [encoding]",
    ),
    # CPython hands argv bytes that are not UTF-8 to main as lone surrogates.
    "a --request that is not UTF-8": (
        lambda tmp: ["explain", rel(BASE), rel(SCENARIO), "--request", "GET http://a/\udcffx"],
        "--request: not UTF-8: byte 0xff",
    ),
    "a -H that is not UTF-8": (
        lambda tmp: [
            *["explain", rel(BASE), rel(SCENARIO), "--request", "GET http://a/"],
            *["-H", "X-A: \udcff"],
        ],
        "-H: not UTF-8: byte 0xff",
    ),
    "a -H whose name is no token": (
        lambda tmp: [
            *["explain", rel(BASE), rel(SCENARIO), "--request", "GET http://a/"],
            *["-H", "Bad Name: x"],
        ],
        "-H: not sendable over HTTP/1.1: the header name 'bad name' is not an HTTP token",
    ),
    "a --gateway-address port of 5,000 digits": (
        lambda tmp: [
            *["translate", rel(BASE), rel(SCENARIO)],
            "--gateway-address",
            "edge-infra/same-namespace=10.0.0.5:" + "9" * 5000 + ">10080",
        ],
        "[bad-address]",
    ),
    "a --gateway-address port of '\u00b2'": (
        lambda tmp: [
            *["translate", rel(BASE), rel(SCENARIO)],
            *["--gateway-address", "edge-infra/same-namespace=10.0.0.5:80>\u00b2"],
        ],
        "is not PORT>PROXYPORT [bad-address]",
    ),
    "a CIDR too small for the Gateways": (
        lambda tmp: ["check", rel(BASE), rel(MANY), "--gateway-cidr", "10.0.0.0/30"],
        "[unassignable]",
    ),
    "two Gateways given one address": (
        lambda tmp: [
            "translate",
            rel(BASE),
            rel(MANY),
            *["--gateway-address", "edge-infra/gateway-b=10.0.0.9"],
            *["--gateway-address", "edge-infra/gateway-c=10.0.0.9"],
        ],
        "[unassignable]",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_input_is_one_clear_error(name: str, tmp_path: Path, cli: CLI) -> None:  # noqa: F811
    make, code = CASES[name]
    r = cli(*make(tmp_path))
    (line,) = r.error_lines()  # exit 2, no traceback, one error and its count
    assert code in line, line


def test_a_few_aliases_are_still_yaml(tmp_path: Path, cli: CLI) -> None:  # noqa: F811
    """The alias budget refuses bombs, not anchors: an ordinary repeated block loads."""
    route = (
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n"
        "metadata: {name: anchors, namespace: edge-infra}\n"
        "spec:\n  parentRefs: [{name: same-namespace}]\n  hostnames: [anchors.example.com]\n"
        "  rules:\n  - backendRefs: &to [{name: infra-backend-v1, port: 8080}]\n"
        "    matches: [{path: {type: PathPrefix, value: /a}}]\n"
        "  - backendRefs: *to\n    matches: [{path: {type: PathPrefix, value: /b}}]\n"
    )
    path = tmp_path / "route.yaml"
    path.write_text(route, encoding="utf-8")
    r = cli("check", rel(BASE), str(path))
    assert (r.rc, r.err) == (0, ""), r.err


# A ConfigMap whose aliases expand 100-fold: over the default bound, under a raised one.
WIDE = (
    b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: wide, namespace: a}\ndata:\n"
    + b"  a0: &a0 ["
    + b",".join([b'"x"'] * 200)
    + b"]\n"
    + b"  a1: ["
    + b",".join([b"*a0"] * 200)
    + b"]\n"
)
NESTED_CASES = b"- name: deep\n  request: {headers: " + b"[" * 300 + b"]" * 300 + b"}\n"
NESTED_XDS = b'{"configs": [' + b'{"a": ' * 300 + b"1" + b"}" * 300 + b"]}"
# (what, arguments after the scenario, the error code, the flag that raises the bound)
LIMITED: dict[str, tuple[Callable[[Path], list[str]], str, list[str]]] = {
    "a file over --max-input-bytes": (
        lambda tmp: ["--max-input-bytes", "2000"],
        "[too-large]",
        ["--max-input-bytes", "10_000_000"],
    ),
    "a list over --max-list-length": (
        lambda tmp: ["--max-list-length", "3"],
        "[too-long]",
        ["--max-list-length", "1000"],
    ),
    "cases nested past --max-depth": (
        lambda tmp: ["--cases", str(_file("cases.yaml", NESTED_CASES)(tmp))],
        "[too-deep]",
        ["--max-depth", "400"],
    ),
    "xDS nested past --max-depth": (
        lambda tmp: ["--xds", str(_file("x.json", NESTED_XDS)(tmp))],
        "[too-deep]",
        ["--max-depth", "400"],
    ),
    "aliases past --max-alias-expansion": (
        lambda tmp: [str(_file("wide.yaml", WIDE)(tmp))],
        "[yaml-aliases]",
        ["--max-alias-expansion", "1000"],
    ),
}


@pytest.mark.parametrize("name", sorted(LIMITED))
def test_every_limit_names_its_flag_and_the_flag_raises_it(
    name: str,
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """Each bound is one error that names the flag; with the flag raised, the same
    input gets past that bound (to whatever else it has to say)."""
    extra, code, raise_it = LIMITED[name]
    args = ["check", rel(BASE), rel(SCENARIO), *extra(tmp_path)]
    lines = cli(*args).error_lines()
    assert any(code in ln and raise_it[0] in ln for ln in lines), lines
    again = cli(*args, *raise_it)
    assert "Traceback" not in again.err
    assert code not in again.err, again.err


# The value past each limit is on its own line (the fixtures are within both).
PAST_LIMITS = (
    '{\n  "configs": [\n    ['
    + ", ".join(["1"] * 120)
    + "],\n    "
    + "[" * 30
    + "\n      [7]\n    "
    + "]" * 30
    + "\n  ]\n}\n"
)


@pytest.mark.parametrize(
    ("extra", "line"),
    [(["--max-depth", "25"], 4), (["--max-list-length", "100"], 3), ([], 0)],
)
def test_a_json_value_past_a_limit_is_found_at_its_line(
    extra: list[str],
    line: int,
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """The line of the first value past --max-depth or --max-list-length, not line 1:
    the file is read again, only on that error, to find it."""
    xds = tmp_path / "x.json"
    xds.write_text(PAST_LIMITS, encoding="utf-8")
    lines = cli("check", rel(BASE), rel(SCENARIO), "--xds", str(xds), *extra).error_lines()
    if line:
        assert lines[0].startswith(f"{xds}:{line}: "), lines
    else:  # within every limit: the shape is what is wrong, not a limit
        assert not any("[too-" in ln for ln in lines), lines


def test_a_megabyte_regex_is_named_not_printed(tmp_path: Path, cli: CLI) -> None:  # noqa: F811
    """A 1 MB safe_regex RE2 refuses: Envoy's error (EV101), the RE2 check (EV604) and
    the model's warning each quote it, clipped to its start and end with how much was
    left out, not a megabyte each (5 MB of output before)."""
    doc = translated(tmp_path / "w.json", "httproute-weighted-backends")
    regex = "(" + "a" * 1_000_000
    routes = [
        route
        for c in doc["configs"]
        for entry in c.get("dynamic_route_configs", [])
        for vh in entry["route_config"].get("virtual_hosts", [])
        for route in vh.get("routes", [])
    ]
    routes[0]["match"] = {"safe_regex": {"regex": regex}}
    xds = tmp_path / "regex.json"
    xds.write_text(json.dumps(doc), encoding="utf-8")
    r = cli("check", rel(BASE), rel(FIXTURES / "httproute-weighted-backends"), "--xds", str(xds))
    assert r.rc == 1 and len(r.out) + len(r.err) < 10_000, (len(r.out), len(r.err))
    codes = {code for code in ("EV101", "EV604") if code in r.out}
    assert codes == {"EV101", "EV604"}, r.out
    assert r.out.count("...[999,80") == 3 and "characters]" in r.err, r.out + r.err


def test_limits_apply_to_standard_input(cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("# padding\n" * 500))
    lines = cli("check", rel(BASE), "-", "--max-input-bytes", "3000").error_lines()
    assert [ln for ln in lines if ln.startswith("<stdin>")] == [
        "<stdin>: 5,000 characters, over the limit of 3,000 (raise it with "
        "--max-input-bytes) [too-large]"
    ], lines


def test_standard_input_that_is_not_utf8_is_one_clear_error() -> None:
    """`status -` read stdin through the console's decoder: under a UTF-8 locale bytes
    that are not UTF-8 raised UnicodeDecodeError out of read(), a traceback (found by
    test_fuzz_entry_points.py); under the C locale they became surrogates and a
    confusing [yaml-value]. Run as a process: stdin is the process's."""
    proc = subprocess.run(
        [sys.executable, "-m", "verifier.cli", "status", "-"],
        cwd=REPO_ROOT,
        input=b"apiVersion: v1\nkind: Namespace\nmetadata: {name: caf\xe9}\n",
        capture_output=True,
        timeout=300,
        check=False,
    )
    err = proc.stderr.decode()
    assert (proc.returncode, err.splitlines()[0]) == (
        2,
        "<stdin>:3: not UTF-8: byte 0xe9 [encoding]",
    ), err
