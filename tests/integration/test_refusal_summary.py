"""A swarm's refusals by fingerprint and its refusal budget, on a real redis-server: each refused
Pod counted once, at most 100 fingerprints (the oldest seen dropped), a budget that trips at its
count and clears on a new template or reset, agreed by every replica (the state is in Redis)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentihooks_swarm import records, settings
from agentihooks_swarm.storage import keys, operations, topology
from tests.support.clocks import Clock

SLUG = "summary"


@pytest.fixture
def clock() -> Clock:
    return Clock(now=1_800_000_000.0)


@pytest.fixture
async def clocked(redis_url: str, clock: Clock) -> AsyncIterator[operations.AsyncStore]:
    configured = settings.Settings(redis_url=redis_url)
    opened = operations.AsyncStore(
        client=topology.async_client(configured), prefix=configured.key_prefix, clock=clock
    )
    try:
        yield opened
    finally:
        await opened.aclose()


def refused(fingerprint: str, text: str = "refused: no config") -> records.StartupCapture:
    return records.StartupCapture.model_validate(
        {
            "phase": "Failed",
            "reason": "",
            "containers": [{"name": "w", "terminated": {"exitCode": 78}, "log": text}],
            "class": "exit_code",
            "fingerprint": fingerprint,
            "fingerprint_text": text,
        }
    )


def example(n: int) -> records.Example:
    return records.Example(execution=f"e{n}", pod=f"swarm-worker-e{n}-1", uid=f"uid-{n}")


async def note(store: operations.AsyncStore, n: int, fingerprint: str = "aaa", text: str = "refused") -> bool:
    return await store.refusals.note(
        slug=SLUG, capture=refused(fingerprint, text), example=example(n), at=f"t{n}"
    )


async def budget(
    store: operations.AsyncStore, *, template: str = "t1", reset: str = "", same: bool = False
) -> str:
    verdict, _ = await store.refusals.budget(
        slug=SLUG,
        window_seconds=60,
        max_refusals=3,
        same_fingerprint=same,
        template=template,
        reset=reset,
        at="now",
    )
    return verdict


async def test_each_refused_pod_counts_once_under_its_fingerprint(clocked: operations.AsyncStore) -> None:
    for n in range(30):
        assert await note(clocked, n) is True
    assert await note(clocked, 7) is False  # The same Pod again (a step that came twice).
    await note(clocked, 100, fingerprint="bbb", text="other")
    [first, second] = await clocked.refusals.fingerprints(slug=SLUG)
    assert (first.fingerprint, first.count, first.first_seen, first.last_seen) == ("aaa", 30, "t0", "t29")
    assert first.example == example(0) and first.text == "refused"
    assert (second.fingerprint, second.count, second.example.execution) == ("bbb", 1, "e100")
    assert await clocked.refusals.since(slug=SLUG, seconds=3600) == 31


async def test_at_most_100_fingerprints_the_oldest_seen_dropped(
    clocked: operations.AsyncStore, clock: Clock
) -> None:
    for n in range(keys.MAX_FINGERPRINTS):
        clock.now += 1
        await note(clocked, n, fingerprint=f"f{n:03d}")
    clock.now += 1
    await note(clocked, 500, fingerprint="f000")  # Seen again: now the newest.
    clock.now += 1
    await note(clocked, 501, fingerprint="new")
    kept = {s.fingerprint for s in await clocked.refusals.fingerprints(slug=SLUG)}
    assert len(kept) == keys.MAX_FINGERPRINTS
    assert "new" in kept and "f000" in kept and "f001" not in kept


async def test_the_budget_trips_at_its_count_and_holds(clocked: operations.AsyncStore, clock: Clock) -> None:
    await note(clocked, 1)
    await note(clocked, 2)
    assert await budget(clocked) == "ok"
    await note(clocked, 3)
    verdict, state = await clocked.refusals.budget(
        slug=SLUG,
        window_seconds=60,
        max_refusals=3,
        same_fingerprint=False,
        template="t1",
        reset="",
        at="now",
    )
    assert verdict == "tripped" and state is not None
    assert (state.fingerprint, state.count, state.text, state.window_seconds) == ("aaa", 3, "refused", 60)
    clock.now += 3600
    assert await budget(clocked) == "tripped"  # Until something changes, whatever time passes.


async def test_a_new_template_or_a_reset_clears_it_and_counts_afresh(
    clocked: operations.AsyncStore, clock: Clock
) -> None:
    for n in range(3):
        await note(clocked, n)
    assert await budget(clocked) == "tripped"
    assert await budget(clocked, template="t2") == "cleared"
    assert await budget(clocked, template="t2") == "ok"  # The refusals before the clearing do not count.
    for n in range(3, 6):
        clock.now += 1
        await note(clocked, n)
    assert await budget(clocked, template="t2") == "tripped"
    assert await budget(clocked, template="t2", reset="x") == "cleared"
    assert await budget(clocked, template="t2", reset="x") == "ok"


async def test_only_the_window_counts_and_same_fingerprint_counts_one(
    clocked: operations.AsyncStore, clock: Clock
) -> None:
    await note(clocked, 1, fingerprint="aaa")
    clock.now += 120
    await note(clocked, 2, fingerprint="aaa")
    await note(clocked, 3, fingerprint="bbb")
    assert await budget(clocked, same=True) == "ok"  # aaa: 1 in the window, bbb: 1.
    await note(clocked, 4, fingerprint="bbb")
    assert await budget(clocked, same=True) == "ok"  # bbb: 2.
    assert await budget(clocked) == "tripped"  # All: 3 within the window.
