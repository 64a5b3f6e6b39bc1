"""The Swarms' watch (controller/swarm_watch.py): what a launch reads of its Swarm, and when it
gets no answer from it (out of sync, not seen yet)."""

from __future__ import annotations

from typing import Any

from agentihooks_swarm.controller import swarm_watch


def swarm(name: str, *, namespace: str = "ns", projects: tuple[str, ...] = ("p",)) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"u-{name}", "managedFields": [{"x": 1}]},
        "spec": {"registration": {"projects": list(projects)}},
    }


def listed(*bodies: dict[str, Any]) -> swarm_watch.Swarms:
    swarms = swarm_watch.Swarms()
    swarms.begin()
    for body in bodies:
        swarms.apply(None, body)
    swarms.end()
    swarms.synced(True)
    return swarms


def test_a_listed_swarm_is_answered_without_its_managed_fields_and_as_a_copy() -> None:
    swarms = listed(swarm("a"))
    found = swarms.swarm(namespace="ns", name="a")
    assert found is not None and found["spec"]["registration"]["projects"] == ["p"]
    assert "managedFields" not in found["metadata"] and found["metadata"]["uid"] == "u-a"
    found["spec"]["registration"]["projects"].append("changed by its reader")
    assert swarms.swarm(namespace="ns", name="a") == {**swarm("a"), "metadata": found["metadata"]}


def test_changes_deletions_and_a_new_list_are_followed() -> None:
    swarms = listed(swarm("a"), swarm("b"))
    swarms.apply("MODIFIED", swarm("a", projects=("q",)))
    found = swarms.swarm(namespace="ns", name="a")
    assert found is not None and found["spec"]["registration"]["projects"] == ["q"]
    swarms.apply("DELETED", swarm("a"))
    assert swarms.swarm(namespace="ns", name="a") is None
    swarms.begin()
    swarms.apply(None, swarm("c"))
    swarms.end()  # b went while nobody watched.
    assert swarms.swarm(namespace="ns", name="b") is None
    assert swarms.swarm(namespace="ns", name="c") is not None
    assert swarms.swarm(namespace="other", name="c") is None and len(swarms) == 1


def test_out_of_sync_it_answers_nothing() -> None:
    swarms = listed(swarm("a"))
    swarms.synced(False)
    assert swarms.swarm(namespace="ns", name="a") is None
