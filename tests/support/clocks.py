"""A clock that a test moves by hand, for the operator's code that takes ``clock=``."""

from __future__ import annotations


class Clock:
    """``clock()`` is ``clock.now``, which only the test changes (``clock.now += 60``)."""

    def __init__(self, *, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
