"""One step's state (:class:`Work`) and its retry delays: what :mod:`.step` and the launch's gates
(:mod:`.gates`) both write to while the step runs, kept apart so that neither imports the other.

A step writes the Execution once, at its end (:meth:`step.Lifecycle.step`); until then everything it
learns and decides goes into its ``Work``: the status patch, the Events, when to come again.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from agentihooks_swarm.lifecycle import events, model, status as status_

#: Seconds before a launch that failed for a reason that may pass is tried again.
LAUNCH_RETRY: Final = 10.0
#: Seconds before the hand result is written again after Redis failed.
RECORD_RETRY: Final = 15.0
#: Seconds before a missing or invalid Swarm, or a foreign Pod under the worker's name, is looked
#: at again (a change to the Execution itself wakes it at once).
SWARM_MISSING_RETRY: Final = 30.0
SWARM_INVALID_RETRY: Final = 60.0
FOREIGN_POD_RETRY: Final = 60.0
#: Seconds before a write that lost a race with a newer version of the Execution is tried again.
CONFLICT_RETRY: Final = 1.0
#: Seconds between looks at a pinned object that someone else is deleting, within its grace period.
TERMINATING_RETRY: Final = 2.0


@dataclasses.dataclass(kw_only=True)
class Work:
    """One step's state: what it learnt and what it will write."""

    tracked: model.Tracked
    patch: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: events.Collected = dataclasses.field(default_factory=events.Collected)
    retry_after: float | None = None
    release: bool = False
    #: The worker Pod as this step's launch saw it (:attr:`launch.Launched.pod`), if it launched.
    looked: dict[str, Any] | None = None
    settled: bool = False
    waits_for_pod: bool = False

    @property
    def view(self) -> dict[str, Any]:
        """The status as it will be once the patch is written."""
        return {**self.tracked.status, **self.patch}

    def answer(self, answer: status_.Answer, **fields: Any) -> None:
        status_.apply(self.patch, self.view, answer)
        for name, value in fields.items():
            status_.put(self.patch, self.view, name, value)

    def observed(self) -> dict[str, Any]:
        return status_.observed(generation=self.tracked.spec_generation, relaunch=self.tracked.relaunch)
