"""The checker's reads of Redis at the end of the run, by the documented key scheme
(``PREFIX:{SLUG}:NAME``, hashes keyed by execution name), and the spec's literal read commands
run for a sample, to show that both agree.

The read commands are the spec's ``python -c`` snippets with ``from agentihooks_swarm.store
import connect`` in place of ``scripts.swarm.store``: they run in a child process, as a person
runs them; this module only holds their text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import redis

from tests.soak.checker.model import Capture, RecordError, Where, captures_from, owner_uid

DEFAULT_PREFIX: Final = "agentihooks-swarm"
HASHES: Final[Mapping[Where, str]] = {
    "launch": "attempt-startup-diagnostics",
    "journal": "cleanup-journal",
    "retained": "attempt-retained",
}
#: Which Execution (by UID) a name's records belong to: ``{"uid", "namespace", "at"}`` per name.
OWNERS: Final = "execution-owners"

#: The spec's "Launch removal capture" command.
READ_LAUNCH: Final = """
import sys
from agentihooks_swarm.store import connect
store = connect()
print(store.redis.hget(store.key(sys.argv[1], "attempt-startup-diagnostics"), sys.argv[2]))
"""
#: The spec's "Retained cleanup evidence" command.
READ_RETAINED: Final = """
import json, sys
from agentihooks_swarm.store import connect
store = connect()
kept = json.loads(store.redis.hget(store.key(sys.argv[1], "attempt-retained"), sys.argv[2]))
print(json.dumps(kept["removed"]["pods"], indent=2))
"""
#: The spec's "Cleanup still in progress" command.
READ_JOURNAL: Final = """
import json, sys
from agentihooks_swarm.store import connect
store = connect()
journal = json.loads(store.redis.hget(store.key(sys.argv[1], "cleanup-journal"), sys.argv[2]))
print(json.dumps(journal["pinned"]["pods"], indent=2))
"""


def key(prefix: str, slug: str, name: str) -> str:
    return f"{prefix}:{{{slug}}}:{name}"


@dataclass
class Stored:
    """Everything the end-of-run read found."""

    captures: list[Capture] = field(default_factory=list)
    journal: list[tuple[str, str]] = field(default_factory=list)
    raw: dict[tuple[Where, str, str], str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    owners: dict[tuple[str, str], str] = field(default_factory=dict)
    """(slug, execution name) -> the UID of the Execution that owns the name's records."""


def read_all(client: redis.Redis, *, prefix: str, slugs: Iterable[str]) -> Stored:
    """Every launch record, journal entry, retained record and owner claim of ``slugs`` (HGETALL
    each)."""
    stored = Stored()
    for slug in slugs:
        claims: Mapping[Any, Any] = client.hgetall(key(prefix, slug, OWNERS))
        for execution, raw in claims.items():
            try:
                uid = owner_uid(raw)
            except RecordError as error:
                stored.errors.append(f"{OWNERS} {slug}/{execution}: {error}")
                continue
            if uid is not None:
                stored.owners[(slug, str(execution))] = uid
        for where, name in HASHES.items():
            found: Mapping[Any, Any] = client.hgetall(key(prefix, slug, name))
            for execution, raw in found.items():
                execution, raw = str(execution), str(raw)
                stored.raw[(where, slug, execution)] = raw
                if where == "journal":
                    stored.journal.append((slug, execution))
                try:
                    stored.captures += captures_from(where=where, slug=slug, execution=execution, raw=raw)
                except RecordError as error:
                    stored.errors.append(str(error))
    return stored


@dataclass(frozen=True)
class Agreement:
    where: Where
    slug: str
    execution: str
    agrees: bool
    detail: str = ""


def read_commands_agree(
    stored: Stored, *, env: Mapping[str, str], sample: int, python: str = sys.executable
) -> list[Agreement]:
    """Run the spec's read command for up to ``sample`` records of each kind and compare what it
    prints with what :func:`read_all` read. ``env``: the ``AGENTIHOOKS_SWARM_REDIS_*`` variables."""
    results = []
    commands: Mapping[Where, str] = {
        "launch": READ_LAUNCH,
        "retained": READ_RETAINED,
        "journal": READ_JOURNAL,
    }
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_SWARM_")} | dict(env)
    for where, command in commands.items():
        chosen = sorted(k for k in stored.raw if k[0] == where)[:sample]
        for _, slug, execution in chosen:
            done = subprocess.run(
                [python, "-c", command, slug, execution],
                env=environment,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            mine = json.loads(stored.raw[(where, slug, execution)])
            expected = (
                mine if where == "launch" else mine["removed" if where == "retained" else "pinned"]["pods"]
            )
            try:
                printed = json.loads(done.stdout)
            except ValueError:
                printed = None
            agrees = done.returncode == 0 and printed == expected
            detail = "" if agrees else f"exit {done.returncode}: {(done.stderr or done.stdout)[-300:]}"
            results.append(
                Agreement(where=where, slug=slug, execution=execution, agrees=agrees, detail=detail)
            )
    return results
