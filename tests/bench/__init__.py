"""``make bench`` (``python -m tests.bench``): the capture's cost against a baseline.

The operator runs as in production (``serve`` of ``python -m agentihooks_swarm run``, the chart's timings)
against the local real control plane through a counting fault proxy (no fault rules) and a real
redis-server. Each scenario runs at N = 100, 500 and 2000 in two modes, capture and baseline
(the baseline is assembled here, in ``controller.py``: the operator has no switch for it), three
times each, interleaved, each on a fresh namespace with a fresh operator process; the
results go to ``docs/benchmarks.md`` and ``docs/benchmarks.png``. See ``run.py`` for the
scenarios and ``report.py`` for every figure's definition.

``python -m tests.bench --against REV`` (``against.py``) also runs REV's operator, checked out in
a git worktree outside the repository (removed afterwards) and started with this venv, next to each
run of the working tree's, and adds a section with every figure as the ratio working tree / REV.

``make bench-history`` (``history.py``): the operator's memory and restart time against the number
of Done Executions in the cluster, with 2,000 in flight.
"""
