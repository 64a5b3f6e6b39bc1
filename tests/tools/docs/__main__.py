"""``python -m tests.tools.docs [--check]``: write the generated documentation pages, or check them."""

from __future__ import annotations

import argparse
import sys

from tests.tools import docs
from tests.tools.docs import runbooks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.docs", description=__doc__)
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; fail when a page is stale, a runbook is missing or a description is empty",
    )
    args = parser.parse_args(argv)
    problems = docs.stale() if args.check else []
    if not args.check:
        for path in docs.write():
            print(f"docs: wrote {path}")
    problems += runbooks.problems() + docs.gaps()
    for problem in problems:
        print(f"docs: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
