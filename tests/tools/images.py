"""``python -m tests.tools.images``: build the real node's images that are missing (offline, from
Debian's packages; :mod:`tests.support.images` says how) and print ``REF TAR`` for each, and on
stderr the path of the operator image's SBOM (``sbom.cdx.json``, beside its archive)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from tests.support import images


def main(argv: Sequence[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python -m tests.tools.images", description=__doc__).parse_args(argv)
    started = time.monotonic()
    built = images.all_images()
    for ref, path in built.items():
        print(ref, path)
    print(f"sbom: {images.operator_sbom(built[images.OPERATOR_REF])}", file=sys.stderr)
    print(f"({time.monotonic() - started:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
