"""The supervisor: a task that fails is logged, counted and started again with a growing backoff;
one that keeps failing is given up, which makes the operator unhealthy and stops it."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable

import pytest

from agentihooks_swarm import metrics as metrics_, supervisor


class Moved:
    """A supervisor that gives up after ``give_up_after`` failures in a row, on a clock the test
    moves (``now[0]``), listing the tasks it gave up."""

    def __init__(self, *, backoff_seconds: float, give_up_after: int) -> None:
        self.metrics = metrics_.Metrics()
        self.now = [0.0]
        self.gave_up: list[str] = []
        self.keeper = supervisor.Supervisor(
            metrics=self.metrics,
            backoff_seconds=backoff_seconds,
            give_up_after=give_up_after,
            on_give_up=self.gave_up.append,
            clock=lambda: self.now[0],
        )


def value(metrics: metrics_.Metrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


async def test_a_failing_task_is_restarted_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    metrics = metrics_.Metrics()
    runs: list[int] = []
    ran_again = asyncio.Event()

    async def flaky() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise RuntimeError(f"surprise {len(runs)}")
        ran_again.set()
        await asyncio.sleep(3600)

    keeper = supervisor.Supervisor(metrics=metrics, backoff_seconds=0.01)
    with caplog.at_level(logging.ERROR, logger="agentihooks_swarm.supervisor"):
        keeper.start(supervisor.Runnable(name="flaky", run=flaky))
        await asyncio.wait_for(ran_again.wait(), timeout=5)
    assert keeper.healthy and keeper.failures == {"flaky": 2}
    assert value(metrics, "agentihooks_swarm_task_restarts_total", task="flaky") == 2
    assert value(metrics, "agentihooks_swarm_task_up", task="flaky") == 1
    assert keeper.running() == {"flaky": True}
    failures = [r for r in caplog.records if "flaky failed unexpectedly" in r.getMessage()]
    assert len(failures) == 2 and all(r.exc_info and "surprise" in str(r.exc_info[1]) for r in failures)
    await keeper.stop()


async def test_a_task_that_returns_is_a_failure_too() -> None:
    metrics = metrics_.Metrics()
    calls = 0
    again = asyncio.Event()

    async def quits() -> None:
        nonlocal calls
        calls += 1
        if calls > 1:
            again.set()
            await asyncio.sleep(3600)

    keeper = supervisor.Supervisor(metrics=metrics, backoff_seconds=0.01)
    keeper.start(supervisor.Runnable(name="quits", run=quits))
    await asyncio.wait_for(again.wait(), timeout=5)
    assert keeper.failures == {"quits": 1}
    await keeper.stop()


async def test_the_backoff_doubles_and_a_task_that_keeps_failing_is_given_up() -> None:
    moved = Moved(backoff_seconds=0.02, give_up_after=4)
    keeper, gave_up = moved.keeper, moved.gave_up
    starts: list[float] = []

    async def broken() -> None:
        starts.append(asyncio.get_running_loop().time())
        raise ValueError("always")

    keeper.start(supervisor.Runnable(name="broken", run=broken))
    for _ in range(200):
        if gave_up:
            break
        await asyncio.sleep(0.01)
    assert gave_up == ["broken"] and keeper.given_up == "broken" and not keeper.healthy
    assert len(starts) == 4
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps[0] >= 0.02 and gaps[1] >= 0.04 and gaps[2] >= 0.08  # 0.02, 0.04, 0.08
    assert value(moved.metrics, "agentihooks_swarm_task_up", task="broken") == 0
    await keeper.stop()


async def test_a_long_good_run_resets_the_count() -> None:
    moved = Moved(backoff_seconds=0.001, give_up_after=3)
    keeper, gave_up, now = moved.keeper, moved.gave_up, moved.now
    runs = 0
    done = asyncio.Event()

    async def sometimes() -> None:
        nonlocal runs
        runs += 1
        if runs >= 8:
            done.set()
            await asyncio.sleep(3600)
        now[0] += 1000.0  # Each run "lasted" long enough to count as a good one.
        raise RuntimeError("rare")

    keeper.start(supervisor.Runnable(name="sometimes", run=sometimes))
    await asyncio.wait_for(done.wait(), timeout=5)
    assert gave_up == [] and keeper.failures == {"sometimes": 7}
    await keeper.stop()


async def started_then_stopped(keeper: supervisor.Supervisor, *, name: str) -> Callable[[], Awaitable[None]]:
    """Supervise ``name``, a task that runs until cancelled; once it runs, stop the supervisor.
    Returns the task's function."""
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    keeper.start(supervisor.Runnable(name=name, run=forever))
    await started.wait()
    await keeper.stop()
    return forever


async def test_stop_cancels_every_task() -> None:
    keeper = supervisor.Supervisor(metrics=metrics_.Metrics())
    forever = await started_then_stopped(keeper, name="forever")
    assert keeper.running() == {} and keeper.failures == {"forever": 0}
    with pytest.raises(ValueError, match="supervised already"):
        keeper.start(supervisor.Runnable(name="x", run=forever))
        keeper.start(supervisor.Runnable(name="x", run=forever))
    await keeper.stop()


async def test_a_task_stopped_with_the_operator_is_not_reported_down() -> None:
    """The soak's checker read a replica's gauges as it stopped (a rolling restart) and saw every
    task down: a task cancelled by stop() did not fail, and its gauge keeps saying it ran."""
    metrics = metrics_.Metrics()
    await started_then_stopped(supervisor.Supervisor(metrics=metrics), name="watch executions")
    assert value(metrics, "agentihooks_swarm_task_up", task="watch executions") == 1
    assert value(metrics, "agentihooks_swarm_task_restarts_total", task="watch executions") == 0
