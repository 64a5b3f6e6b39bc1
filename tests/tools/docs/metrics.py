"""The metrics page: every metric a fresh ``Metrics()`` registers, with its type, labels and help.

The label values are not in the registry; they are the comment on each metric's label list in
``operator/agentihooks_swarm/metrics.py`` (``["path", "cause"],  # path: launch|cleanup; cause: …``),
read with the tokenizer so the page keeps what the code says next to the label names. A comment
may name an enum of ``records`` (``records.FailureClass``): the page lists its values. Every label
must be named in its metric's comment (``label: values``); :func:`missing` says which are not.
"""

from __future__ import annotations

import ast
import enum
import io
import re
import tokenize
from pathlib import Path
from typing import Final

import prometheus_client

from agentihooks_swarm import metrics, records
from tests.tools.docs import markdown

SOURCE: Final = Path(metrics.__file__)


def label_notes(source: str) -> dict[str, str]:
    """The comments inside each ``Counter("name", …)``/``Gauge(…)`` call, by metric name."""
    comments: dict[int, str] = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            lines = range(node.lineno, (node.end_lineno or node.lineno) + 1)
            notes = [comments[line] for line in lines if comments.get(line)]
            if notes:
                found[node.args[0].value] = _joined(notes)
    return found


_LABEL: Final = re.compile(r"^\w[\w ]*: ")


def _joined(notes: list[str]) -> str:
    """Comment lines as one note: a line that starts with ``label:`` starts a new part (``; ``);
    any other line goes on from the one before (a list broken after ``|`` goes on without a space)."""
    text = notes[0]
    for note in notes[1:]:
        if _LABEL.match(note):
            text = text.rstrip(";") + "; " + note
        else:
            text += note if text.endswith("|") else " " + note
    return text


_ENUM: Final = re.compile(r"records\.([A-Z]\w+)")


def expand(note: str) -> str:
    """``records.X`` (an enum) replaced by its values, ``a|b|c``."""

    def values(match: re.Match[str]) -> str:
        found = getattr(records, match[1], None)
        if not (isinstance(found, type) and issubclass(found, enum.Enum)):
            return match[0]
        return "|".join(str(member.value) for member in found)

    return _ENUM.sub(values, note)


def collectors(registry: metrics.Metrics) -> list[prometheus_client.metrics.MetricWrapperBase]:
    """The metric objects of a ``Metrics``, in the order it creates them."""
    return [
        item
        for item in vars(registry).values()
        if isinstance(item, prometheus_client.metrics.MetricWrapperBase)
    ]


def rows() -> list[list[str]]:
    registry = metrics.Metrics()
    notes = label_notes(SOURCE.read_text())
    found = []
    for collector in collectors(registry):
        (family,) = collector.describe()
        exposed = f"{family.name}_total" if family.type == "counter" else family.name
        # The label names are only on the collector: a family has no sample until a child counts.
        labels = ", ".join(f"`{name}`" for name in collector._labelnames) or "—"
        found.append(
            [
                f"`{exposed}`",
                family.type,
                labels,
                markdown.cell(family.documentation),
                markdown.cell(expand(notes.get(family.name, ""))),
            ]
        )
    registered = {family.name for family in registry.registry.collect()}
    listed = {row[0].strip("`").removesuffix("_total") for row in found}
    if registered != listed:
        raise RuntimeError(f"Metrics() registers {sorted(registered - listed)} outside its attributes")
    return found


def missing() -> list[str]:
    """One message per metric label whose values the code's comment does not give."""
    notes = label_notes(SOURCE.read_text())
    found = []
    for collector in collectors(metrics.Metrics()):
        (family,) = collector.describe()
        note = notes.get(family.name, "")
        for label in collector._labelnames:
            if not re.search(rf"(^|; |\n){re.escape(label)}: \S", note):
                found.append(
                    f"operator/agentihooks_swarm/metrics.py: {family.name}'s label {label} has no values: "
                    f"write `# {label}: a|b|…` on its label list, then `make docs`"
                )
    return found


def page() -> str:
    return "\n".join(
        [
            "# Metrics",
            "",
            *markdown.generated(source="the registry of `operator/agentihooks_swarm/metrics.py`"),
            "The controller serves these on `/metrics` at `AGENTIHOOKS_SWARM_METRICS_PORT` (the chart's "
            "`metrics` port and Service, and a ServiceMonitor behind `metrics.serviceMonitor.enabled`). "
            "A counter is exposed with `_total`; a labelled counter shows no sample until it first counts. "
            "The chart's alerts on them have [runbooks](../runbooks/index.md).",
            "",
            *markdown.table(["Metric", "Type", "Labels", "Help", "Label values (from the code)"], rows()),
            "",
        ]
    )
