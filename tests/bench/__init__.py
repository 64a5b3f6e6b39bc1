"""``make bench`` (``python -m tests.bench``): the capture's cost against a baseline.

The operator runs as in production (``python -m agentihooks_swarm run``, the chart's timings)
against the local real control plane through a counting fault proxy (no fault rules) and a real
redis-server. Each scenario runs at N = 100, 500 and 2000 in two modes, capture and baseline,
alternating within one bench run, each on a fresh namespace with a fresh operator process; the
results go to ``docs/benchmarks.md`` and ``docs/benchmarks.png``. See ``run.py`` for the
scenarios and ``report.py`` for every figure's definition.
"""
