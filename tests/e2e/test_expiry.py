"""Finished Executions expire (``spec.ttlSecondsAfterFinished``, else the operator's default), on the
real API server with the operator running; their records stay, and the spec's read commands and
the records CLI answer for them after the Execution is gone."""

from __future__ import annotations

import asyncio
import json

from tests.support import builders, planting, watching
from tests.support.fixtures_scene import Scene
from tests.support.operator_process import OperatorProcess
from tests.support.read_commands import READ_RETAINED, READ_STARTUP

SLUG = "expiry"


async def until_gone(scene: Scene, name: str, *, process: OperatorProcess, what: str) -> None:
    async def gone() -> bool:
        return not await scene.exists(name)

    await scene.until(gone, what=what, process=process)


async def until_logged(process: OperatorProcess, line: str, *, what: str) -> None:
    async def logged() -> bool:
        return line in process.log()

    await watching.eventually(logged, what=what, operator=process)


async def start_with_refusals(scene: Scene, **kwargs: str) -> OperatorProcess:
    """The operator, and the Swarm whose registration refuses every project but ``registered``."""
    process = scene.start(env=kwargs or None)
    await scene.swarm(name=SLUG, projects=["registered"])
    return process


async def test_a_done_execution_expires_and_its_records_still_answer(scene: Scene) -> None:
    # Before the operator runs: an Execution whose hand is refused, and its worker Pod as a launch
    # that stopped before recording its hand leaves it, refused at startup (Failed): launch
    # removal adopts it and captures.
    await scene.swarm(name=SLUG, projects=["registered"])
    await scene.execution(name="short-lived", swarm=SLUG, project="outside-the-registration", ttl=2)
    await planting.plant_refused_worker(
        scene.api, scene.cluster, namespace=scene.namespace, slug=SLUG, execution="short-lived"
    )
    process = scene.start()

    status = await scene.until_phase("short-lived", "Done", process=process)
    planting.assert_removed_unpermitted(status["hand"])
    assert status["finishedAt"].endswith("Z")
    await until_gone(scene, "short-lived", process=process, what="the expired Execution to be deleted")
    await until_logged(process, "expired (ttlSecondsAfterFinished), deleted", what="the expiry in the log")

    # Launch removal's capture, with the spec's read command, after the Execution is gone.
    read = await scene.python("-c", READ_STARTUP, SLUG, "short-lived")
    record = json.loads(read.stdout)
    [container] = record["startup"]["containers"]
    assert (container["terminated"]["exitCode"], container["terminated"]["reason"]) == (78, "Error")
    assert container["log"].endswith(" worker startup refused: planted kind refusal\n")
    # The retained cleanup evidence, with the spec's read command and with the records CLI.
    retained = await scene.python("-c", READ_RETAINED, SLUG, "short-lived")
    assert json.loads(retained.stdout) == []  # Launch removal had removed the only Pod already.
    final = await scene.python("-m", "agentihooks_swarm", "records", "final", SLUG, "short-lived")
    assert json.loads(final.stdout)["state"] == "refused"
    full = await scene.python("-m", "agentihooks_swarm", "records", "retained", SLUG, "short-lived", "--full")
    assert set(json.loads(full.stdout)) == {"execution", "final", "watermark", "archived", "removed"}


async def test_the_default_ttl_applies_unless_the_spec_sets_one(scene: Scene) -> None:
    process = await start_with_refusals(scene, AGENTIHOOKS_SWARM_TTL_SECONDS_AFTER_FINISHED="1")
    for name, ttl in (("by-default", None), ("kept-long", 3600)):
        await scene.execution(name=name, swarm=SLUG, project="elsewhere", ttl=ttl)
    await scene.until_phase("kept-long", "Done", process=process)
    await until_gone(scene, "by-default", process=process, what="the default TTL to expire it")
    await asyncio.sleep(2)
    assert await scene.exists("kept-long")


async def test_without_a_ttl_done_executions_stay_and_deleting_one_is_not_blocked(scene: Scene) -> None:
    process = await start_with_refusals(scene)
    await scene.execution(name="forever", swarm=SLUG, project="elsewhere")
    await scene.until_phase("forever", "Done", process=process)
    await asyncio.sleep(2)
    body = await scene.get("forever")
    assert not body["metadata"].get("finalizers")  # The operator's went when its cleanup was done.

    await scene.delete("forever")
    await until_gone(scene, "forever", process=process, what="the deleted Done Execution to go")


async def test_a_done_execution_of_an_earlier_version_goes_without_its_kopf_finalizer(scene: Scene) -> None:
    """An earlier version ran the delete handler in kopf: its Done Executions still carry kopf's
    finalizer, which no kopf removes now. Deleting one still goes through."""
    kopf_finalizer = "kopf.zalando.org/KopfFinalizerMarker"
    manifest = builders.execution(name="older", namespace=scene.namespace, swarm=SLUG, project="elsewhere")
    manifest["metadata"]["finalizers"] = [kopf_finalizer]
    await watching.create(scene.api, manifest)
    await watching.merge_patch(
        scene.api,
        namespace=scene.namespace,
        plural="executions",
        name="older",
        body={
            "status": {
                "phase": "Done",
                "attempt": 1,
                "pod": "swarm-worker-older-1",
                "hand": {"handed": False},
            }
        },
        status=True,
    )
    process = scene.start()
    await scene.delete("older")
    await until_gone(scene, "older", process=process, what="it to go")
    await until_logged(process, f"finalizers {kopf_finalizer} removed", what="the release")


# Among the slowest tests: the operator stays stopped past the Execution's 4 s TTL (to show nobody
# expired it meanwhile), then starts again, a second operator start.
async def test_a_restarted_operator_expires_what_finished_while_it_was_away(scene: Scene) -> None:
    process = await start_with_refusals(scene)
    await scene.execution(name="outlived", swarm=SLUG, project="elsewhere", ttl=4)
    await scene.until_phase("outlived", "Done", process=process)
    process.stop()
    await asyncio.sleep(5)
    assert await scene.exists("outlived")  # Nobody expired it while stopped.

    process.start()
    await until_gone(scene, "outlived", process=process, what="the restart to expire it")
    await until_logged(
        process, "1 Done executions listed, 1 of them expire;", what="the restart's list of Done executions"
    )
