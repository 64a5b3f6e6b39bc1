"""``python -m tests.tools.images``: build the real node's images that are missing (offline, from
Debian's packages; :mod:`tests.support.images` says how) and print ``REF TAR`` for each."""

from __future__ import annotations

import sys
import time

from tests.support import images


def main() -> int:
    started = time.monotonic()
    for ref, path in images.all_images().items():
        print(ref, path)
    print(f"({time.monotonic() - started:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
