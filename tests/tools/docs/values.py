"""The Helm values page: every key of ``values.schema.json``, its default from ``values.yaml`` and
the comment above it there.

``values.yaml`` is the chart's commented reference and the schema its types; neither alone says
both what a value does and what it accepts, so the page joins them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from tests.tools.docs import markdown

REPO: Final = Path(__file__).resolve().parents[3]
CHART: Final = REPO / "charts" / "agentihooks-swarm"
VALUES: Final = CHART / "values.yaml"
SCHEMA: Final = CHART / "values.schema.json"

_KEY: Final = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.-]*):(?: |$)")

Key = tuple[str, ...]


def comments(text: str) -> dict[Key, str]:
    """The comment block right above each key of a block-style YAML mapping, by key path.

    A blank line ends a block, so a file's or a section's heading comment (followed by a blank
    line) belongs to no key. Only ``key: …`` lines and ``#`` lines matter: every value of the
    chart's file fits on its key's line, or is a block of keys.
    """
    found: dict[Key, str] = {}
    path: list[tuple[int, str]] = []
    block: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            block = []
            continue
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#").strip())
            continue
        match = _KEY.match(line)
        if match is None:
            block = []
            continue
        indent = len(match["indent"])
        while path and path[-1][0] >= indent:
            path.pop()
        path.append((indent, match["key"]))
        if block:
            found[tuple(key for _, key in path)] = " ".join(block)
        block = []
    return found


def _type(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type", "any")
    words = " or ".join(kind) if isinstance(kind, list) else str(kind)
    if kind == "array" and "type" in schema.get("items", {}):
        words += " of " + str(schema["items"]["type"])
    if "enum" in schema:
        words += ": " + ", ".join(markdown.value(v) for v in schema["enum"])
    limits = [
        f"{word} {schema[name]}"
        for name, word in (
            ("minimum", "≥"),
            ("exclusiveMinimum", ">"),
            ("maximum", "≤"),
            ("minLength", "length ≥"),
        )
        if name in schema
    ]
    if "pattern" in schema:
        limits.append("pattern " + markdown.code(schema["pattern"]))
    return words + (" (" + ", ".join(limits) + ")" if limits else "")


def _leaves(schema: Mapping[str, Any], path: Key) -> Iterator[tuple[Key, Mapping[str, Any]]]:
    """Each key the schema names, depth first; an object with properties is followed by them."""
    for name, child in schema.get("properties", {}).items():
        yield (*path, name), child
        yield from _leaves(child, (*path, name))


def _default(values: Mapping[str, Any], path: Key) -> str:
    """The value at ``path`` in ``values.yaml``, as code; empty when the file does not set it."""
    node: object = values
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return ""
        node = node[key]
    return markdown.value(node)


def _table(
    keys: list[tuple[Key, Mapping[str, Any]]], *, values: Mapping[str, Any], notes: Mapping[Key, str]
) -> list[str]:
    """One row per value; a group of values gets a row only when values.yaml says what it is."""
    rows = []
    for path, node in keys:
        is_group = bool(node.get("properties"))
        note = notes.get(path, node.get("description", ""))
        if is_group and not note:
            continue
        default = "" if is_group else _default(values, path)
        rows.append(["`" + ".".join(path) + "`", _type(node), default, markdown.cell(note)])
    return markdown.table(["Value", "Type", "Default", "Description"], rows)


def missing() -> list[str]:
    """One message per value without a description (a comment above it in values.yaml, or the
    schema's ``description``): the reference would show it blank."""
    schema = json.loads(SCHEMA.read_text())
    notes = comments(VALUES.read_text())
    return [
        f"charts/agentihooks-swarm/values.yaml: {'.'.join(path)} has no description "
        "(write a comment above it, then `make docs`)"
        for path, node in _leaves(schema, ())
        if not node.get("properties") and not (notes.get(path) or node.get("description", "")).strip()
    ]


def page() -> str:
    schema = json.loads(SCHEMA.read_text())
    text = VALUES.read_text()
    values = yaml.safe_load(text)
    notes = comments(text)
    lines = [
        "# Helm values",
        "",
        *markdown.generated(source="`charts/agentihooks-swarm/values.schema.json` and `values.yaml`"),
        "The chart's values, with their types from `values.schema.json` (helm refuses a value the schema "
        "does not accept) and their defaults and meaning from `values.yaml`. Set them with `--set` or a "
        "values file. The [settings reference](settings.md) names the value that sets each controller "
        "variable.",
        "",
    ]
    top = [(name, child) for name, child in schema["properties"].items() if not child.get("properties")]
    lines += [*_table([((name,), child) for name, child in top], values=values, notes=notes), ""]
    for section, child in schema["properties"].items():
        if not child.get("properties"):
            continue
        lines += [f"## `{section}`", ""]
        if (section,) in notes:
            lines += [markdown.cell(notes[(section,)]), ""]
        lines += [*_table(list(_leaves(child, (section,))), values=values, notes=notes), ""]
    return "\n".join(lines)
