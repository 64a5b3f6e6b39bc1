"""The keyed work queue: a key is never handed to two workers at once, and a change that comes
in during a step is acted on by a later step."""

from __future__ import annotations

import asyncio

from agentihooks_swarm.workqueue import KeyedQueue


async def test_a_key_added_twice_before_a_worker_takes_it_is_handed_out_once() -> None:
    queue: KeyedQueue[str] = KeyedQueue()
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["a", "b"]
    assert len(queue) == 0 and queue.active == 2


async def test_a_key_added_during_its_step_comes_again_after_it() -> None:
    queue: KeyedQueue[str] = KeyedQueue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")  # A change while the step runs.
    queue.add("a")
    assert len(queue) == 0  # Not handed to a second worker now.
    queue.done(key)
    assert len(queue) == 1 and await queue.get() == "a"
    queue.done("a")
    assert len(queue) == 0 and queue.active == 0


async def test_two_workers_never_hold_one_key() -> None:
    queue: KeyedQueue[int] = KeyedQueue()
    holding: set[int] = set()
    overlaps: list[int] = []
    steps: list[int] = []

    async def worker() -> None:
        while True:
            key = await queue.get()
            if key in holding:
                overlaps.append(key)
            holding.add(key)
            await asyncio.sleep(0.001)
            steps.append(key)
            holding.discard(key)
            queue.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(8)]
    for round_ in range(50):
        for key in range(5):
            queue.add(key)
        await asyncio.sleep(0.0005 * (round_ % 3))
    for _ in range(500):  # Until the queue drains.
        if not (len(queue) or queue.active):
            break
        await asyncio.sleep(0.01)
    for task in workers:
        task.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    assert overlaps == []
    assert set(steps) == set(range(5)) and len(steps) >= 5
