"""The spec's read commands, as ``python -c`` scripts with this package's module path: each takes
the swarm's slug and the execution's name as its arguments."""

from __future__ import annotations

#: The spec's first read command.
READ_STARTUP = """
import sys
from agentihooks_swarm.store import connect
store = connect()
print(store.redis.hget(store.key(sys.argv[1], "attempt-startup-diagnostics"), sys.argv[2]))
"""
#: The spec's second and third read commands.
READ_RETAINED = """
import json, sys
from agentihooks_swarm.store import connect
store = connect()
kept = json.loads(store.redis.hget(store.key(sys.argv[1], "attempt-retained"), sys.argv[2]))
print(json.dumps(kept["removed"]["pods"], indent=2))
"""
READ_JOURNAL = """
import json, sys
from agentihooks_swarm.store import connect
store = connect()
journal = json.loads(store.redis.hget(store.key(sys.argv[1], "cleanup-journal"), sys.argv[2]))
print(json.dumps(journal["pinned"]["pods"], indent=2))
"""
