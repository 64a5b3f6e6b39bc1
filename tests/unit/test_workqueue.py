"""The keyed work queue: a key is never handed to two workers at once, and a change that comes
in during a step is acted on by a later step."""

from __future__ import annotations

import asyncio

from agentihooks_swarm.controller.workqueue import KeyedQueue, Priority


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


async def test_keys_added_at_once_are_handed_out_before_the_sweeps_keys() -> None:
    queue: KeyedQueue[str] = KeyedQueue()
    for key in ("s1", "s2", "s3"):
        queue.add(key, priority=Priority.LATER)
    queue.add("new")
    queue.add("s2")  # Waiting later, now wanted at once: moves ahead, once.
    assert len(queue) == 4
    assert [await queue.get() for _ in range(4)] == ["new", "s2", "s1", "s3"]
    assert len(queue) == 0


async def test_a_key_added_later_while_it_waits_at_once_keeps_its_place() -> None:
    queue: KeyedQueue[str] = KeyedQueue()
    queue.add("s1", priority=Priority.LATER)
    queue.add("a")
    queue.add("a", priority=Priority.LATER)
    assert [await queue.get(), await queue.get()] == ["a", "s1"]


async def test_a_key_added_during_its_step_comes_again_at_the_priority_it_was_added_with() -> None:
    queue: KeyedQueue[str] = KeyedQueue()
    queue.add("a")
    queue.add("b")
    a, b = await queue.get(), await queue.get()
    queue.add("a", priority=Priority.LATER)  # The sweep, during a's step.
    queue.add("b", priority=Priority.LATER)
    queue.add("b")  # And a watch, during b's step.
    queue.add("c", priority=Priority.LATER)
    queue.done(a)
    queue.done(b)
    assert [await queue.get() for _ in range(3)] == ["b", "c", "a"]


async def test_a_key_moved_ahead_and_taken_then_swept_again_is_handed_out_once() -> None:
    queue: KeyedQueue[str] = KeyedQueue()
    queue.add("a", priority=Priority.LATER)
    queue.add("a")
    assert await queue.get() == "a"
    queue.done("a")
    queue.add("a", priority=Priority.LATER)  # Its old place in the sweep is still in the deque.
    queue.add("b", priority=Priority.LATER)
    assert [await queue.get(), await queue.get()] == ["a", "b"]
    assert len(queue) == 0
    waiting = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0.01)
    assert not waiting.done()  # Nothing left to hand out: the stale place is not a key.
    waiting.cancel()


async def test_a_worker_that_may_have_ended_goes_ahead_of_new_executions_and_the_sweep() -> None:
    queue: KeyedQueue[str] = KeyedQueue()
    queue.add("s1", priority=Priority.LATER)
    queue.add("new1")
    queue.add("new2")
    queue.add("ended", priority=Priority.EVIDENCE)
    queue.add("new2", priority=Priority.EVIDENCE)  # Waiting at once, now its worker ended: ahead.
    queue.add("ended")  # Added less urgently while it waits first: keeps its place.
    assert len(queue) == 4
    assert [await queue.get() for _ in range(4)] == ["ended", "new2", "new1", "s1"]


async def test_a_key_added_during_its_step_comes_again_at_the_most_urgent_priority_it_was_added_with() -> (
    None
):
    queue: KeyedQueue[str] = KeyedQueue()
    queue.add("a")
    a = await queue.get()
    queue.add("a", priority=Priority.LATER)
    queue.add("a", priority=Priority.EVIDENCE)
    queue.add("a")
    queue.add("b")
    queue.done(a)
    assert [await queue.get(), await queue.get()] == ["a", "b"]
