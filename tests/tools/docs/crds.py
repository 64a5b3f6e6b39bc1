"""The custom resources page: every field of each CRD's ``openAPIV3Schema`` in ``manifests/crds/``.

What the API server checks at admission (bounds, patterns, the CEL rules' messages) is listed
with each field, so the page answers "why was my Swarm refused" the way the schema does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from tests.tools.docs import markdown

REPO: Final = Path(__file__).resolve().parents[3]
CRDS: Final = REPO / "manifests" / "crds"

Schema = Mapping[str, Any]

#: The API server refuses a description on ``metadata`` (only ``name`` may be constrained there),
#: so the page says what these are.
_IMPLICIT: Final = {
    "metadata": "The object's metadata, as in any Kubernetes object.",
    "metadata.name": "The object's name (see the kind's description above).",
}


def description(path: str, schema: Schema) -> str:
    return str(schema.get("description", "")).strip() or _IMPLICIT.get(path, "")


_LIMITS: Final = (
    ("minLength", "length ≥ {}"),
    ("maxLength", "length ≤ {}"),
    ("minimum", "≥ {}"),
    ("maximum", "≤ {}"),
    ("minItems", "items ≥ {}"),
    ("maxItems", "items ≤ {}"),
    ("minProperties", "keys ≥ {}"),
    ("maxProperties", "keys ≤ {}"),
    ("format", "format {}"),
)


def _type(schema: Schema) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "integer or string"
    if "type" not in schema:
        return "any JSON" if schema.get("x-kubernetes-preserve-unknown-fields") else "any"
    kind = str(schema["type"])
    if kind == "array":
        return "array of " + _type(schema.get("items", {}))
    if kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        return "map of string to " + _type(schema["additionalProperties"])
    return kind


def _constraints(schema: Schema) -> str:
    found = [text.format(schema[key]) for key, text in _LIMITS if key in schema]
    if "pattern" in schema:
        found.append("pattern " + markdown.code(str(schema["pattern"]).strip()))
    if "enum" in schema:
        found.append("one of " + ", ".join(markdown.value(v) for v in schema["enum"]))
    if schema.get("x-kubernetes-list-type") == "map":
        found.append("unique " + ", ".join(schema.get("x-kubernetes-list-map-keys", [])))
    found += [markdown.cell(str(rule["message"])) for rule in schema.get("x-kubernetes-validations", [])]
    return "; ".join(found)


def fields(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema, bool]]:
    """``(path, schema, required)`` for each field under ``schema``, depth first."""
    required = set(schema.get("required", []))
    for name, child in schema.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        yield here, child, name in required
        yield from _children(child, here)


def _children(schema: Schema, path: str) -> Iterator[tuple[str, Schema, bool]]:
    if "properties" in schema:
        yield from fields(schema, path)
    elif schema.get("type") == "array":
        yield from _children(schema.get("items", {}), path + "[]")
    elif isinstance(schema.get("additionalProperties"), Mapping):
        value = schema["additionalProperties"]
        if "properties" in value or any(key in value for key, _ in _LIMITS) or "pattern" in value:
            yield path + ".*", value, False
            yield from _children(value, path + ".*")


def _crd(document: Mapping[str, Any]) -> list[str]:
    spec = document["spec"]
    names = spec["names"]
    lines = [f"## {names['kind']}", ""]
    for version in spec["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        about = [
            ["API version", f"`{spec['group']}/{version['name']}`"],
            ["Scope", spec["scope"]],
            ["Names", ", ".join(f"`{n}`" for n in [names["plural"], *names.get("shortNames", [])])],
            ["Subresources", ", ".join(f"`{s}`" for s in version.get("subresources", {})) or "—"],
        ]
        columns = ", ".join(
            f"{c['name']} (`{c['jsonPath']}`)" for c in version.get("additionalPrinterColumns", [])
        )
        if columns:
            about.append(["`kubectl get` columns", columns])
        selectable = ", ".join(f"`{f['jsonPath']}`" for f in version.get("selectableFields", []))
        if selectable:
            about.append(["Selectable fields", selectable])
        lines += [markdown.cell(schema.get("description", "")), "", *markdown.table(["", ""], about), ""]
        rows = [
            [
                f"`{path}`",
                _type(child),
                "yes" if required else "",
                _constraints(child),
                markdown.cell(description(path, child)),
            ]
            for path, child, required in fields(schema)
        ]
        lines += [
            *markdown.table(["Field", "Type", "Required", "Checked at admission", "Description"], rows),
            "",
        ]
    return lines


def missing() -> list[str]:
    """One message per field of a CRD without a description: the reference would show it blank."""
    found = []
    for path in sorted(CRDS.glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        kind = document["spec"]["names"]["kind"]
        for version in document["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            for field, child, _ in fields(schema):
                if not description(field, child):
                    found.append(
                        f"manifests/crds/{path.name}: {kind} field {field} has no description "
                        "(add one, then `make manifests` and `make docs`)"
                    )
    return found


def page() -> str:
    lines = [
        "# Custom resources",
        "",
        *markdown.generated(source="the CRD schemas in `manifests/crds/`"),
        "The operator's two kinds. The API server checks each field as listed here when a Swarm or an "
        "Execution is created or changed, and refuses the object with a message naming the field. "
        "[Concepts](../concepts.md) shows both in use.",
        "",
    ]
    for path in sorted(CRDS.glob("*.yaml"), key=lambda p: "executions" in p.name):
        lines += _crd(yaml.safe_load(path.read_text()))
    return "\n".join(lines)
