"""The settings page: each field of the operator's ``Settings`` model as its environment variable.

The type, default, bounds and description are read from the model itself (pydantic's field
info), so a new or changed field changes the page; the Helm value that sets a variable is the
value whose comment in ``values.yaml`` starts with the variable's name.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any, Final, Literal

import annotated_types
import pydantic

from agentihooks_swarm import settings
from tests.tools.docs import markdown, values

_BOUNDS: Final = (
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.Le, "le", "≤"),
    (annotated_types.MinLen, "min_length", "length ≥"),
    (annotated_types.MaxLen, "max_length", "length ≤"),
)
_WORDS: Final = {str: "string", int: "integer", float: "number", bool: "boolean"}


def variable(name: str) -> str:
    return settings.PREFIX + name.upper()


def _type(annotation: Any) -> str:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(f"`{arg}`" for arg in args)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return " or ".join(_type(arg) for arg in args if arg is not type(None))
    return _WORDS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _bounds(field: pydantic.fields.FieldInfo) -> str:
    found = [
        f"{word} {_number(getattr(item, attribute))}"
        for item in field.metadata
        for kind, attribute, word in _BOUNDS
        if isinstance(item, kind)
    ]
    return f" ({', '.join(found)})" if found else ""


def _number(number: object) -> str:
    return str(int(number)) if isinstance(number, float) and number.is_integer() else str(number)


def _default(field: pydantic.fields.FieldInfo) -> str:
    default = field.get_default(call_default_factory=True)
    if default is None:
        return "unset"
    if isinstance(default, str):
        return markdown.code(default) if default else '`""`'
    return f"`{_number(default)}`"


def chart_values() -> dict[str, str]:
    """The Helm value that sets each variable: the one whose comment names it first or in brackets."""
    found: dict[str, str] = {}
    for path, note in values.comments(values.VALUES.read_text()).items():
        for name in re.findall(rf"^({settings.PREFIX}[A-Z_]+)\b|\(({settings.PREFIX}[A-Z_]+)\)", note):
            found.setdefault(next(part for part in name if part), ".".join(path))
    return found


def rows() -> list[list[str]]:
    chart = chart_values()
    return [
        [
            f"`{variable(name)}`",
            _type(field.annotation) + _bounds(field),
            _default(field),
            f"`{chart[variable(name)]}`" if variable(name) in chart else "",
            markdown.cell(field.description or ""),
        ]
        for name, field in settings.Settings.model_fields.items()
    ]


def page() -> str:
    return "\n".join(
        [
            "# Settings",
            "",
            *markdown.generated(source="the `Settings` model in `operator/agentihooks_swarm/settings.py`"),
            "The controller reads these environment variables once, at start. A bad value stops it at "
            "start with a message naming the variable. The Helm column names the chart value that sets "
            "each variable; see [Configuration](../configuration.md) for what else the controller reads.",
            "",
            *markdown.table(["Variable", "Type", "Default", "Helm value", "Description"], rows()),
            "",
        ]
    )
