"""Prometheus metrics: one object holding the counters, passed to whoever counts.

Scrape ``/metrics`` on ``AGENTIHOOKS_SWARM_METRICS_PORT`` (the chart exposes it).
"""

from __future__ import annotations

import prometheus_client

from agentihooks_swarm import errors


def cause(error: BaseException) -> str:
    """The ``cause`` label of a failed log read: refused (403 …), timeout, or unavailable (429, 5xx)."""
    if isinstance(error, errors.ApiRefused):
        return "refused"
    return "timeout" if isinstance(error, TimeoutError) else "unavailable"


class Metrics:
    def __init__(self, *, registry: prometheus_client.CollectorRegistry | None = None) -> None:
        self.registry = registry or prometheus_client.CollectorRegistry()
        self.captures = prometheus_client.Counter(
            "agentihooks_swarm_captures",
            "Startup captures of refused worker Pods, by deletion path and result.",
            ["path", "result"],  # path: launch|cleanup; result: stored|degraded|kept
            registry=self.registry,
        )
        self.log_read_failures = prometheus_client.Counter(
            "agentihooks_swarm_log_read_failures",
            "Failed pods/log reads, by cause.",
            ["path", "cause"],  # cause: refused|unavailable|timeout
            registry=self.registry,
        )
        self.pods_removed = prometheus_client.Counter(
            "agentihooks_swarm_pods_removed",
            "Worker Pods handled by a deletion path, by outcome.",
            ["path", "outcome"],
            registry=self.registry,
        )
        self.hands = prometheus_client.Counter(
            "agentihooks_swarm_hands",
            "Hands of a grant to a worker Pod, by result reason ('handed' when it worked).",
            ["reason"],
            registry=self.registry,
        )

    def serve(self, *, port: int) -> None:
        """Serve ``/metrics`` on ``port`` from a background thread."""
        prometheus_client.start_http_server(port, registry=self.registry)

    def render(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)
