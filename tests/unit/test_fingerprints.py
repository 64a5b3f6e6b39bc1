"""Refusal fingerprints (capture/fingerprints.py): the same failure in another Pod at another
time has the same fingerprint; different failures have different ones."""

from __future__ import annotations

import re
import uuid

from hypothesis import given, settings, strategies as st

from agentihooks_swarm import records, text as text_
from agentihooks_swarm.capture import fingerprints


def capture(
    line: str,
    *,
    exit_code: int = 78,
    reason: str = "Error",
    container: str = "worker",
    failure_class: records.FailureClass = records.FailureClass.EXIT_CODE,
) -> records.StartupCapture:
    return records.StartupCapture.model_validate(
        {
            "phase": "Failed",
            "reason": "",
            "containers": [
                {
                    "name": container,
                    "terminated": {"exitCode": exit_code, "reason": reason},
                    "log": line + "\n",
                }
            ],
            "class": failure_class,
        }
    )


def test_masking_keeps_the_words_and_drops_what_varies() -> None:
    line = (
        "2026-12-01T17:02:03.123456789Z swarm-worker-e-42-1: cannot reach 10.0.3.7:5432 after 3 tries "
        "(request 7f3e1c2a-9b0d-4e5f-8a6b-1c2d3e4f5a6b, digest sha256:0a1b2c3d4e5f6789, at 17:02:03)"
    )
    masked = fingerprints.mask(line, names=["swarm-worker-e-42-1", "e-42"])
    assert masked == (
        "<time> <name>: cannot reach <id>:<id> after <id> tries (request <id>, digest <id>:<id>, at <time>)"
    )


def test_a_capture_says_its_masked_last_line() -> None:
    found, text = fingerprints.describe(
        capture("2026-12-01T17:02:03Z loading\n2026-12-01T17:02:04Z worker p-7 refused: no config 12"),
        names=["p-7"],
    )
    assert text == "<time> worker <name> refused: no config <id>"
    assert len(found) == fingerprints.LENGTH and int(found, 16) >= 0


def test_without_a_failing_container_the_summary_is_the_text() -> None:
    waiting = records.StartupCapture.model_validate(
        {"phase": "Pending", "reason": "", "containers": [], "class": "image_pull"}
    )
    found, text = fingerprints.describe(
        waiting, summary='container worker waiting: ImagePullBackOff (Back-off pulling image "r.invalid/w:1")'
    )
    assert text == 'container worker waiting: ImagePullBackOff (Back-off pulling image "r.invalid/w:<id>")'
    other, _ = fingerprints.describe(waiting, summary="container worker waiting: CreateContainerConfigError")
    assert found != other


_words = st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyz :,-'\""), min_size=1, max_size=40)
_stamp = st.datetimes(timezones=st.just(__import__("datetime").UTC)).map(
    lambda moment: moment.isoformat().replace("+00:00", "Z")
)


@settings(max_examples=300, deadline=None)
@given(
    message=_words,
    first=_stamp,
    second=_stamp,
    numbers=st.tuples(st.integers(0, 10**9), st.integers(0, 10**9)),
    pods=st.tuples(st.from_regex(r"swarm-worker-[a-z][a-z0-9]{0,12}-[1-9]", fullmatch=True), st.just("")),
)
def test_the_same_failure_in_another_pod_at_another_time_has_the_same_fingerprint(
    message: str, first: str, second: str, numbers: tuple[int, int], pods: tuple[str, str]
) -> None:
    one_pod, _ = pods
    other_pod = one_pod + "x"

    def line(stamp: str, number: int, pod: str, request: str) -> str:
        return f"{stamp} {pod}: {message} (attempt {number}, request {request})"

    a = fingerprints.describe(
        capture(line(first, numbers[0], one_pod, str(uuid.uuid4()))), names=[one_pod, "exec-a"]
    )
    b = fingerprints.describe(
        capture(line(second, numbers[1], other_pod, str(uuid.uuid4()))), names=[other_pod, "exec-b"]
    )
    assert a == b


@settings(max_examples=300, deadline=None)
@given(one=_words, other=_words, codes=st.tuples(st.integers(1, 255), st.integers(1, 255)))
def test_different_errors_have_different_fingerprints(one: str, other: str, codes: tuple[int, int]) -> None:
    first = fingerprints.describe(capture(f"refused: {one}", exit_code=codes[0]))
    second = fingerprints.describe(capture(f"refused: {other}", exit_code=codes[1]))
    same_words = fingerprints.mask(one) == fingerprints.mask(other)
    assert (first[0] == second[0]) == (same_words and codes[0] == codes[1])


def test_the_class_the_container_and_the_reason_each_tell_failures_apart() -> None:
    base = fingerprints.describe(capture("refused"))[0]
    assert fingerprints.describe(capture("refused", container="init"))[0] != base
    assert fingerprints.describe(capture("refused", reason="OOMKilled"))[0] != base
    oom = fingerprints.describe(capture("refused", failure_class=records.FailureClass.OOM_KILLED))[0]
    assert oom != base
    assert fingerprints.describe(capture("refused"))[0] == base


def test_a_container_that_never_ran_is_told_by_what_it_waited_on() -> None:
    """A kubelet that failed a Pod past its deadline reports the container terminated, no log."""
    unknown = records.StartupCapture.model_validate(
        {
            "phase": "Failed",
            "reason": "DeadlineExceeded",
            "containers": [
                {"name": "worker", "terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown"}}
            ],
            "class": "image_pull",
        }
    )
    summary = 'container worker waiting: ErrImagePull (failed to pull "localhost/none:1": connection refused)'
    found, text = fingerprints.describe(unknown, summary=summary)
    assert (
        text
        == 'container worker waiting: ErrImagePull (failed to pull "localhost/none:<id>": connection refused)'
    )
    assert found == fingerprints.describe(unknown, summary=summary)[0]


_ALPHABET = st.sampled_from(list("ae2-_. 0Zé9:/"))


@settings(max_examples=500)
@given(text=st.text(_ALPHABET, max_size=40), name=st.text(_ALPHABET, min_size=1, max_size=4))
def test_a_name_is_masked_as_a_whole_token_exactly_where_the_pattern_would(text: str, name: str) -> None:
    """The scan that replaces a per-Pod pattern: the same result as the pattern, on text full of
    near misses (the name inside a longer token, overlapping itself, beside non-ASCII letters)."""
    expected = re.sub(rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])", text_.NAME, text)
    assert text_._replace_token(text, name, text_.NAME) == expected


def test_a_name_inside_a_longer_token_is_kept() -> None:
    assert text_.mask("e2 0e2 e2x e2-1 (e2)", names=["e2"]) == "<name> <id> <id> <name>-<id> (<name>)"
