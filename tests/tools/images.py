"""``python -m tests.tools.images``: build the real node's images that are missing (offline, from
Debian's packages; :mod:`tests.support.images` says how) and print ``REF TAR`` for each."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from tests.support import images


def main(argv: Sequence[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python -m tests.tools.images", description=__doc__).parse_args(argv)
    started = time.monotonic()
    for ref, path in images.all_images().items():
        print(ref, path)
    print(f"({time.monotonic() - started:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
