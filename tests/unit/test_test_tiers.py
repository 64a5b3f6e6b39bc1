"""The test tiers do not import each other (issue 31, "What to build", item 2): a module in one
folder under ``tests/`` imports only from its own folder and from ``tests/support``, the shared
helpers' home; and no module imports a test module (``test_*.py``), so what two test modules share
lives in a helper module.

The tools are not tiers: the benchmarks (``tests/bench``), the soak (``tests/soak``), and the tools
with their own entry points in ``tests/tools`` (the cluster CLI, the demo, the docs generator, the
version writer, the image builder's command line). A tool imports ``tests/support`` and no tier
(the soak also uses the bench's API client), and a tool's own tests beside it may import it; the
support imports no tool. Of the tiers, ``tests/unit`` imports a tool to unit-test its pure parts
(those tests stay in ``tests/unit``, which ``make check`` and ``make test-unit`` run), and
``tests/chart`` imports the docs generator's runbooks: the rendered alerts must link the pages it
checks.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
TIERS = frozenset({"unit", "integration", "e2e", "faults", "fuzz", "realnode", "chart", "images"})
TOOLS = frozenset({"bench", "soak", "tools"})
SUPPORT = "support"
#: What a folder may import besides itself and ``tests/support``. ``""`` is ``tests/`` itself
#: (its ``conftest.py``).
ALSO: dict[str, frozenset[str]] = {
    **{tier: frozenset() for tier in TIERS},
    "unit": TOOLS,  # a tool's pure parts are unit-tested here
    "bench": frozenset(),
    "chart": frozenset({"tools"}),  # the alerts' runbook links, as the docs generator checks them
    "soak": frozenset({"bench"}),  # the soak's watch and workload use the bench's API client
    "tools": frozenset(),
    SUPPORT: frozenset(),
    "": frozenset(),
}


def _folder(module: str) -> str:
    """``tests.e2e.conftest`` → ``e2e``; ``tests.e2e`` → ``e2e``; ``tests.conftest`` → ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (TESTS / parts[1]).is_dir()) else ""


def _modules() -> dict[str, Path]:
    """Every module under ``tests/`` by its dotted name (a package by its folder's name)."""
    found: dict[str, Path] = {}
    for path in sorted(TESTS.rglob("*.py")):
        parts = path.relative_to(TESTS.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _plugins(tree: ast.Module) -> set[str]:
    """The modules a conftest loads by name: ``pytest_plugins = ["tests.support.x", ...]``."""
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets
        ):
            out |= {
                e.value
                for e in ast.walk(node.value)
                if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value.startswith("tests.")
            }
    return out


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules under ``tests/`` that ``path`` imports, wherever in it the import stands
    (``from X import y`` counts ``X.y`` when that is a module, else ``X``)."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = _plugins(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the importing module's package
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                out.add(full if full in modules else source)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m in modules and m != "tests"}


def _allowed(source: str, target: str) -> bool:
    """May module ``source`` import module ``target``?"""
    return _folder(target) in {_folder(source), SUPPORT, *ALSO[_folder(source)]}


def _edges() -> list[tuple[str, str]]:
    modules = _modules()
    return sorted(
        (name, target)
        for name, path in modules.items()
        for target in _imports(name, path, modules)
        if target != name
    )


def test_every_folder_under_tests_is_a_tier_a_tool_or_support() -> None:
    folders = {_folder(m) for m in _modules()}
    assert folders - {""} <= TIERS | TOOLS | {SUPPORT}
    assert set(ALSO) == TIERS | TOOLS | {SUPPORT, ""}


def test_no_folder_imports_another_but_support() -> None:
    crossing = [f"{name} imports {target}" for name, target in _edges() if not _allowed(name, target)]
    assert crossing == []


def test_no_module_imports_a_test_module() -> None:
    imported = [
        f"{name} imports {target}"
        for name, target in _edges()
        if target.rpartition(".")[2].startswith("test_")
    ]
    assert imported == []


def test_the_support_imports_no_tier_and_no_tool() -> None:
    # Also covered by the rule above; said apart because everything else may import the support.
    assert [f"{n} imports {t}" for n, t in _edges() if _folder(n) == SUPPORT and _folder(t) != SUPPORT] == []


def test_the_walker_sees_an_import_in_each_form(tmp_path: Path) -> None:
    # A fabricated module importing another tier and test modules in each form an import takes.
    source = tmp_path / "probe.py"
    source.write_text(
        "import tests.e2e.helpers\n"
        "from tests.integration import test_launch\n"
        "from .ledger import Entry\n"
        "def f() -> None:\n"
        "    from tests.e2e.test_lifecycle import x\n"
        "pytest_plugins = ['tests.e2e.conftest']\n"
    )
    names = ["tests.e2e.helpers", "tests.integration.test_launch", "tests.faults.ledger"]
    names += ["tests.e2e.test_lifecycle", "tests.e2e.conftest"]
    modules = {name: tmp_path / f"{name}.py" for name in names}
    assert _imports("tests.faults.probe", source, modules) == set(names)


def test_the_rule_allows_support_a_tools_own_tests_and_unit_tests_of_a_tool() -> None:
    assert _allowed("tests.integration.test_a", "tests.support.planting")
    assert _allowed("tests.integration.test_a", "tests.integration.conftest")
    assert _allowed("tests.soak.test_a", "tests.soak.plan")
    assert _allowed("tests.unit.test_a", "tests.soak.plan")
    assert _allowed("tests.soak.run", "tests.bench.kube")
    assert not _allowed("tests.integration.test_a", "tests.e2e.conftest")
    assert not _allowed("tests.integration.test_a", "tests.soak.plan")
    assert not _allowed("tests.bench.run", "tests.e2e.conftest")
    assert not _allowed("tests.bench.run", "tests.soak.plan")
    assert not _allowed("tests.support.pods", "tests.unit.test_a")
    assert _allowed("tests.tools.demo", "tests.support.pods")
    assert _allowed("tests.unit.test_docs", "tests.tools.docs.markdown")
    assert not _allowed("tests.support.cluster", "tests.tools.cluster")
    assert not _allowed("tests.integration.test_a", "tests.tools.docs")
    assert not _allowed("tests.tools.demo", "tests.e2e.conftest")
