"""Markdown the generated pages share: tables whose cells survive both MkDocs and GitHub."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Final

#: Characters written as they are inside ``<code>``; any other becomes an HTML entity.
_PLAIN: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -.,:/=@")


def code(text: str) -> str:
    """``text`` as inline code that a table cell cannot break.

    GitHub splits a table row at a ``|`` even inside a backtick span (MkDocs does not), so text
    with a pipe or a backtick becomes ``<code>`` with every special character as an entity (inside
    raw HTML, Markdown would still read ``*``, ``_`` and backslashes).
    """
    if text and "|" not in text and "`" not in text:
        return f"`{text}`"
    return "<code>" + "".join(c if c in _PLAIN else f"&#{ord(c)};" for c in text) + "</code>"


def cell(text: str) -> str:
    """Prose for a table cell: one line, pipes escaped, and ``<slug>`` shown rather than read as HTML."""
    parts = " ".join(text.split()).split("`")
    # Even parts are prose, odd ones code spans, which show ``<`` and ``&`` as they are.
    return "`".join(
        part if i % 2 else html.escape(part, quote=False) for i, part in enumerate(parts)
    ).replace("|", "\\|")


def value(data: object) -> str:
    """A default or example value as compact JSON in code (``""``, ``600``, ``true``, ``[]``)."""
    return code(json.dumps(data, separators=(", ", ": ")))


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def generated(*, source: str) -> list[str]:
    """The note under each generated page's title: where it comes from and how to redo it."""
    return [
        f"*Generated from {source} by `make docs` (`python -m tests.tools.docs`); do not edit by "
        "hand: `make lint` fails when this page and its source disagree.*",
        "",
    ]
