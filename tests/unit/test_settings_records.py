"""Settings from the environment, Redis key layout, record round trips."""

from __future__ import annotations

import pytest

from agentihooks_swarm import records, resources, settings, store
from agentihooks_swarm.errors import InvalidResource


def test_settings_from_env_reads_prefixed_variables() -> None:
    loaded = settings.Settings.from_env(
        {
            "AGENTIHOOKS_SWARM_REDIS_URL": "rediss://redis:6380/2",
            "AGENTIHOOKS_SWARM_REDIS_PASSWORD": "s3cret",
            "AGENTIHOOKS_SWARM_METRICS_PORT": "0",
            "AGENTIHOOKS_SWARM_KEY_PREFIX": "prod",
            "UNRELATED": "x",
        }
    )
    assert (loaded.redis_url, loaded.redis_password, loaded.metrics_port, loaded.key_prefix) == (
        "rediss://redis:6380/2",
        "s3cret",
        0,
        "prod",
    )


def test_settings_reject_bad_values_naming_the_variable() -> None:
    with pytest.raises(
        settings.InvalidSettings, match="AGENTIHOOKS_SWARM_METRICS_PORT='seventy': Input should be"
    ):
        settings.Settings.from_env({"AGENTIHOOKS_SWARM_METRICS_PORT": "seventy"})


def test_settings_have_no_log_limits() -> None:
    names = set(settings.Settings.model_fields)
    assert not {n for n in names if "log" in n}


def test_keys_of_one_slug_share_a_cluster_hash_tag() -> None:
    assert (
        store.key("agentihooks-swarm", "demo", "attempt-retained")
        == "agentihooks-swarm:{demo}:attempt-retained"
    )


def test_startup_record_round_trips_and_leaves_out_absent_fields() -> None:
    record = records.StartupRecord(
        pod="swarm-worker-e-1",
        uid="u1",
        labels={"swarm.agentihooks.io/generation": "1"},
        startup=records.StartupCapture(
            phase="Failed",
            reason="",
            containers=[records.ContainerCapture(name="worker", terminated={"exitCode": 78}, log="x\n")],
        ),
    )
    raw = records.dump(record)
    assert records.load(records.StartupRecord, raw) == record
    assert "log_truncated" not in raw


@pytest.mark.parametrize("name", ["Bad", "9lives", "a" * 41, "has_underscore", ""])
def test_bad_execution_names_are_invalid(name: str) -> None:
    with pytest.raises(InvalidResource, match="Execution name"):
        resources.parse_execution(name=name, spec={"swarm": "s", "project": "p"})


def test_malformed_execution_spec_says_what_to_fix() -> None:
    with pytest.raises(InvalidResource, match=r"spec\.project"):
        resources.parse_execution(name="e1", spec={"swarm": "s"})
    with pytest.raises(InvalidResource, match=r"spec\.worker"):
        resources.parse_swarm(name="s", spec="not a mapping")


def test_startup_deadline_setting_and_template_field() -> None:
    assert settings.Settings.from_env({}).startup_deadline_seconds == 600
    assert (
        settings.Settings.from_env(
            {"AGENTIHOOKS_SWARM_STARTUP_DEADLINE_SECONDS": "30"}
        ).startup_deadline_seconds
        == 30
    )
    with pytest.raises(settings.InvalidSettings, match="AGENTIHOOKS_SWARM_STARTUP_DEADLINE_SECONDS"):
        settings.Settings.from_env({"AGENTIHOOKS_SWARM_STARTUP_DEADLINE_SECONDS": "0"})
    spec = {"worker": {"image": "w", "startupDeadlineSeconds": 45}}
    assert resources.parse_swarm(name="s", spec=spec).worker.startup_deadline_seconds == 45
    assert (
        resources.parse_swarm(name="s", spec={"worker": {"image": "w"}}).worker.startup_deadline_seconds
        is None
    )
    with pytest.raises(InvalidResource, match="startupDeadlineSeconds"):
        resources.parse_swarm(name="s", spec={"worker": {"image": "w", "startupDeadlineSeconds": 0}})


def test_an_unschedulable_final_record_round_trips_and_an_older_one_still_loads() -> None:
    evidence = records.StartupCapture(
        phase="Pending",
        reason="",
        containers=[],
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        events=[records.EventCapture(type="Warning", reason="FailedScheduling", message="0/1", count=2)],
    )
    evidence.failure_class = records.FailureClass.UNSCHEDULABLE  # `class` in JSON; set by name in code.
    final = records.FinalRecord(
        execution="e",
        generation=1,
        state=records.FinalState.FAILED,
        outcome="o",
        reason="Unschedulable",
        evidence=evidence,
    )
    dumped = records.dump(final)
    assert '"class":"unschedulable"' in dumped
    assert records.load(records.FinalRecord, dumped) == final
    older = records.load(
        records.FinalRecord, '{"execution":"e","generation":1,"state":"failed","outcome":"o"}'
    )
    assert older.reason is None and older.evidence is None
    assert '"reason"' not in records.dump(older)
