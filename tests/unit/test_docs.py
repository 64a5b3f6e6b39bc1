"""The generated documentation pages: they match their sources, and the check that ``make lint``
runs fails (naming the page and the command) when the code changes under a page."""

from __future__ import annotations

import shutil
from pathlib import Path

import prometheus_client
import pydantic
import pytest
import yaml

from agentihooks_swarm import metrics, settings
from tests.tools import docs
from tests.tools.docs import crds, markdown, runbooks, values


def copy_pages(root: Path) -> None:
    """The committed generated pages, at their paths under ``root``."""
    for page in docs.PAGES:
        (root / page.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(docs.REPO / page.path, root / page.path)


def test_the_committed_pages_match_their_sources() -> None:
    assert docs.stale() == []
    assert runbooks.problems() == []


def test_no_reference_page_leaves_a_description_blank() -> None:
    """Every CRD field and Helm value has a description, and every metric label its values."""
    assert docs.gaps() == []


def test_a_value_without_a_comment_a_field_without_a_description_and_a_bare_label_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chart_values = tmp_path / "values.yaml"
    chart_values.write_text(values.VALUES.read_text().replace("  # The image's tag.\n", ""))
    monkeypatch.setattr(values, "VALUES", chart_values)
    crd_dir = tmp_path / "crds"
    crd_dir.mkdir()
    for path in crds.CRDS.glob("*.yaml"):
        text = path.read_text()
        if "executions" in path.name:
            text = text.replace("description: The worker Pod's name, swarm-worker-NAME-ATTEMPT.", "x-a: b")
        (crd_dir / path.name).write_text(text)
    monkeypatch.setattr(crds, "CRDS", crd_dir)

    class Bare(metrics.Metrics):
        def __init__(self) -> None:
            super().__init__()
            self.bare = prometheus_client.Counter(
                "agentihooks_swarm_bare", "Bare.", ["kind"], registry=self.registry
            )

    monkeypatch.setattr(metrics, "Metrics", Bare)

    assert docs.gaps() == [
        "manifests/crds/swarm.agentihooks.io_executions.yaml: Execution field status.pod has no description "
        "(add one, then `make manifests` and `make docs`)",
        "charts/agentihooks-swarm/values.yaml: redis.bundled.image.tag has no description "
        "(write a comment above it, then `make docs`)",
        "operator/agentihooks_swarm/metrics.py: agentihooks_swarm_bare's label kind has no values: "
        "write `# kind: a|b|…` on its label list, then `make docs`",
    ]


def test_a_metric_comment_over_lines_reads_as_one_note_and_names_records_enums() -> None:
    source = """
c = Counter(
    "agentihooks_swarm_a",
    "A.",
    # path: launch|cleanup; outcome: removed|
    # kept
    # class: records.FailureClass
    ["path", "outcome", "class"],
    registry=r,
)
"""
    (note,) = docs.metrics.label_notes(source).values()
    assert note == "path: launch|cleanup; outcome: removed|kept; class: records.FailureClass"
    assert docs.metrics.expand("class: records.FailureClass").startswith("class: exit_code|signal|")


def test_a_page_edited_by_hand_is_stale_and_the_message_names_it_and_the_command(tmp_path: Path) -> None:
    copy_pages(tmp_path)
    assert docs.stale(root=tmp_path) == []
    page = tmp_path / "docs" / "reference" / "metrics.md"
    page.write_text(page.read_text().replace("agentihooks_swarm_hands_total", "agentihooks_swarm_hands"))

    (message,) = docs.stale(root=tmp_path)

    assert message.startswith("docs/reference/metrics.md is stale")
    assert "`make docs`" in message
    assert "+| `agentihooks_swarm_hands_total` |" in message  # The diff shows what the code gives.


def test_a_missing_page_is_reported(tmp_path: Path) -> None:
    copy_pages(tmp_path)
    (tmp_path / "docs" / "reference" / "crds.md").unlink()
    assert docs.stale(root=tmp_path) == ["docs/reference/crds.md is missing: run `make docs` and commit it"]


def test_a_new_setting_makes_the_settings_page_stale_until_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_pages(tmp_path)

    class Wider(settings.Settings):
        shiny_new_knob_seconds: float = pydantic.Field(default=3.0, gt=0, description="A knob added later.")

    monkeypatch.setattr(settings, "Settings", Wider)

    (message,) = docs.stale(root=tmp_path)
    assert message.startswith("docs/reference/settings.md is stale")
    assert "AGENTIHOOKS_SWARM_SHINY_NEW_KNOB_SECONDS" in message
    assert docs.write(root=tmp_path) == ["docs/reference/settings.md"]
    assert docs.stale(root=tmp_path) == []
    row = next(
        line for line in (tmp_path / "docs/reference/settings.md").read_text().splitlines() if "KNOB" in line
    )
    assert (
        row == "| `AGENTIHOOKS_SWARM_SHINY_NEW_KNOB_SECONDS` | number (> 0) | `3` |  | A knob added later. |"
    )


def test_a_new_metric_makes_the_metrics_page_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy_pages(tmp_path)

    class More(metrics.Metrics):
        def __init__(self) -> None:
            super().__init__()
            self.shiny = prometheus_client.Counter(
                "agentihooks_swarm_shiny", "Shiny things.", ["kind"], registry=self.registry
            )

    monkeypatch.setattr(metrics, "Metrics", More)

    (message,) = docs.stale(root=tmp_path)
    assert message.startswith("docs/reference/metrics.md is stale")
    assert "`agentihooks_swarm_shiny_total` | counter | `kind` | Shiny things." in message


def test_each_metric_shows_the_label_values_its_code_comment_names() -> None:
    source = """
c = Counter(
    "agentihooks_swarm_a",
    "A.",
    ["path", "result"],  # path: launch|cleanup
    registry=r,
)
g = Gauge("agentihooks_swarm_b", "B.", registry=r)
"""
    assert docs.metrics.label_notes(source) == {"agentihooks_swarm_a": "path: launch|cleanup"}


def test_values_comments_belong_to_the_key_below_them_and_a_blank_line_ends_them() -> None:
    text = """# The file's heading.

image:
  # Where from.
  # Two lines.
  repository: x
  tag: ""
# A group.
redis:
  external:
    # Deep.
    url: ""
"""
    assert values.comments(text) == {
        ("image", "repository"): "Where from. Two lines.",
        ("redis",): "A group.",
        ("redis", "external", "url"): "Deep.",
    }


def test_code_in_a_table_cell_keeps_pipes_and_backslashes() -> None:
    assert markdown.code(r"^\S+$") == r"`^\S+$`"
    assert markdown.code("a|b") == "<code>a&#124;b</code>"
    assert markdown.cell("one <slug> | two `<x>`") == "one &lt;slug&gt; \\| two `<x>`"


def test_an_alert_without_a_runbook_or_its_url_fails_the_check(tmp_path: Path) -> None:
    groups = yaml.safe_load(runbooks.ALERTS.read_text())
    groups["groups"][0]["rules"].append(
        {
            "alert": "AgentihooksSwarmShiny",
            "expr": "vector(1)",
            "labels": {"severity": "info"},
            "annotations": {"summary": "s", "description": "d"},
        }
    )
    alerts = tmp_path / "alerts.yaml"
    alerts.write_text(yaml.safe_dump(groups))

    found = runbooks.problems(alerts_file=alerts)

    assert found == [
        "alert AgentihooksSwarmShiny has no runbook: write docs/runbooks/AgentihooksSwarmShiny.md",
        f"alert AgentihooksSwarmShiny in {alerts}: annotation runbook_url is None, expected "
        "'https://agentihooks.github.io/agentihooks-swarm/runbooks/AgentihooksSwarmShiny/'",
    ]


def test_a_runbook_of_no_alert_fails_the_check(tmp_path: Path) -> None:
    for page in runbooks.RUNBOOKS.glob("*.md"):
        shutil.copy(page, tmp_path / page.name)
    (tmp_path / "AgentihooksSwarmGone.md").write_text("# AgentihooksSwarmGone\n")

    assert runbooks.problems(runbooks=tmp_path) == [
        f"{tmp_path / 'AgentihooksSwarmGone.md'} is the runbook of no alert in "
        "charts/agentihooks-swarm/files/alerts.yaml"
    ]


def test_every_runbook_is_in_the_site_navigation() -> None:
    """mkdocs build --strict fails on a page left out of the nav; this names the missing one."""

    def paths(entries: object) -> set[str]:
        if isinstance(entries, str):
            return {entries}
        if isinstance(entries, dict):
            entries = list(entries.values())
        return {path for entry in entries for path in paths(entry)} if isinstance(entries, list) else set()

    listed = paths(yaml.safe_load((docs.REPO / "mkdocs.yml").read_text())["nav"])
    pages = {f"runbooks/{page.name}" for page in runbooks.RUNBOOKS.glob("*.md")}
    assert pages - listed == set()
