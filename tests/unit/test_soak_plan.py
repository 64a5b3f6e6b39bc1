"""The soak's pure parts: its seeded plan, and the Sentinel answers its Redis proxies rewrite."""

from __future__ import annotations

import subprocess
from collections import Counter

import pytest

from tests.soak import plan, resp
from tests.soak.checker import model


def test_a_seed_replays_the_same_plan_and_another_seed_does_not() -> None:
    first = plan.make(seed=7, executions=300, period=60, faults=48)
    again = plan.make(seed=7, executions=300, period=60, faults=48)
    other = plan.make(seed=8, executions=300, period=60, faults=48)
    assert first == again and first.digest() == again.digest()
    assert first.digest() != other.digest()


def test_the_quick_plan_has_every_kind_of_fault_and_of_execution() -> None:
    made = plan.make(seed=11, executions=300, period=60, faults=48)
    assert len(made.executions) == 300
    assert len(made.faults) == 48
    assert set(Counter(f.kind for f in made.faults)) == set(plan.fault_kinds("kwok"))
    assert {e.kind for e in made.executions} == {
        "refused-adopted",
        "refused-created",
        "fails",
        "oom",
        "succeeds",
        "never-starts",
    }
    assert {e.action for e in made.executions} == {None, "cancel", "delete"}
    reused = [e for e in made.executions if e.incarnation]
    assert reused and all(
        any(f.name == e.name and not f.incarnation for f in made.executions) for e in reused
    )
    assert all(f.target in plan.TARGETS for f in made.faults if f.kind in plan.TARGETED)
    assert all(3.0 <= f.at <= 60 for f in made.faults)


def test_the_real_node_adds_kubelet_and_containerd_restarts() -> None:
    kinds = {f.kind for f in plan.make(seed=3, executions=50, period=60, faults=40, node="real").faults}
    assert {"kubelet-restart", "containerd-restart"} <= kinds
    assert "kwok-restart" not in kinds
    assert not {"kubelet-restart", "containerd-restart"} & set(plan.fault_kinds("kwok"))


# -- the Sentinel answers ----------------------------------------------------------------------


def _bulk(text: str) -> bytes:
    return f"${len(text)}\r\n{text}\r\n".encode()


def _masters(ip: str, port: int) -> bytes:
    fields = ["name", "mymaster", "ip", ip, "port", str(port), "flags", "master", "quorum", "2"]
    return b"*1\r\n*" + str(len(fields)).encode() + b"\r\n" + b"".join(_bulk(f) for f in fields)


def test_sentinel_masters_names_the_proxy_instead_of_the_server() -> None:
    rewriter = resp.AddressRewriter({6380: 40001})
    out = rewriter.feed(_masters("127.0.0.1", 6380))
    assert out == _masters("127.0.0.1", 40001)


def test_a_reply_cut_anywhere_comes_out_whole_and_rewritten() -> None:
    data = _masters("127.0.0.1", 6380) + b"+OK\r\n" + b"*2\r\n" + _bulk("127.0.0.1") + _bulk("6380")
    expected = _masters("127.0.0.1", 40001) + b"+OK\r\n" + b"*2\r\n" + _bulk("127.0.0.1") + _bulk("40001")
    for cut in range(1, len(data)):
        rewriter = resp.AddressRewriter({6380: 40001})
        assert rewriter.feed(data[:cut]) + rewriter.feed(data[cut:]) == expected, cut


def test_other_values_pass_unchanged() -> None:
    rewriter = resp.AddressRewriter({6380: 40001})
    other = (
        b"-ERR no such master\r\n:6380\r\n$-1\r\n*-1\r\n"
        + b"*4\r\n"
        + _bulk("quorum")
        + _bulk("6380")
        + _bulk("port")
        + _bulk("6999")
        + b"%1\r\n"
        + _bulk("port")
        + _bulk("6380")
    )
    out = rewriter.feed(other)
    assert out == other.replace(_bulk("port") + _bulk("6380"), _bulk("port") + _bulk("40001"))


def test_a_stream_that_is_not_resp_is_refused() -> None:
    with pytest.raises(resp.ProtocolError):
        resp.AddressRewriter({}).feed(b"?what\r\n")


def test_a_real_node_worker_prints_the_marker_the_checker_expects() -> None:
    """The real node's worker script, run by this machine's sh: it prints the marker the checker
    derives from the Pod's UID, and exits as planned."""
    uid = "6f1c2a3b-4d5e-6f70-8192-a3b4c5d6e7f8"
    done = subprocess.run(
        ["/bin/sh", "-c", plan.MARKER_SH + "exit 3"],
        env={"POD_UID": uid, "POD_NAME": "swarm-worker-x-1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 3
    assert model.MARKER.findall(done.stdout) == [plan.real_marker(uid)] == ["6f1c2a3b4d5e6f70"]
