"""The tools with their own entry points, apart from the tests and their shared support.

* ``python -m tests.tools.cluster up|down|status|env [--node kwok|real]``: a detached test cluster
  for a person (``make cluster-up``, ``make cluster-down``, ``make cluster-status``).
* ``python -m tests.tools.demo``: ``make demo``.
* ``python -m tests.tools.docs [--check]``: the generated documentation pages (``make docs``) and
  their drift check (``make lint``).
* ``python -m tests.tools.version [--check]``: ``pyproject.toml``'s version written where it is
  copied (``make version``), and its drift check (``make lint``).
* ``python -m tests.tools.images``: the real node's images, built offline (the library is
  :mod:`tests.support.images`, which the real node's cluster calls itself).
* ``binaries/build.sh [--for all|kwok] [--check]``: the control plane's binaries, built from the Go
  modules pinned in ``binaries/`` (``make binaries``).

A tool imports :mod:`tests.support`, which imports no tool. Of the test tiers, ``tests/unit``
imports a tool's pure parts, and ``tests/chart`` the docs generator's runbooks, whose pages the
rendered alerts must link (``tests/unit/test_test_tiers.py``).
"""
