"""When the soak's checker probes Redis for a refused Pod's capture (rule 3): when the Pod may go,
not when a delete the evidence finalizer holds is first seen."""

from __future__ import annotations

from typing import Any, cast

from tests.soak.checker import model, observe

EXECUTION = "x1"
FINALIZER = model.EVIDENCE_FINALIZER


class _Prober:
    """Counts the probes and answers that the capture is there."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def probe(self, *, slug: str, execution: str, uid: str) -> model.Probe:
        self.asked.append(uid)
        return model.Probe(found=True, detail="stub", at=0.0)


def _body(*, deleting: bool, finalizers: list[str]) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "uid": "u1",
        "name": f"swarm-worker-{EXECUTION}-1",
        "labels": {
            model.OWNER_LABEL: "agentihooks-swarm-exit78",
            model.EXECUTION_LABEL: EXECUTION,
            model.GENERATION_LABEL: "1",
        },
        "finalizers": finalizers,
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    status = {
        "phase": "Failed",
        "containerStatuses": [{"name": "worker", "state": {"terminated": {"exitCode": 78}}}],
    }
    return {"metadata": metadata, "status": status}


def _observer(prober: _Prober) -> observe.PodObserver:
    return observe.PodObserver(
        api=cast(Any, None), namespace="soak", marker=lambda name, uid: None, prober=cast(Any, prober)
    )


async def test_a_delete_the_evidence_finalizer_holds_is_probed_only_when_the_pod_goes() -> None:
    prober = _Prober()
    pods = _observer(prober)
    pods._event(1.0, "ADDED", _body(deleting=False, finalizers=[FINALIZER]))
    pods._event(2.0, "MODIFIED", _body(deleting=True, finalizers=[FINALIZER]))
    await pods.settle_probes()
    assert prober.asked == []  # Held: nothing can be lost yet.
    # The release ends the Pod: DELETED carries the object as last stored, finalizer and all.
    pods._event(3.0, "DELETED", _body(deleting=True, finalizers=[FINALIZER]))
    await pods.settle_probes()
    assert prober.asked == ["u1"]
    [history] = pods.pods.values()
    assert history.probe is not None and history.probe.found is True
    assert history.deleting_at == 2.0  # When the delete was first seen, for the report's timings.


async def test_a_delete_nothing_holds_is_probed_at_once() -> None:
    prober = _Prober()
    pods = _observer(prober)
    pods._event(1.0, "ADDED", _body(deleting=False, finalizers=[]))
    pods._event(2.0, "MODIFIED", _body(deleting=True, finalizers=[]))
    await pods.settle_probes()
    assert prober.asked == ["u1"]
