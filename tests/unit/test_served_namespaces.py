"""The namespaces the operator serves: ``AGENTIHOOKS_SWARM_NAMESPACE`` and ``…_NAMESPACES``, the
``run`` options that win over them, and the Events index that answers only for them."""

from __future__ import annotations

import pytest

from agentihooks_swarm import __main__, settings
from agentihooks_swarm.kubernetes import event_index


def served(**environ: str) -> tuple[str, ...]:
    return settings.Settings.from_env(
        {f"AGENTIHOOKS_SWARM_{k}": v for k, v in environ.items()}
    ).served_namespaces


def test_the_namespaces_served_come_from_either_variable_each_once_namespace_first() -> None:
    assert served() == ()  # Every namespace.
    assert served(NAMESPACE="work") == ("work",)  # The earlier one-namespace setting, as it was.
    assert served(NAMESPACES="team-a, team-b,,team-a") == ("team-a", "team-b")
    assert served(NAMESPACE="work", NAMESPACES="team-a,work") == ("work", "team-a")
    assert served(NAMESPACES=" , ") == ()


def scope(
    argv: list[str], *, namespace: str | None = None, namespaces: str = ""
) -> tuple[tuple[str, ...], list[str]]:
    """What ``run argv`` serves with these settings: the settings' namespaces, and kopf's."""
    configured = settings.Settings(namespace=namespace, namespaces=namespaces)
    scoped, names = __main__._scope(__main__._run_parser().parse_args(argv), configured)
    return scoped.served_namespaces, names


def test_run_options_win_over_the_settings_so_kopf_and_the_watches_serve_the_same() -> None:
    assert scope(["-n", "team-a", "-n", "team-b"]) == (("team-a", "team-b"), ["team-a", "team-b"])
    assert scope(["--namespace=other"], namespace="configured") == (("other",), ["other"])
    assert scope(["-n", "a", "--standalone"], namespaces="b,c") == (("a",), ["a"])
    assert scope(["-A"], namespace="configured", namespaces="b") == ((), [])
    # No option: the settings, for kopf too.
    assert scope([], namespace="configured", namespaces="b") == (("configured", "b"), ["configured", "b"])
    assert scope([]) == ((), [])
    with pytest.raises(SystemExit):
        __main__._run_parser().parse_args(["-A", "-n", "x"])


def test_the_events_index_answers_only_for_the_namespaces_it_watches() -> None:
    index = event_index.EventIndex(namespaces=("team-a", "team-b"))
    index.set_synced(True)
    assert index.events(namespace="team-a", uid="pod") == []
    assert index.events(namespace="team-b", uid="pod") == []
    assert index.events(namespace="team-c", uid="pod") is None  # Its capture lists the Pod's Events.
    everywhere = event_index.EventIndex(namespaces=())
    everywhere.set_synced(True)
    assert everywhere.events(namespace="team-c", uid="pod") == []
