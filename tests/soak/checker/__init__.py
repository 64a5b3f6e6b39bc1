"""The soak's independent checker: it judges the operator's history and shares no code with it.

Nothing here imports ``agentihooks_swarm`` (``tests/unit/test_soak_checker.py`` parses these
modules, and every test-tooling module they import, and fails if one does). What the checker
knows of the operator is the contract, read from the spec and written again here:

* what "refused" means (:func:`.model.refused`): the Pod phase is Failed, or an init or main
  container terminated with a nonzero exit code;
* where captures live (:mod:`.records`): ``PREFIX:{SLUG}:NAME`` hashes keyed by execution name —
  ``attempt-startup-diagnostics`` (``{"pod", "uid", "labels", "startup"}``), ``cleanup-journal``
  (``pinned.pods[]`` and ``removed.pods[]`` with ``startup``) and ``attempt-retained``
  (``removed.pods[]``: ``name``, ``uid``, ``outcome``, ``startup``, ``log_reads``).

Modules: :mod:`.model` (pure: a Pod's history, captures parsed from records, findings),
:mod:`.rules` (pure: histories and records in, verdicts out), :mod:`.observe` (its own watch of
the worker Pods and Executions, the Redis probe made when it sees a refused Pod deleted, the
operators' memory and metrics), :mod:`.records` (the end-of-run reads, and the spec's literal
read commands for a sample).
"""
