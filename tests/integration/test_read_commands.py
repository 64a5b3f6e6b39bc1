"""The spec's read commands and the records command, on real records in the real Redis, and the
worker's reporting CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

from agentihooks_swarm import errors, records, settings, store as store_
from agentihooks_swarm.lifecycle import cleanup
from agentihooks_swarm.storage import operations
from tests.support import stored_records
from tests.support.fixtures_rig import Rig
from tests.support.planting import PLANTED, SLUG
from tests.support.read_commands import READ_JOURNAL, READ_RETAINED
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration


async def run(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_SWARM_")},
        "AGENTIHOOKS_SWARM_REDIS_URL": redis_url,
    }
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, *args], env=env, capture_output=True, text=True, check=False
    )


# Among the slowest tests on a loaded machine: it runs the documented read commands as users do,
# six Python processes, each importing the operator's package.
async def test_journal_and_retained_read_commands(rig: Rig, redis_url: str) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78, reason="Error")
    rig.fault("403", path=r".*/log$", times=1)
    async with rig.runtime() as runtime:
        with pytest.raises(cleanup.PassFailed):
            await rig.cleanup(runtime, attempt)

        journal = await run(redis_url, "-c", READ_JOURNAL, SLUG, attempt.execution)
        assert journal.returncode == 0, journal.stderr
        [pinned] = json.loads(journal.stdout)
        assert pinned["log_read_error"]["cause"] == "refused" and pinned["log_read_failed_at"]
        assert json.loads(journal.stdout) == [
            {
                "name": attempt.pod_name,
                "uid": pod["metadata"]["uid"],
                "log_reads": 1,
                "log_read_failed_at": pinned["log_read_failed_at"],
                "log_read_error": pinned["log_read_error"],
            }
        ]
        view = await run(redis_url, "-m", "agentihooks_swarm", "records", "journal", SLUG, attempt.execution)
        assert json.loads(view.stdout) == json.loads(journal.stdout)

        await rig.cleanup(runtime, attempt)

    retained = await run(redis_url, "-c", READ_RETAINED, SLUG, attempt.execution)
    assert retained.returncode == 0, retained.stderr
    [entry] = json.loads(retained.stdout)
    assert (entry["name"], entry["outcome"], entry["log_reads"]) == (attempt.pod_name, "deleted", 1)
    assert entry["startup"]["containers"][0]["log"].endswith(PLANTED.decode())
    view = await run(redis_url, "-m", "agentihooks_swarm", "records", "retained", SLUG, attempt.execution)
    assert json.loads(view.stdout) == json.loads(retained.stdout)
    full = await run(
        redis_url, "-m", "agentihooks_swarm", "records", "retained", "--full", SLUG, attempt.execution
    )
    assert set(json.loads(full.stdout)) == {"execution", "final", "watermark", "archived", "removed"}
    gone = await run(redis_url, "-m", "agentihooks_swarm", "records", "journal", SLUG, attempt.execution)
    assert gone.returncode == 1
    assert "final cleanup in progress" in gone.stderr and "try `records retained`" in gone.stderr


async def test_worker_cli_reports_heartbeats_and_the_first_outcome(
    redis_url: str, store: operations.AsyncStore
) -> None:
    worker_env = ("--slug", SLUG, "--execution", "e9", "--generation", "1")
    for transcript, archived in (("100", "60"), ("90", "10")):
        beat = await run(
            redis_url,
            "-m",
            "agentihooks_swarm",
            "worker",
            *worker_env,
            "heartbeat",
            "--transcript",
            transcript,
            "--archived",
            archived,
        )
        assert beat.returncode == 0, beat.stderr
    heartbeat = await store.read_heartbeat(slug=SLUG, execution="e9")
    assert heartbeat is not None and (heartbeat.transcript, heartbeat.archived) == (
        100,
        60,
    )  # Never backwards.
    first = await run(redis_url, "-m", "agentihooks_swarm", "worker", *worker_env, "outcome", "--success")
    second = await run(redis_url, "-m", "agentihooks_swarm", "worker", *worker_env, "outcome", "--failure")
    assert (first.stdout.strip(), second.stdout.strip()) == ("outcome stored", "an earlier outcome is kept")
    outcome = await store.read_outcome(slug=SLUG, execution="e9")
    assert outcome is not None and outcome.success is True
    missing = await run(
        redis_url, "-m", "agentihooks_swarm", "worker", "heartbeat", "--transcript", "1", "--archived", "1"
    )
    assert missing.returncode == 2 and "--slug and --execution are required" in missing.stderr


async def test_password_protected_redis(tmp_path: Path) -> None:
    with RedisServer(password="s3cret") as server:
        bare = server.url.replace(":s3cret@", "")
        async with operations.open_store(
            settings.Settings(redis_url=bare, redis_password="s3cret")
        ) as opened:
            await opened.ping()
        with store_.connect(settings.Settings(redis_url=server.url)).redis as sync:
            assert sync.ping() is True
        async with operations.open_store(settings.Settings(redis_url=bare)) as anonymous:
            with pytest.raises(errors.StoreUnavailable, match="Redis"):
                await anonymous.ping()


async def test_a_pass_reads_an_attempts_records_together_and_parses_only_what_it_uses(
    store: operations.AsyncStore,
) -> None:
    """``read_attempt`` (one pipeline) gives what each record's own read gives; a worker's corrupt
    heartbeat fails only the read that asks for it, as its own read did."""
    slug, execution = SLUG, "together"
    final = await store.record_final(
        slug=slug,
        final=stored_records.final(
            execution=execution, state=records.FinalState.REFUSED, outcome=store.key(slug, store_.OUTCOMES)
        ),
    )
    journal = await store.pin_journal(slug=slug, journal=stored_records.journal(execution=execution))
    await store.redis.hset(store.key(slug, store_.HEARTBEATS), execution, "{not json")

    together = await store.read_attempt(slug=slug, execution=execution)

    assert together.final == final == await store.read_final(slug=slug, execution=execution)
    assert together.journal == journal == await store.read_journal(slug=slug, execution=execution)
    assert together.retained is None and together.outcome is None and together.startup is None
    with pytest.raises(pydantic.ValidationError):
        together.heartbeat  # noqa: B018 (the property parses)
    with pytest.raises(pydantic.ValidationError):
        await store.read_heartbeat(slug=slug, execution=execution)
    nothing = await store.read_attempt(slug=slug, execution="never-launched")
    assert (nothing.final, nothing.journal, nothing.heartbeat) == (None, None, None)


async def test_a_refused_hand_is_saved_with_its_final_record_and_an_earlier_final_is_kept(
    store: operations.AsyncStore,
) -> None:
    def final(execution: str, state: records.FinalState) -> records.FinalRecord:
        return stored_records.final(
            execution=execution, state=state, outcome=store.key(SLUG, store_.OUTCOMES)
        )

    reason = records.HandReason.PROJECT_UNPERMITTED
    hand = records.HandResult(generation=1, handed=False, reason=reason, pod="w-1")
    refused = final("fresh", records.FinalState.REFUSED)
    await store.save_hand(slug=SLUG, execution="fresh", hand=hand, final=refused)
    assert await store.read_hand(slug=SLUG, execution="fresh") == hand
    stored = await store.read_final(slug=SLUG, execution="fresh")
    assert stored is not None and stored.state == records.FinalState.REFUSED

    earlier = await store.record_final(slug=SLUG, final=final("retried", records.FinalState.FAILED))
    again = final("retried", records.FinalState.REFUSED)
    await store.save_hand(slug=SLUG, execution="retried", hand=hand, final=again)
    assert await store.read_final(slug=SLUG, execution="retried") == earlier
