"""The import boundaries that keep the design honest, checked on the AST of every module.

Two models must agree, so they must not share decisions: the spec model never reaches the
Envoy model, the translator or envoy-data-plane; the Envoy model never reaches the spec
model or the translator; rules and the mutation engine judge xDS from any source, so they
never reach the translator. "Reach" is transitive and counts imports inside functions too:
a lazy import is still a shared decision. The checker is also run on synthetic modules, so
a boundary that stopped being enforced would fail here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Subpackages a code generator writes (scripts/gen_echo_proto.sh): no docstrings of ours.
GENERATED = "verifier.live.echoproto."

# (modules a boundary applies to, prefixes they must never reach, why)
BOUNDARIES: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (
        ("verifier.semantics.spec",),
        (
            "verifier.semantics.envoy",
            "verifier.translate",
            "verifier.xds",
            "verifier.mutate",
            "verifier.rules",
            "envoy_data_plane",
        ),
        "the spec model is written from the spec text alone",
    ),
    (
        ("verifier.semantics.envoy",),
        ("verifier.semantics.spec", "verifier.translate", "verifier.semantics.witness"),
        "the Envoy model reads only xDS",
    ),
    (
        (
            "verifier.semantics.request",
            "verifier.semantics.cases",
            "verifier.semantics.expect",
            "verifier.semantics.shares",
            "verifier.semantics.directory",
            "verifier.semantics.pem",
        ),
        ("verifier.semantics.spec", "verifier.semantics.envoy", "verifier.translate"),
        "the shared vocabulary belongs to neither model",
    ),
    (
        ("verifier.semantics.decisions",),
        (
            "verifier.semantics.spec",
            "verifier.semantics.envoy",
            "verifier.translate",
            "verifier.xds",
            "envoy_data_plane",
        ),
        "the decision lists' normal form is neutral ground: both models compile to it, "
        "neither lends it a decision",
    ),
    (
        ("verifier.semantics.witness", "verifier.semantics.witness_pairs"),
        ("verifier.semantics.envoy", "verifier.translate", "envoy_data_plane"),
        "witnesses come from the spec's matches, never from what is judged",
    ),
    (
        ("verifier.semantics",),
        ("verifier.translate", "verifier.gatewayapi.attach", "verifier.gatewayapi.mesh_attach"),
        "the models never share a decision with the translator or the controller's attachment",
    ),
    (
        ("verifier.rules",),
        ("verifier.translate", "verifier.gatewayapi.attach", "verifier.gatewayapi.mesh_attach"),
        "rules judge xDS from any source and must not agree with our controller's bugs",
    ),
    (
        tuple(
            f"verifier.mutate.{m}"
            for m in (
                "catalog",
                "core",
                "operators",
                "proofs",
                "algebra",
                "regex_prefixes",
                "scope",
            )
        ),
        ("verifier.translate", "verifier.semantics.spec"),
        "mutants are made, and proven equivalent, from xDS alone",
    ),
    (
        ("verifier.gatewayapi",),
        (
            "verifier.semantics",
            "verifier.translate",
            "verifier.xds",
            "verifier.rules",
            "verifier.live",
            "envoy_data_plane",
        ),
        "the input layer serves every consumer and depends on none",
    ),
    (
        ("verifier.xds",),
        ("verifier.gatewayapi", "verifier.semantics", "verifier.translate", "verifier.rules"),
        "xDS is read the same whatever produced it",
    ),
    (
        ("verifier.semantics",),
        ("verifier.live", "verifier.check", "verifier.rules", "verifier.mutate"),
        "the models are pure and used by everything else, never the reverse",
    ),
    (
        ("verifier.report",),
        ("verifier.translate",),
        "a report renders what was found, whatever produced the xDS",
    ),
    (
        ("verifier.translate",),
        ("verifier.semantics.spec", "verifier.semantics.envoy", "verifier.rules"),
        "the translator is what is judged; it may share types, never decisions",
    ),
    (
        (
            "verifier.fuzz.worlds",
            "verifier.fuzz.mesh_base",
            "verifier.fuzz.mesh_worlds",
            "verifier.fuzz.requests",
            "verifier.fuzz.coverage",
        ),
        ("verifier.translate", "verifier.semantics.envoy", "verifier.xds", "envoy_data_plane"),
        "worlds and requests are drawn from the spec's vocabulary, never from what is judged",
    ),
    (
        ("verifier.fuzz",),
        ("verifier.cli",),
        "the command line drives a campaign, never the reverse",
    ),
)


def module_name(path: Path) -> str:
    """The importable name of a source file (rules/ is installed as verifier.rules)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "rules":
        parts = ["verifier", "rules", *parts[1:]]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def project_sources() -> dict[str, str]:
    files = [*ROOT.glob("verifier/**/*.py"), *ROOT.glob("rules/**/*.py")]
    return {module_name(p): p.read_text() for p in files}


def _imports(name: str, source: str, known: Iterable[str]) -> set[str]:
    """Every module ``name`` imports, anywhere in the file (top level or inside functions)."""
    known = set(known)
    is_pkg = name in known and any(k.startswith(name + ".") for k in known)
    package = name if is_pkg else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known)
    return found


def _parents(mod: str, known: set[str]) -> set[str]:
    """Importing a.b.c runs a/__init__ and a/b/__init__ first."""
    parts = mod.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))} & known


def reach(sources: Mapping[str, str]) -> dict[str, set[str]]:
    """Module -> every module (project or third-party top-level name) it reaches."""
    known = set(sources)
    direct = {n: _imports(n, s, known) for n, s in sources.items()}
    closure: dict[str, set[str]] = {}
    for start in sources:
        seen: set[str] = set()
        stack = [start]
        while stack:
            cur = stack.pop()
            for dep in direct.get(cur, set()) | _parents(cur, known):
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        closure[start] = seen - {start}
    return closure


def _under(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def violations(sources: Mapping[str, str]) -> list[str]:
    problems = []
    for name, reached in sorted(reach(sources).items()):
        for scope, forbidden, why in BOUNDARIES:
            if not any(_under(name, s) for s in scope):
                continue
            for dep in sorted(reached):
                if any(_under(dep, f) for f in forbidden):
                    problems.append(f"{name} reaches {dep}: {why}")
    return problems


def test_every_boundary_holds() -> None:
    sources = project_sources()
    assert "verifier.semantics.spec.model" in sources, "the layout moved; update the test"
    assert violations(sources) == []


def test_a_forbidden_import_is_caught() -> None:
    """Synthetic modules break each kind of boundary, directly, lazily and transitively."""
    sources = project_sources()
    sources["verifier.semantics.spec.leak"] = "from verifier.semantics.envoy import model\n"
    sources["verifier.semantics.spec.lazy"] = (
        "def f():\n    from envoy_data_plane.envoy.config.route.v3 import Route\n"
    )
    sources["verifier.semantics.envoy.peek"] = "import verifier.semantics.spec.match\n"
    sources["verifier.rules.support.bridge"] = "from verifier.semantics.request import Request\n"
    sources["verifier.semantics.request"] += "\nfrom verifier.translate import names\n"
    found = violations(sources)
    expected = [
        "verifier.semantics.spec.leak reaches verifier.semantics.envoy.model",
        "verifier.semantics.spec.lazy reaches envoy_data_plane.envoy.config.route.v3",
        "verifier.semantics.envoy.peek reaches verifier.semantics.spec.match",
        # transitive: the bridge is innocent itself, the shared module it imports is not
        "verifier.rules.support.bridge reaches verifier.translate",
        "verifier.semantics.request reaches verifier.translate",
    ]
    for want in expected:
        assert any(f.startswith(want) for f in found), (want, found)


def test_every_package_says_what_it_must_never_import() -> None:
    """Each package's docstring names what lives there and what it must not import."""
    for init in [*ROOT.glob("verifier/**/__init__.py"), *ROOT.glob("rules/**/__init__.py")]:
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        name = module_name(init)
        if name in {"verifier", "verifier.rules"} or name.startswith(GENERATED):
            continue
        assert "never" in doc.lower() or "not import" in doc.lower(), (
            f"{init.relative_to(ROOT)}: say what the package must never import"
        )
