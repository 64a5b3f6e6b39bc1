"""The pages a user reads speak to users: no commit hash, no temporary path, no issue number.

A user page is every page of the site's navigation (``mkdocs.yml``) outside its ``Project``
section (development, benchmarks, reliability, changelog: the project's own notes), and the
README. A refusal fingerprint is 12 hex characters too: a word the page itself calls a
fingerprint is one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest

from tests.support.doc_blocks import project_pages, user_pages

REPO: Final = Path(__file__).resolve().parents[2]

#: A commit hash as git prints one: 7 to 40 hex digits, with at least one digit and one letter, as
#: a word of its own (not a piece of a UUID or of a longer word).
HASH: Final = re.compile(r"(?<![\w-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
FINGERPRINT: Final = re.compile(r"fingerprint\W{1,4}([0-9a-f]{12})\b")
TEMPORARY: Final = re.compile(r"/tmp/")
ISSUE: Final = re.compile(r"\b[Ii]ssues? #?\d+\b")


def lab_notes(text: str) -> list[str]:
    """What a user page must not say, each with its line number."""
    fingerprints = set(FINGERPRINT.findall(text))
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        hashes = [word for word in HASH.findall(line) if word not in fingerprints]
        found += [f"{number}: commit hash {word}" for word in hashes]
        found += [f"{number}: temporary path" for _ in TEMPORARY.findall(line)]
        found += [f"{number}: issue reference {match!r}" for match in ISSUE.findall(line)]
    return found


def test_the_project_pages_are_apart_and_the_user_pages_many() -> None:
    assert {"development.md", "benchmarks.md", "reliability.md"} <= set(project_pages())
    names = {page.name for page in user_pages()}
    assert {"getting-started.md", "install.md", "architecture.md", "faq.md", "crds.md"} <= names
    assert not names & {"development.md", "benchmarks.md", "reliability.md"}


@pytest.mark.parametrize("page", user_pages(), ids=lambda page: str(page.relative_to(REPO)))
def test_a_user_page_has_no_commit_hash_temporary_path_or_issue_number(page: Path) -> None:
    assert lab_notes(page.read_text()) == []


def test_the_check_finds_a_hash_a_temporary_path_and_an_issue_but_not_a_fingerprint() -> None:
    text = """Measured on af9ec12, logs in /tmp/agentihooks-swarm-cluster/log (issue 20's note).
"fingerprint": "ca0590c0d90b", then ca0590c0d90b again; a uid 6f1c2b3a-1e2f-4a5b-9c8d-0e1f2a3b4c5d.
Kubernetes 1.34, 67108864 bytes, see issue #12 and [redis#12564](https://github.com/r/r/issues/12564)."""
    assert lab_notes(text) == [
        "1: commit hash af9ec12",
        "1: temporary path",
        "1: issue reference 'issue 20'",
        "3: issue reference 'issue #12'",
    ]
