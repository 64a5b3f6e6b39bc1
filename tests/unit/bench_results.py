"""Fabricated bench results for the bench's unit tests (pure; no cluster): a :class:`Result` of a
complete run in which every figure a test does not name is a quiet default."""

from __future__ import annotations

from typing import Any

from tests.bench.run import Mode, Result, Scenario


def fabricated(*, scenario: Scenario, mode: Mode, n: int, **figures: Any) -> Result:
    """A complete run of ``n`` Pods, all gone (and recorded, in capture mode); ``figures`` set the
    rest of :class:`Result`'s fields, the ones not given are empty or a fixed value."""
    quiet: dict[str, Any] = {
        "namespace": "ns",
        "complete": True,
        "pods_gone": n,
        "records": n if mode == "capture" else 0,
        "api_per_pod": {},
        "api_operator_wide": {},
        "redis_per_pod": {},
        "record_bytes": 0.0,
        "redis_used_memory": 0,
        "redis_memory_delta": 0,
        "peak_rss_mib": 100.0,
        "cpu_seconds": 1.0,
        "create_seconds": 1.0,
    }
    return Result(scenario=scenario, mode=mode, n=n, **{**quiet, **figures})
