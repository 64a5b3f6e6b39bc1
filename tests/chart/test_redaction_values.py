"""The chart's ``operator.redaction`` values reach the controller as the settings they name, and the
rendered patterns are the ones the operator reads back (one a line)."""

from __future__ import annotations

import pytest

from agentihooks_swarm import settings
from tests.chart.conftest import RELEASE, Chart, RenderError


def test_patterns_and_store_redacted_reach_the_controller(chart: Chart) -> None:
    patterns = [r"internal-token-[a-z0-9]{20}", r"session=(?P<secret>\w+)"]
    env = chart.render({"operator": {"redaction": {"patterns": patterns, "storeRedacted": True}}}).env()
    names = (settings.PREFIX + "REDACT_PATTERNS", settings.PREFIX + "STORE_REDACTED")
    read = settings.Settings.from_env({name: str(env[name]["value"]) for name in names})
    assert read.store_redacted is True
    assert read.redactor().redact("a internal-token-abcdefghij0123456789 and session=s3cr3t") == (
        "a <redacted> and session=<redacted>"
    )


def test_the_records_reader_redacts_with_the_same_patterns(chart: Chart) -> None:
    patterns = [r"internal-token-[a-z0-9]{20}", r"acct_[0-9]{12}"]
    rendered = chart.render({"operator": {"redaction": {"patterns": patterns}}})
    spec = rendered.one("StatefulSet", f"{RELEASE}-records")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env[settings.PREFIX + "REDACT_PATTERNS"]["value"] == "\n".join(patterns)


def test_by_default_no_extra_pattern_and_the_log_is_stored_as_printed(chart: Chart) -> None:
    env = chart.render().env()
    assert settings.PREFIX + "REDACT_PATTERNS" not in env
    assert env[settings.PREFIX + "STORE_REDACTED"]["value"] == "false"


def test_a_multi_line_pattern_is_refused_by_the_schema(chart: Chart) -> None:
    with pytest.raises(RenderError, match="patterns"):
        chart.render({"operator": {"redaction": {"patterns": ["a\nb"]}}})
