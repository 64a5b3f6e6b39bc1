"""``with`` for the helpers that start something (a process, a thread) and close it: started on
entry, closed on exit, whatever happened in between."""

from __future__ import annotations

from typing import Self


class Started:
    """A helper with ``start()`` and ``close()``; ``with Helper() as helper:`` calls both."""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
