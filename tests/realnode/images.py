"""Image names the real-node tests run (built offline and loaded by tests/support/images.py)."""

from __future__ import annotations

from typing import Final

from tests.support import images

BUSYBOX: Final = images.BUSYBOX_REF
OPERATOR: Final = images.OPERATOR_REF
REDIS: Final = images.REDIS_REF
