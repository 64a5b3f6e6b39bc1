"""Redaction and masking (text.py): generated secrets of every built-in shape never reach
what the operator shows (an Event's message, a Swarm's status, a metric, the CLI's table), and
lines that differ only in ids share one fingerprint."""

from __future__ import annotations

import json
import logging
import unicodedata

import pytest
from hypothesis import given, settings, strategies as st

from agentihooks_swarm import errors, metrics, records, resources, text
from agentihooks_swarm.capture import fingerprints, redaction
from agentihooks_swarm.lifecycle import launch
from agentihooks_swarm.swarm import status as swarm_status
from tests.support import secrets

_around = st.lists(st.sampled_from(secrets.WORDS), max_size=4).map(" ".join)


def refused(log: str, *, message: str = "") -> records.StartupCapture:
    terminated = {"exitCode": 78, "reason": "Error", **({"message": message} if message else {})}
    return records.StartupCapture.model_validate(
        {
            "phase": "Failed",
            "reason": "",
            "containers": [{"name": "worker", "terminated": terminated, "log": log}],
            "class": "exit_code",
        }
    )


def summary_of(capture: records.StartupCapture) -> records.FingerprintSummary:
    return records.FingerprintSummary(
        fingerprint=capture.fingerprint or "",
        text=capture.fingerprint_text or "",
        **{"class": capture.failure_class},
        count=1,
        first_seen="2026-12-01T00:00:00Z",
        last_seen="2026-12-01T00:00:00Z",
        example=records.Example(execution="e", pod="p", uid="u"),
    )


def test_every_built_in_pattern_has_a_generator() -> None:
    assert {name for name, _ in text.DEFAULT_PATTERNS} - {"basic credentials", "Google API key"} - {
        "GitHub token",
        "Slack token",
    } == set(secrets.SECRETS)


@pytest.mark.parametrize("shape", sorted(secrets.SECRETS))
@settings(max_examples=60, deadline=None)
@given(data=st.data(), before=_around, after=_around)
def test_a_generated_secret_is_never_shown(shape: str, data: st.DataObject, before: str, after: str) -> None:
    shown, hidden = data.draw(secrets.SECRETS[shape])
    line = f"2026-12-01T00:00:00Z {before} {shown} {after}".strip()
    capture = refused(line + "\n", message=line)
    capture.fingerprint, capture.fingerprint_text = fingerprints.describe(capture, names=["p"])
    assert hidden not in text.DEFAULT.redact(line)
    assert hidden not in (capture.fingerprint_text or "")
    # An Event's message (StartupRefused), before events.post redacts it once more.
    assert hidden not in text.DEFAULT.redact(launch.describe(capture))
    # The Swarm's status: status.refusals.top[].text and the Degraded condition.
    top = swarm_status.refusals(last_hour=1, top=[summary_of(capture)])["top"]
    assert hidden not in str(top)
    state = records.BudgetState(
        fingerprint=capture.fingerprint, text=capture.fingerprint_text or "", count=3, window_seconds=60,
        at="2026-12-01T00:00:00Z", template="t", reset="",
    )  # fmt: skip
    assert hidden not in str(swarm_status.degraded(state)["message"])
    # A capture stored redacted (the setting): logs and termination messages.
    stored = redaction.capture(capture, redactor=text.DEFAULT)
    assert hidden not in records.dump(stored) and stored.redacted is True
    # A `records` view prints the stored document this way (every string redacted, printable).
    document = json.loads(records.dump(capture))
    assert hidden in str(document["containers"][0]["log"])
    assert hidden not in text.printable(json.dumps(text.DEFAULT.redact_tree(document), ensure_ascii=False))


def test_the_fingerprint_metric_has_no_text_label() -> None:
    gauge = metrics.Metrics().top_fingerprints
    assert gauge._labelnames == ("swarm", "rank", "fingerprint", "class")


@settings(max_examples=100, deadline=None)
@given(data=st.data(), shape=secrets.shapes)
def test_twelve_pods_failing_alike_share_one_fingerprint(data: st.DataObject, shape: list[str]) -> None:
    found = set()
    for pod in range(12):
        line = secrets.fill(shape, data)
        capture = refused(f"2026-12-0{pod % 9 + 1}T10:00:0{pod % 10}Z {line}\n")
        # Names no generated id can be (``run`` is no hex, and no id has two hyphens like these).
        found.add(fingerprints.describe(capture, names=[f"swarm-worker-run-{pod}-1", f"run-{pod}"]))
    assert len(found) == 1, found


def test_the_issues_twelve_lines_share_one_fingerprint() -> None:
    lines = [
        f"worker refused: cannot reach 10.0.{n}.7:{6000 + n} after {n + 1} tries (request {rid})"
        for n, rid in enumerate(["3fa9c2d1-7b2e", "beefcafe-1234", "12345678-9abc", "0a1b2c3d-dead"] * 3)
    ]
    assert len({fingerprints.describe(refused(line)) for line in lines}) == 1


def test_different_words_still_tell_causes_apart() -> None:
    one = fingerprints.describe(refused("cannot reach redis at 10.0.0.7"))
    other = fingerprints.describe(refused("cannot reach postgres at 10.0.0.7"))
    assert one[0] != other[0]


@pytest.mark.parametrize(
    "message",
    [
        'spec.worker.env[0].valueFrom.secretKeyRef.name: "swarm-worker-redis-x" is not allowed',
        "tokens: 5 remaining",
        "passwordFile=/etc/agentihooks/password",
        'Error: secret "db" not found',
        "basic authentication required",
    ],
)
def test_the_operators_own_words_are_not_taken_for_secrets(message: str) -> None:
    assert text.DEFAULT.redact(message) == message


def test_a_key_that_ends_with_the_word_is_a_secret_pair() -> None:
    shown = text.DEFAULT.redact('AWS_SECRET_ACCESS_KEY=abc/def+1 client_secret: s3 {"db_password": "x1"}')
    assert shown == 'AWS_SECRET_ACCESS_KEY=<redacted> client_secret: <redacted> {"db_password": "<redacted>"}'


def test_a_secret_group_keeps_the_rest_of_the_match() -> None:
    redactor = text.Redactor.of([r"session=(?P<secret>\w+)"], defaults=False)
    assert redactor.redact("session=abc123; ok") == "session=<redacted>; ok"
    assert (
        text.Redactor.of([r"internal-\w+"], defaults=False).redact("at internal-db3 now")
        == "at <redacted> now"
    )


@pytest.mark.parametrize(
    ("pattern", "why"),
    [("(a", "not a regular expression"), (r"(a+)+$", "repeated group"), (r"(\w*)*x", "repeated group"),
     ("x" * 600, "longer than")],
)  # fmt: skip
def test_a_bad_pattern_is_refused_with_a_reason(pattern: str, why: str) -> None:
    with pytest.raises(text.InvalidPattern, match=why):
        text.Redactor.of([pattern])


def test_a_swarm_with_a_bad_pattern_is_invalid_and_says_why() -> None:
    spec = {"worker": {"image": "w"}, "redaction": {"patterns": ["(a+)+"]}}
    with pytest.raises(errors.InvalidResource, match=r"spec.redaction.patterns: .*repeated group"):
        resources.parse_swarm(name="s", spec=spec)


def test_a_swarms_patterns_apply_to_it_alone() -> None:
    redactors = text.Redactors(text.DEFAULT)
    redactors.learn(namespace="a", slug="s", patterns=["internal-db"])
    assert redactors.of(namespace="a", slug="s").redact("internal-db down") == "<redacted> down"
    assert redactors.of(namespace="b", slug="s").redact("internal-db down") == "internal-db down"
    redactors.learn(namespace="a", slug="s", patterns=[])
    assert redactors.of(namespace="a", slug="s") is redactors.base


def test_input_is_bounded() -> None:
    redacted = text.DEFAULT.redact("x" * (text.INPUT_MAX + 10))
    assert len(redacted) < text.INPUT_MAX + 20 and redacted.endswith("(cut)")


@given(st.text())
def test_printable_keeps_no_control_character(raw: str) -> None:
    shown = text.printable(raw)
    assert all(c in "\n\t" or (ord(c) >= 0x20 and not 0x7F <= ord(c) <= 0x9F) for c in shown)
    assert not set(shown) & {"\u202e", "\u2066"}


def test_printable_drops_escape_sequences_introducers() -> None:
    assert text.printable("\x1b[2Jred\x07\r\x9b31m\u202eok\n") == "[2Jred31mok\n"


def test_the_log_filter_redacts_messages_and_their_arguments(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("tests.redaction")
    handler = caplog.handler
    handler.addFilter(text.RedactingFilter(text.DEFAULT))
    try:
        logger.warning("worker said %s", "password=hunter2 \x1b[31m")
    finally:
        handler.removeFilter(handler.filters[-1])
    assert caplog.records[-1].getMessage() == "worker said password=<redacted> [31m"


def test_the_control_characters_printable_drops_are_exactly_unicodes_cc_and_the_overrides() -> None:
    """Every code point: dropped when its category is ``Cc`` (but newline and tab) or it is a
    bidirectional override, kept otherwise; newline and tab kept, or made spaces."""
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    kept = "".join(
        c for c in every if c in "\n\t" or (unicodedata.category(c) != "Cc" and c not in text._BIDI)
    )
    assert text.printable(every) == kept
    assert text.printable(every, keep_newlines=False) == kept.replace("\n", " ").replace("\t", " ")
