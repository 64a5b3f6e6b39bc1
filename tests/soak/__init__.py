"""A seeded chaos soak: thousands of Executions under overlapping faults, judged by a checker that
shares no code with the operator (``python -m tests.soak``, ``make soak``; see ``__main__``).

* :mod:`.plan` — the seeded plan: the workload's mix and the fault schedule.
* :mod:`.rig` — what it runs against: its own control plane, the Sentinel set
  (:mod:`.redis_set`), the operators' network to Redis (:mod:`.redis_net`, :mod:`.resp`) and two
  operator replicas, each behind its own fault proxy.
* :mod:`.workload` — creates, cancels, deletes and reuses Executions; plants each worker's log with
  a marker unique to its Pod.
* :mod:`.faults` — injects the faults at their times and keeps the ledger.
* :mod:`.checker` — the independent checker (imports nothing from ``agentihooks_swarm``).
* :mod:`.run`, :mod:`.report` — one run, and its report.
"""
