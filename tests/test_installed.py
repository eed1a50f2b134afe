"""What an installed copy holds: this tree laid out as a wheel installs it.

A finding says where to read more (``see:``): an https URL, or a page of these docs,
which pyproject.toml ships as package data (``verifier/docs``). Both are checked
against the installed layout, not the checkout: ``fixtures/README.md`` exists here and
in no installed copy. So is every package of the tree, since pyproject.toml lists them
by hand (``verifier.fuzz`` was missing, and ``edge-verify --help`` imports it).

The layout is setuptools' ``build_py`` of a copy of the tree: the step of a wheel
build that places the packages and their data (the files are the wheel's, checked
against ``pip wheel`` on 2026-12-03), in 0.7 s where ``pip wheel`` takes 4-6 s (it
installs the build backend into a fresh environment each time).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT
from verifier.rules import RULES

from verifier.findings import DOCS, catalogue, reference

SOURCES = ("pyproject.toml", "README.md", "verifier", "rules", "docs")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tree's packages and package data as installed (``site-packages``); built
    from a copy, since a build writes ``*.egg-info`` where it runs."""
    tmp = tmp_path_factory.mktemp("installed")
    src, out = tmp / "src", tmp / "site-packages"
    src.mkdir()
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    build = f"import sys, setuptools; sys.argv = ['setup.py', '-q', 'build_py', '-d', {str(out)!r}]"
    proc = subprocess.run(
        [sys.executable, "-c", f"{build}; setuptools.setup()"],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def _anchors(page: Path) -> set[str]:
    """The anchors a Markdown renderer gives the page's headings (GitHub's rule)."""
    found = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def _references() -> dict[str, str]:
    """Every reference a finding or a rule gives, by who gives it."""
    refs = {code: msg.spec_ref for code, msg in catalogue().items()}
    return refs | {rule.name: rule.spec_ref for rule in RULES}


def test_every_reference_is_a_url_or_a_docs_page_an_installed_copy_has(installed: Path) -> None:
    docs = installed / "verifier" / "docs"
    broken = {}
    for who, ref in _references().items():
        if ref.startswith("https://"):
            continue
        page, _, anchor = ref.removeprefix(DOCS).partition("#")
        shipped = docs / page
        if not ref.startswith(DOCS) or not shipped.is_file():
            broken[who] = f"{ref!r}: not an https URL nor a page an installed copy has"
        elif anchor and anchor not in _anchors(shipped):
            broken[who] = f"{ref!r}: {page} has no heading #{anchor}"
    assert broken == {}


def test_a_docs_reference_is_printed_as_the_installed_page(installed: Path) -> None:
    """``see:`` names a file that exists in the copy that prints it."""
    code = "import verifier.findings as f; print(f.reference('docs/live.md#three-way-verdicts'))"
    env = {**os.environ, "PYTHONPATH": str(installed)}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=installed,  # not the checkout's verifier/
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    page = installed / "verifier" / "docs" / "live.md"
    assert proc.stdout == page.as_uri() + "#three-way-verdicts\n"
    # In this checkout, the docs beside the package.
    assert reference("docs/live.md") == (REPO_ROOT / "docs" / "live.md").as_uri()
    assert reference("https://example.com/x") == "https://example.com/x"


def test_every_package_of_the_tree_is_installed(installed: Path) -> None:
    rules = (REPO_ROOT / "rules").rglob("__init__.py")
    tree = {str(Path("verifier/rules") / p.parent.relative_to(REPO_ROOT / "rules")) for p in rules}
    tree |= {
        str(p.parent.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "verifier").rglob("__init__.py")
    }
    shipped = {str(p.parent.relative_to(installed)) for p in installed.rglob("__init__.py")}
    assert tree - shipped == set()


def test_every_link_of_the_readme_and_the_docs_resolves() -> None:
    """A newcomer follows the README's links, then the docs' own: each relative link
    names a file of the checkout, and a ``#anchor`` on a Markdown page one of its
    headings."""
    root = Path(__file__).resolve().parent.parent
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(root)}: {target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(root)}: {target}: no heading #{anchor}")
    assert not broken, "\n".join(broken)
