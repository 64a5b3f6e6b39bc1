"""The test tooling's errors say what to do next: a stale cluster variable, a cluster that does not
answer, a missing program (a Redis port someone else holds: test_redis_server.py)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cluster import STATE_ENV, ClusterError, named_cluster
from tests.support.cluster.pki import make_pki
from tests.support.cluster.processes import Starter

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def state_file(path: Path, *, pid: int) -> Path:
    """A cluster state file as ``cluster up`` writes it, for a cluster whose one child is gone."""
    path.write_text(
        json.dumps(
            {
                "workdir": str(path.parent),
                "bin_dir": str(path.parent / "bin"),
                "kubeconfig": str(path.parent / "admin.kubeconfig"),
                "token_kubeconfig": str(path.parent / "admin-token.kubeconfig"),
                "server": "https://127.0.0.1:9",
                "ca_file": str(path.parent / "ca.crt"),
                "admin_token": "t",
                "kwok_url": "https://127.0.0.1:9",
                "node_name": "kwok-node-0",
                "pod_logs_dir": str(path.parent / "pod-logs"),
                "node_kind": "kwok",
                "children": [{"name": "etcd", "pid": pid, "log": str(path.parent / "etcd.log")}],
            }
        )
    )
    return path


def test_no_variable_names_no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STATE_ENV, raising=False)
    assert named_cluster() is None


def test_a_stale_variable_names_itself_and_says_to_unset_it_or_start_a_cluster(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gone = tmp_path / "state.json"
    monkeypatch.setenv(STATE_ENV, str(gone))
    with pytest.raises(ClusterError) as raised:
        named_cluster()
    message = str(raised.value)
    assert f"{STATE_ENV}={gone}" in message
    assert f"unset {STATE_ENV}" in message
    assert "make cluster-up" in message and "cluster env" in message


def test_a_cluster_that_does_not_answer_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, dead_pid: int
) -> None:
    monkeypatch.setenv(STATE_ENV, str(state_file(tmp_path / "state.json", pid=dead_pid)))
    with pytest.raises(ClusterError, match="does not answer") as raised:
        named_cluster(kind="kwok")
    assert f"unset {STATE_ENV}" in str(raised.value) and "make cluster-status" in str(raised.value)
    # A cluster of another kind is not the one asked for: not reused, and not an error.
    assert named_cluster(kind="real") is None


def test_pytest_stops_once_with_the_message_when_the_variable_is_stale(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gone = tmp_path / "state.json"
    monkeypatch.setenv(STATE_ENV, str(gone))
    uses_the_cluster = "def test_{}(control_plane):\n    pass\n"
    pytester.makepyfile(test_on_the_cluster=uses_the_cluster.format("one") + uses_the_cluster.format("two"))
    # In-process, with the modules imported already and without hypothesis's plugin (1.4 s a
    # session here), the session takes well under a second.
    result = pytester.runpytest_inprocess(
        "-q",
        "-p",
        "tests.support.fixtures_cluster",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:hypothesispytest",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines + result.errlines
    output = "\n".join(result.outlines + result.errlines)
    assert output.count(f"{STATE_ENV}={gone}, but that file is gone") == 1
    assert "FileNotFoundError" not in output


def test_a_missing_program_says_where_it_comes_from(tmp_path: Path) -> None:
    starter = Starter(workdir=tmp_path, children=[], detached=True, deadline=time.monotonic() + 5)
    with pytest.raises(ClusterError, match="make binaries") as raised:
        starter.spawn("kube-apiserver", [str(tmp_path / "bin" / "kube-apiserver")])
    assert "kube-apiserver" in str(raised.value) and "make system-deps" in str(raised.value)


def test_a_missing_openssl_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ClusterError, match="openssl is not installed") as raised:
        make_pki(tmp_path / "pki", node_name="n", node_ip="127.0.0.1", real_node=False)
    assert "make system-deps-kwok" in str(raised.value)
