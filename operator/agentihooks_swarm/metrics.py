"""Prometheus metrics: one object holding the counters, passed to whoever counts.

Scrape ``/metrics`` on ``AGENTIHOOKS_SWARM_METRICS_PORT`` (the chart exposes it).
"""

from __future__ import annotations

import prometheus_client

from agentihooks_swarm import records


def count_capture(metrics: Metrics, *, path: str, capture: records.StartupCapture) -> None:
    """Count a stored capture's class, and the Events read that failed for it."""
    if capture.failure_class is not None:
        metrics.startup_failures.labels(path=path, **{"class": str(capture.failure_class)}).inc()
    if capture.events_error is not None:
        metrics.events_read_failures.labels(path=path, cause=capture.events_error.cause).inc()
    for container in capture.containers:
        if container.log_rereads:
            result = "filled" if container.log else "empty"
            metrics.log_rereads.labels(path=path, result=result).inc()


class Metrics:
    def __init__(self, *, registry: prometheus_client.CollectorRegistry | None = None) -> None:
        self.registry = registry or prometheus_client.CollectorRegistry()
        self._captures()
        self._refusals()
        self._cleanup()
        self._redis()
        self._retention()
        self._operator()
        self._workers()

    def _captures(self) -> None:
        """What the captures found, and how their reads went."""
        self.captures = prometheus_client.Counter(
            "agentihooks_swarm_captures",
            "Startup captures of refused worker Pods, by deletion path and result.",
            ["path", "result"],  # path: launch|cleanup; result: stored|degraded|kept
            registry=self.registry,
        )
        self.log_read_failures = prometheus_client.Counter(
            "agentihooks_swarm_log_read_failures",
            "Failed pods/log reads, by cause.",
            ["path", "cause"],  # path: launch|cleanup; cause: refused|node_unreachable|unavailable|timeout
            registry=self.registry,
        )
        self.pods_removed = prometheus_client.Counter(
            "agentihooks_swarm_pods_removed",
            "Worker Pods handled by a deletion path, by outcome.",
            # path: launch|cleanup; outcome: removed|kept (launch), deleted|absent|absent_after_send|
            # replaced|unselected (cleanup)
            ["path", "outcome"],
            registry=self.registry,
        )
        self.look_alike_pods = prometheus_client.Counter(
            "agentihooks_swarm_look_alike_pods",
            "Pods with a worker's name and labels that its Execution does not own, left alone.",
            # path: launch (a Pod in the worker's way) | cleanup (one beside the attempt's own, when
            # cleanup lists the attempt's Pods) | orphans (one naming an Execution that is gone)
            ["path"],
            registry=self.registry,
        )
        self.startup_failures = prometheus_client.Counter(
            "agentihooks_swarm_startup_failures",
            "Captures of workers that never started, by deletion path and failure class.",
            ["path", "class"],  # path: launch|cleanup|deadline; class: records.FailureClass
            registry=self.registry,
        )
        self.events_read_failures = prometheus_client.Counter(
            "agentihooks_swarm_events_read_failures",
            "Failed reads of a Pod's Events for a capture (the capture has no events field), by cause.",
            # path: launch|cleanup|deadline; cause: refused|node_unreachable|unavailable|timeout
            ["path", "cause"],
            registry=self.registry,
        )
        self.log_rereads = prometheus_client.Counter(
            "agentihooks_swarm_log_rereads",
            "Just-terminated containers whose first log read was empty and was read again, by "
            "whether a later read had lines (filled: the runtime wrote them after reporting the exit).",
            ["path", "result"],  # path: launch|cleanup|deadline; result: filled|empty
            registry=self.registry,
        )
        self.pod_events_reads = prometheus_client.Counter(
            "agentihooks_swarm_pod_events_reads",
            "Reads of a Pod's Events for a capture, by source: the operator's Events index, or a list.",
            ["source"],  # source: index|list (list: the index was out of sync, or had dropped the Pod)
            registry=self.registry,
        )
        self.event_index_synced = prometheus_client.Gauge(
            "agentihooks_swarm_event_index_synced",
            "1 while the index of the Pods' Events is in sync with the API server (its watch runs).",
            registry=self.registry,
        )

    def _refusals(self) -> None:
        """The refusals counted under their fingerprints, and what holds a swarm back."""
        self.refusals = prometheus_client.Counter(
            "agentihooks_swarm_refusals",
            "Refused worker Pods counted under their fingerprint, by swarm and failure class (the "
            "fingerprints themselves: status.refusals of the Swarm, and records top).",
            ["swarm", "class"],  # swarm: the Swarm's name; class: records.FailureClass
            registry=self.registry,
        )
        self.refusal_budget_exceeded = prometheus_client.Gauge(
            "agentihooks_swarm_refusal_budget_exceeded",
            "1 while a swarm's refusal budget holds its new Executions back (Blocked).",
            ["swarm"],  # swarm: the Swarm's name
            registry=self.registry,
        )
        self.top_fingerprints = prometheus_client.Gauge(
            "agentihooks_swarm_refusal_fingerprint_count",
            "The count of each of a swarm's five most frequent refusal fingerprints (the dashboard's "
            "table; no other fingerprint is exported, to bound the series). A fingerprint's text is in "
            "the Swarm's status.refusals.top and `records top`, redacted, never in a label.",
            # swarm: the Swarm's name; rank: 1-5; fingerprint: 12 hex characters;
            # class: records.FailureClass
            ["swarm", "rank", "fingerprint", "class"],
            registry=self.registry,
        )

    def _cleanup(self) -> None:
        """What the deletion paths did."""
        self.startup_deadlines = prometheus_client.Counter(
            "agentihooks_swarm_startup_deadlines",
            "Worker Pods past their startup deadline, by what the operator did.",
            # action: deadline_set (activeDeadlineSeconds set)|unschedulable (attempt failed)
            ["action"],
            registry=self.registry,
        )
        self.store_failures = prometheus_client.Counter(
            "agentihooks_swarm_store_failures",
            "Redis writes that failed, so a refused Pod was kept (launch) or a pass retried (cleanup).",
            ["path"],  # path: launch|cleanup
            registry=self.registry,
        )
        self.cleanup_failures = prometheus_client.Counter(
            "agentihooks_swarm_cleanup_pass_failures",
            "Cleanup passes that stopped early and will be retried, by error type.",
            # error: the error's type - PassFailed|Terminating (a Pod's log, delete or grace period),
            # ApiRefused|NotFound|AlreadyExists|PreconditionFailed|ApiUnavailable|ApiTimeout|ApiError
            # (the API server), StoreUnavailable|NotDurable (Redis), StaleWrite (another step wrote first),
            # Forgotten (the life's records were forgotten while a step of it was in flight)
            ["error"],
            registry=self.registry,
        )
        self.hands = prometheus_client.Counter(
            "agentihooks_swarm_hands",
            "Hands of a grant to a worker Pod, by result reason ('handed' when it worked).",
            ["reason"],  # reason: handed, or a refusal - records.HandReason
            registry=self.registry,
        )

    def _redis(self) -> None:
        """Redis under the deletion paths: its failovers and its replicas."""
        self.primary_changes = prometheus_client.Counter(
            "agentihooks_swarm_redis_primary_changes",
            "Times the Redis primary's replication id changed (a failover, or a primary started again).",
            registry=self.registry,
        )
        self.evidence_restored = prometheus_client.Counter(
            "agentihooks_swarm_evidence_restored",
            "Evidence records this replica wrote and put back because a new Redis primary lacked them.",
            ["record"],  # record: startup|journal|retained|owner
            registry=self.registry,
        )
        self.evidence_restore_skipped = prometheus_client.Counter(
            "agentihooks_swarm_evidence_restore_skipped",
            "Evidence records not put back after a Redis failover, by reason: the name belongs to "
            "another Execution now, its records were forgotten (records forget, retention), or the "
            "topology's primary is not watched (counted once each time it is found so).",
            ["reason"],  # reason: owner_changed|forgotten|unwatched
            registry=self.registry,
        )
        self.evidence_restore_wait_shortfalls = prometheus_client.Counter(
            "agentihooks_swarm_evidence_restore_wait_shortfalls",
            "Evidence records put back after a failover that fewer than REDIS_MIN_REPLICAS replicas "
            "acknowledged in time (the restore went on with the next record).",
            registry=self.registry,
        )
        self.recent_evidence_bytes = prometheus_client.Gauge(
            "agentihooks_swarm_recent_evidence_bytes",
            "Bytes of evidence the leader keeps from the last 5 minutes, to put back after a failover.",
            registry=self.registry,
        )
        self.recent_evidence_dropped = prometheus_client.Counter(
            "agentihooks_swarm_recent_evidence_dropped",
            "Evidence records dropped from the failover memory before their 5 minutes, for its byte "
            "bound (a failover then cannot put them back).",
            registry=self.registry,
        )
        self.failover_watched = prometheus_client.Gauge(
            "agentihooks_swarm_failover_watched",
            "1 while the Redis primary is watched for failovers; 0 on a topology that is not "
            "(Redis Cluster, or a Redis that refuses INFO).",
            registry=self.registry,
        )
        self.replica_waits = prometheus_client.Counter(
            "agentihooks_swarm_replica_waits",
            "Evidence writes waited on for REDIS_MIN_REPLICAS replicas (Redis WAIT), by result.",
            ["result"],  # result: acknowledged|timeout (timeout: the Pod is kept)
            registry=self.registry,
        )

    def _retention(self) -> None:
        """What Redis keeps: the retention sweep, and what the swarms' records take."""
        self.retention_swept = prometheus_client.Counter(
            "agentihooks_swarm_retention_swept",
            "Executions whose records the retention sweep removed.",
            registry=self.registry,
        )
        self.retention_sweeps = prometheus_client.Counter(
            "agentihooks_swarm_retention_sweeps",
            "Retention sweeps by result.",
            ["result"],  # result: done|failed
            registry=self.registry,
        )
        self.stored_bytes = prometheus_client.Gauge(
            "agentihooks_swarm_stored_bytes",
            "Bytes a swarm's keys take in Redis (MEMORY USAGE of each, every entry walked), as last "
            "measured by the leader.",
            ["swarm"],  # swarm: the Swarm's name
            registry=self.registry,
        )
        self.quota_bytes = prometheus_client.Gauge(
            "agentihooks_swarm_quota_bytes",
            "A swarm's byte quota (SWARM_QUOTA_BYTES; 0: off): at it, its new Executions are Blocked.",
            ["swarm"],  # swarm: the Swarm's name
            registry=self.registry,
        )
        self.quota_blocked = prometheus_client.Counter(
            "agentihooks_swarm_quota_blocked",
            "Executions held back (Blocked, reason QuotaExceeded) because their swarm reached its byte "
            "quota, counted once each time one is newly held back.",
            ["swarm"],  # swarm: the Swarm's name
            registry=self.registry,
        )

    def _operator(self) -> None:
        """The operator's own machinery: its tasks, its steps, its queue."""
        self.launch_reads = prometheus_client.Counter(
            "agentihooks_swarm_launch_reads",
            "A launch's reads of what it launches with (its Swarm, its Execution's spec), by source: "
            "the operator's watches, or the API server (a watch listing again, a Swarm not seen yet, "
            "a spec too large for the table of Executions to keep).",
            ["object", "source"],  # object: swarm|execution; source: watch|live
            registry=self.registry,
        )
        self.task_restarts = prometheus_client.Counter(
            "agentihooks_swarm_task_restarts",
            "Background tasks that failed unexpectedly and were started again (or given up), by task.",
            # task: leadership|steps|resync|expiry|swarm status|redis primary|retention|quota|
            # worker credentials|kopf|watch executions|watch pod events|watch swarms|watch worker pods
            ["task"],
            registry=self.registry,
        )
        self.task_up = prometheus_client.Gauge(
            "agentihooks_swarm_task_up",
            "1 while a background task runs; 0 while it waits to restart, or after it was given up.",
            ["task"],  # task: as agentihooks_swarm_task_restarts_total
            registry=self.registry,
        )
        self.steps = prometheus_client.Counter(
            "agentihooks_swarm_steps",
            "Steps of the Executions' lifecycle, by result (done: nothing more to do; progress: moved "
            "on, waiting, or stopped early for a reason that may pass; error: failed unexpectedly).",
            ["result"],  # result: done|progress|error
            registry=self.registry,
        )
        self.queue_depth = prometheus_client.Gauge(
            "agentihooks_swarm_queue_depth",
            "Executions waiting for a step.",
            registry=self.registry,
        )
        self.executions_tracked = prometheus_client.Gauge(
            "agentihooks_swarm_executions_tracked",
            "Executions that need steps (not Done), as this replica's watch sees them.",
            registry=self.registry,
        )

    def _workers(self) -> None:
        """The workers' Redis credentials (swarm/credentials.py)."""
        self.worker_credentials = prometheus_client.Counter(
            "agentihooks_swarm_worker_credentials",
            "A swarm's worker credential made, kept, rotated or refused, by result (redis_refused: Redis "
            "refuses ACL SETUSER, supply one; secret_refused: the API server refuses the Secret).",
            # result: made|kept|rotated|previous_dropped|supplied|not_ours|redis_refused|secret_refused|failed
            ["result"],
            registry=self.registry,
        )

    def serve(self, *, port: int) -> None:
        """Serve ``/metrics`` on ``port`` from a background thread."""
        prometheus_client.start_http_server(port, registry=self.registry)

    def render(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)
