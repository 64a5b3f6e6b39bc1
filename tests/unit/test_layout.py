"""The package's folders are its plan (docs/development.md, "Layout"): imports only point down the
plan, no two modules import each other, and the page lists every module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "agentihooks_swarm"
#: The plan, from the top: a module may import only from groups below its own, or from its own
#: group. A group is a folder of the package, or a top-level module.
PLAN: tuple[frozenset[str], ...] = (
    frozenset({"__main__"}),
    frozenset({"handlers"}),
    frozenset({"serving"}),
    frozenset({"app"}),
    frozenset({"worker", "swarm", "controller"}),
    frozenset({"store"}),
    frozenset({"lifecycle"}),
    frozenset({"capture", "storage"}),
    frozenset({"kubernetes"}),
    frozenset({"supervisor"}),
    frozenset(
        {
            "metrics",
            "settings",
            "resources",
            "records",
            "errors",
            "health",
            "secure_metrics",
            "kopf_adapter",
            "text",
        }
    ),
)
#: The ground floor's modules may use one another (no cycle among them, checked below).
GROUND = PLAN[-1]


def _group(module: str) -> str:
    """``agentihooks_swarm.storage.keys`` → ``storage``; ``agentihooks_swarm.app`` → ``app``."""
    return module.split(".")[1]


def _rank(group: str) -> int:
    [rank] = [i for i, groups in enumerate(PLAN) if group in groups]
    return rank


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules ``path`` imports (``from X import y`` counts ``X.y`` when a module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentihooks_swarm"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("agentihooks_swarm")}
    return {m for m in out if m in modules and m != "agentihooks_swarm"}


def test_every_group_is_in_the_plan() -> None:
    groups = {_group(m) for m in _modules() if m != "agentihooks_swarm"}
    assert groups == set().union(*PLAN)


def test_imports_only_point_down_the_plan() -> None:
    modules = _modules()
    upward = []
    for name, path in modules.items():
        if name == "agentihooks_swarm":
            continue
        for target in _imports(path, modules):
            source_group, target_group = _group(name), _group(target)
            if source_group == target_group or (source_group in GROUND and target_group in GROUND):
                continue
            if _rank(target_group) <= _rank(source_group):
                upward.append(f"{name} imports {target}")
    assert upward == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    done: set[str] = set()

    def visit(name: str, trail: tuple[str, ...]) -> list[str]:
        if name in trail:
            return [" → ".join((*trail[trail.index(name) :], name))]
        if name in done:
            return []
        found = [c for target in sorted(graph[name]) for c in visit(target, (*trail, name))]
        done.add(name)
        return found

    assert [c for name in sorted(graph) for c in visit(name, ())] == []


def test_the_development_page_lists_every_module() -> None:
    page = (REPO / "docs" / "development.md").read_text()
    layout = page[page.index("## Layout") :]
    listed = set(re.findall(r"^ {2,}([a-z_]+(?:\.py|/))", layout, re.MULTILINE))
    missing = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.name == "__init__.py":
            wanted = f"{relative.parent.name}/" if relative.parent.name else None
        else:
            wanted = relative.name
        if wanted is not None and wanted not in listed:
            missing.append(str(relative))
    assert sorted(missing) == []


#: A module a reader can hold in mind, and a function that fits on a screen.
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def test_no_module_is_over_its_size() -> None:
    over = [
        f"{path.relative_to(PACKAGE)}: {lines} lines"
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert over == []


def test_no_function_is_over_its_size() -> None:
    """The operator's, and the tests' and their tools' alike."""
    over = []
    for path in [*PACKAGE.rglob("*.py"), *(REPO / "tests").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    over.append(f"{path.relative_to(REPO)}: {node.name} {lines} lines")
    assert over == []
