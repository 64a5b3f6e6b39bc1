"""What the operator relies on kopf for (kopf_adapter.py): one test per assumption, so a kopf
release that changes one fails here, not in production. Running kopf itself (its stop flag, its
event handlers' arguments, tasks it leaves alone) is tested against the real API server in
tests/integration/test_kopf_adapter.py."""

from __future__ import annotations

import asyncio
import inspect
import threading

import kopf
import pytest

from agentihooks_swarm import kopf_adapter


def test_kopf_operator_takes_what_the_operator_passes() -> None:
    parameters = inspect.signature(kopf.operator).parameters
    for name in ("registry", "settings", "standalone", "clusterwide", "namespaces", "stop_flag"):
        assert name in parameters and parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name


def test_the_finalizer_of_earlier_versions_is_kopfs_default() -> None:
    assert kopf_adapter.legacy_finalizers() == frozenset({"kopf.zalando.org/KopfFinalizerMarker"})


@pytest.mark.parametrize("log_format", ["plain", "full", "json"])
def test_the_log_formats_the_chart_passes_are_kopfs(log_format: kopf_adapter.LogFormat) -> None:
    kopf_adapter.configure_logging(verbose=False, debug=False, quiet=True, log_format=log_format)


def test_kopf_is_bounded_below_the_next_major_version() -> None:
    from importlib import metadata

    requirement = next(r for r in metadata.requires("agentihooks-swarm") or [] if r.startswith("kopf"))
    assert "<2" in requirement and ">=1.45" in requirement


class Failing(kopf_adapter.Operator):
    """The thread wrapper around a kopf that fails (its run against a cluster is an integration test)."""

    async def _operator(self, flag: threading.Event) -> None:
        raise RuntimeError("kopf broke")


class Quitting(kopf_adapter.Operator):
    async def _operator(self, flag: threading.Event) -> None:
        return None


class Waiting(kopf_adapter.Operator):
    async def _operator(self, flag: threading.Event) -> None:
        await asyncio.to_thread(flag.wait)  # As kopf waits for its stop flag.


def operator(kind: type[kopf_adapter.Operator]) -> kopf_adapter.Operator:
    return kind(registry=kopf.OperatorRegistry(), settings=kopf_adapter.settings(), namespaces=["ns"])


async def test_kopf_failing_or_quitting_in_its_thread_fails_its_task() -> None:
    with pytest.raises(RuntimeError, match="kopf broke"):
        await operator(Failing).run()
    with pytest.raises(RuntimeError, match="stopped on its own"):
        await operator(Quitting).run()


async def test_kopf_asked_to_stop_returns_and_its_thread_ends() -> None:
    waiting = operator(Waiting)
    running = asyncio.create_task(waiting.run())
    await asyncio.sleep(0.1)
    assert [t for t in threading.enumerate() if t.name == "kopf"]
    waiting.stop()
    await asyncio.wait_for(running, timeout=10)
    assert not [t for t in threading.enumerate() if t.name == "kopf"]
    await asyncio.wait_for(waiting.run(), timeout=1)  # Stopped for good: a restart returns at once.
