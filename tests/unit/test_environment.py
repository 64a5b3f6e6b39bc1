"""The operator package reads no environment variable that is not a documented setting.

Two checks, so a new read cannot slip past either:

* every place in ``operator/agentihooks_swarm`` that touches the environment (``os.environ``,
  ``os.getenv``, ``environ``, and the standard-library calls known to read it) is found in the
  source, and each names a documented variable — or is ``Settings.from_env``, whose variables are
  its fields, each of which must be a row of the settings reference (``docs/reference/settings.md``,
  generated from the model; and each row a field);
* the package's modules are imported and its environment-reading entry points run in a child
  process whose ``os.environ`` records every key read from the package's own code.

The documented variables are the settings reference's table, and in ``docs/configuration.md`` the
worker Pod's table and the standard variables named under "What else the controller reads".
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from agentihooks_swarm import settings

REPO = Path(__file__).resolve().parents[2]
SETTINGS_PAGE = REPO / "docs" / "reference" / "settings.md"
CONFIGURATION_PAGE = REPO / "docs" / "configuration.md"
PACKAGE = REPO / "operator" / "agentihooks_swarm"
#: Standard-library calls that read the environment, and what they read.
INDIRECT = {
    "getproxies": {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"},
    "home": {"HOME"},
    "expanduser": {"HOME"},
}


def _section(title: str, *, page: Path = CONFIGURATION_PAGE) -> str:
    text = page.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _table_variables(section: str) -> set[str]:
    return set(re.findall(r"^\| `(AGENTIHOOKS_SWARM_[A-Z_]+)` \|", section, re.MULTILINE))


def documented() -> set[str]:
    named = set(re.findall(r"`([A-Z][A-Z_]+)`", _section("What else the controller reads")))
    return (
        named
        | _table_variables(SETTINGS_PAGE.read_text())
        | _table_variables(_section("The worker Pod's environment"))
    )


def _reads(tree: ast.AST) -> list[tuple[int, str, str | None]]:
    """``(line, what, key)`` for each environment access; ``key`` is None when not a literal."""
    found: list[tuple[int, str, str | None]] = []
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in {"environ", "environb", "getenv"}:
            found.append((node.lineno, node.attr, _literal_key(node, parents)))
        elif isinstance(node, ast.Name) and node.id in {"environ", "getenv"}:
            found.append((node.lineno, node.id, _literal_key(node, parents)))
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in INDIRECT:
                found.append((node.lineno, name, name))
    return found


def _literal_key(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str | None:
    """The key of ``environ.get("K")``, ``environ["K"]`` or ``getenv("K")``; None otherwise."""
    parent = parents.get(node)
    if isinstance(parent, ast.Subscript) and isinstance(parent.slice, ast.Constant):
        return str(parent.slice.value)
    call = parent
    if isinstance(parent, ast.Attribute) and parent.attr == "get":
        call = parents.get(parent)
    if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant):
        return str(call.args[0].value)
    return None


def _enclosing_function(tree: ast.AST, line: int) -> str:
    best = ""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno <= line <= (
            node.end_lineno or node.lineno
        ):
            best = node.name
    return best


def test_every_setting_is_a_row_of_the_settings_reference() -> None:
    fields = {settings.PREFIX + name.upper() for name in settings.Settings.model_fields}
    assert fields == _table_variables(SETTINGS_PAGE.read_text())


def test_the_package_source_reads_only_documented_variables() -> None:
    allowed = documented()
    problems = []
    checked = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        where = path.relative_to(REPO)
        for line, what, key in _reads(tree):
            checked += 1
            if what in INDIRECT:
                missing = INDIRECT[what] - allowed
                if missing:
                    problems.append(f"{where}:{line}: {what}() reads {sorted(missing)}, not documented")
            elif key is not None:
                if key not in allowed:
                    problems.append(f"{where}:{line}: reads {key}, not a documented setting")
            elif (where.name, _enclosing_function(tree, line)) != ("settings.py", "from_env"):
                problems.append(f"{where}:{line}: {what} with a key that is not a literal")
    assert problems == []
    assert checked >= 6  # The scan sees the reads that exist (settings, worker, kubernetes/api).


_PROBE = r"""
import _collections_abc, json, os, sys
skipped = {__file__, os.__file__, _collections_abc.__file__}
package = os.path.join(sys.argv[1], "")
read = set()

class Recording(type(os.environ)):
    def __getitem__(self, key):
        frame = sys._getframe(1)
        while frame is not None and (
            frame.f_code.co_filename in skipped or frame.f_code.co_filename.startswith("<frozen")
        ):
            frame = frame.f_back
        if frame is not None and frame.f_code.co_filename.startswith(package):
            read.add(key)
        return super().__getitem__(key)

recording = Recording(os.environ._data, os.environ.encodekey, os.environ.decodekey,
                      os.environ.encodevalue, os.environ.decodevalue)
os.environ = recording
import importlib, pkgutil
import agentihooks_swarm
for module in pkgutil.walk_packages(agentihooks_swarm.__path__, "agentihooks_swarm."):
    importlib.import_module(module.name)
from agentihooks_swarm import __main__, settings
from agentihooks_swarm.worker import reports as worker
from agentihooks_swarm.kubernetes import api
__main__._scope(__main__._run_parser().parse_args([]), settings.Settings.from_env())
api.environment_matters()
try:
    worker.main(["--help"])
except SystemExit:
    pass
print(json.dumps(sorted(read)))
"""


def test_running_the_package_reads_only_documented_variables(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    done = subprocess.run(
        [sys.executable, str(probe), str(PACKAGE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=tmp_path,
    )
    read = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert read - documented() == set()
    # The probe does see the package's reads: every setting, the worker's defaults, NETRC.
    fields = {settings.PREFIX + name.upper() for name in settings.Settings.model_fields}
    assert fields | {"AGENTIHOOKS_SWARM_SLUG", "NETRC"} <= read
