"""Workers that never start, described once, played by whichever node runs them.

Each :class:`Scenario` is a Swarm worker template (image, env, resources, startup deadline) and
what its record must say. The Kubernetes side of the failure is played by a :class:`Kubelet`:

* :class:`KwokKubelet` (the local cluster): kwok Stages play the kubelet's container states
  from protocol annotations on the template (``tests/support/pods.py``), and the test posts the
  Events a kubelet would post, through the real API server with ``involvedObject.uid`` set to
  the Pod's UID. The scheduler is the real kube-scheduler, so an unschedulable Pod and its
  ``FailedScheduling`` Event are real.
* :class:`RealKubelet` (containerd + kubelet, ``@pytest.mark.realnode``) needs no annotations
  and posts nothing: the template's image that does not exist (named on ``localhost``, so the
  failed pull never leaves the machine), Secret that is missing, request no node fits and memory
  limit do the work, with the real node's busybox image for the rest. ``slow-pull`` needs a
  registry to be slow, and the real node has none: it is played on kwok only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from kubernetes_asyncio import client

from agentihooks_swarm import records
from tests.support import pods

MISSING_IMAGE = "registry.invalid/agentihooks-swarm/missing:never-pushed"
#: Under the worker policy's default Secret prefix (swarm-worker-): a name the worker may read, absent.
MISSING_SECRET = "swarm-worker-missing-secret"


@dataclasses.dataclass(frozen=True, kw_only=True)
class KubeletEvent:
    type: str
    reason: str
    message: str
    count: int = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scenario:
    #: The Execution's name (and the scenario's id).
    name: str
    failure_class: records.FailureClass
    #: True: the Pod is refused (Failed) and final cleanup captures it. False: it was never
    #: scheduled, is deleted without a capture, and the final record carries the evidence.
    captured: bool
    #: The captured Pod's status.reason (or the final record's reason when not captured).
    reason: str
    #: The worker template.
    image: str = pods.WORKER_IMAGE
    env: tuple[Mapping[str, Any], ...] = ()
    resources: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    startup_deadline_seconds: int | None = None
    #: A waiting reason the record's ``waiting`` must show (empty: none).
    waiting_reason: str = ""
    #: An Event reason the record's ``events`` must show.
    event_reason: str = ""
    #: How kwok plays it (protocol annotations), and the Events its kubelet would post.
    kwok: Mapping[str, str] = dataclasses.field(default_factory=dict)
    kubelet_events: tuple[KubeletEvent, ...] = ()


SCENARIOS = (
    Scenario(
        name="missing-image",
        failure_class=records.FailureClass.IMAGE_PULL,
        captured=True,
        reason="DeadlineExceeded",
        image=MISSING_IMAGE,
        startup_deadline_seconds=3,
        waiting_reason="ImagePullBackOff",
        event_reason="Failed",
        kwok=pods.protocol_annotations(
            waiting_reason="ImagePullBackOff", waiting_message=f'Back-off pulling image "{MISSING_IMAGE}"'
        ),
        kubelet_events=(
            KubeletEvent(type="Normal", reason="Pulling", message=f'Pulling image "{MISSING_IMAGE}"'),
            KubeletEvent(
                type="Warning",
                reason="Failed",
                message=f'Failed to pull image "{MISSING_IMAGE}": not found',
                count=3,
            ),
        ),
    ),
    Scenario(
        name="missing-secret",
        failure_class=records.FailureClass.CONFIG_ERROR,
        captured=True,
        reason="DeadlineExceeded",
        env=({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": MISSING_SECRET, "key": "token"}}},),
        startup_deadline_seconds=3,
        waiting_reason="CreateContainerConfigError",
        event_reason="Failed",
        kwok=pods.protocol_annotations(
            waiting_reason="CreateContainerConfigError",
            waiting_message=f'secret "{MISSING_SECRET}" not found',
        ),
        kubelet_events=(
            KubeletEvent(
                type="Warning", reason="Failed", message=f'Error: secret "{MISSING_SECRET}" not found'
            ),
        ),
    ),
    Scenario(
        name="slow-pull",
        failure_class=records.FailureClass.DEADLINE_EXCEEDED,
        captured=True,
        reason="DeadlineExceeded",
        # On a real node: an image too big to pull within the deadline.
        image="registry.invalid/agentihooks-swarm/huge:1",
        startup_deadline_seconds=3,
        waiting_reason="ContainerCreating",
        event_reason="Pulling",
        kwok=pods.protocol_annotations(waiting_reason="ContainerCreating"),
        kubelet_events=(
            KubeletEvent(
                type="Normal",
                reason="Pulling",
                message='Pulling image "registry.invalid/agentihooks-swarm/huge:1"',
            ),
        ),
    ),
    Scenario(
        name="unschedulable",
        failure_class=records.FailureClass.UNSCHEDULABLE,
        captured=False,
        reason="Unschedulable",
        resources={"requests": {"memory": "100Ti"}},  # No node has that much.
        startup_deadline_seconds=3,
        event_reason="FailedScheduling",  # Posted by the real kube-scheduler, on any cluster.
    ),
    Scenario(
        name="oom-killed",
        failure_class=records.FailureClass.OOM_KILLED,
        captured=True,
        reason="",
        resources={"limits": {"memory": "16Mi"}},
        kwok=pods.protocol_annotations(phase="Failed", exit_code=137, reason="OOMKilled", run_for="1s"),
    ),
)


class Kubelet(Protocol):
    """What plays a scenario's node side."""

    def plays(self, scenario: Scenario) -> bool: ...
    def image(self, scenario: Scenario) -> str: ...
    def command(self, scenario: Scenario) -> tuple[str, ...]: ...
    def annotations(self, scenario: Scenario) -> dict[str, str]: ...
    def waiting_reasons(self, scenario: Scenario) -> set[str]: ...
    def events(self, scenario: Scenario) -> tuple[KubeletEvent, ...]: ...
    async def report(self, api: client.ApiClient, *, pod: Mapping[str, Any], scenario: Scenario) -> None: ...


class KwokKubelet:
    """The local cluster's kubelet: kwok Stages from annotations, and the Events posted for it."""

    def plays(self, scenario: Scenario) -> bool:
        return True

    def image(self, scenario: Scenario) -> str:
        return scenario.image

    def command(self, scenario: Scenario) -> tuple[str, ...]:
        return ("/bin/worker",)

    def annotations(self, scenario: Scenario) -> dict[str, str]:
        return dict(scenario.kwok)

    def waiting_reasons(self, scenario: Scenario) -> set[str]:
        return {scenario.waiting_reason} if scenario.waiting_reason else set()

    def events(self, scenario: Scenario) -> tuple[KubeletEvent, ...]:
        """The Events the test posted, exactly as posted."""
        return scenario.kubelet_events

    async def report(self, api: client.ApiClient, *, pod: Mapping[str, Any], scenario: Scenario) -> None:
        for event in scenario.kubelet_events:
            await pods.post_event(
                api, pod=pod, type_=event.type, reason=event.reason, message=event.message, count=event.count
            )


class RealKubelet:
    """A real node's kubelet plays itself: no annotations, and it posts its own Events."""

    #: An image no registry serves; its pull goes to localhost and is refused at once.
    MISSING_IMAGE = "localhost/agentihooks-swarm/missing:never-pushed"

    def __init__(self, *, busybox: str) -> None:
        self.busybox = busybox

    def plays(self, scenario: Scenario) -> bool:
        return scenario.name != "slow-pull"

    def image(self, scenario: Scenario) -> str:
        return self.MISSING_IMAGE if scenario.image == MISSING_IMAGE else self.busybox

    def command(self, scenario: Scenario) -> tuple[str, ...]:
        if scenario.failure_class == records.FailureClass.OOM_KILLED:
            # One 64 MiB block does not fit in the 16 MiB limit: the kernel kills dd (137).
            return ("sh", "-c", "echo allocating; exec dd if=/dev/zero of=/dev/null bs=64M count=4")
        return ("sh", "-c", "echo started; sleep 30")

    def annotations(self, scenario: Scenario) -> dict[str, str]:
        return {}

    def waiting_reasons(self, scenario: Scenario) -> set[str]:
        if scenario.failure_class == records.FailureClass.IMAGE_PULL:
            # Whichever the kubelet last reported; on a busy node the 3 s deadline can come while
            # it still creates the sandbox, before its first pull (the class comes from its Events).
            return {"ErrImagePull", "ImagePullBackOff", "ContainerCreating"}
        return {scenario.waiting_reason} if scenario.waiting_reason else set()

    def events(self, scenario: Scenario) -> tuple[KubeletEvent, ...]:
        """The kubelet's own Events: their reasons are checked, their wording is the kubelet's."""
        return ()

    async def report(self, api: client.ApiClient, *, pod: Mapping[str, Any], scenario: Scenario) -> None:
        return None
