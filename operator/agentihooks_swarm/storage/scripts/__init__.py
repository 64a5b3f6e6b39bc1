"""The store's Lua scripts, one file each, read once at import.

A script's first line may name the script files whose functions it calls (``-- uses: NAME``):
Redis runs one script at a time, with no includes, so those come first in the text sent.
Each file's header comments say its ``KEYS`` and ``ARGV`` and what it answers.
"""

from __future__ import annotations

import functools
import importlib.resources


@functools.cache
def _text(name: str) -> str:
    return importlib.resources.files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


def load(name: str) -> str:
    """The script ``name`` as sent to Redis: the scripts it uses, then its own text."""
    text = _text(name)
    first = text.split("\n", 1)[0]
    uses = first.removeprefix("-- uses:").split(",") if first.startswith("-- uses:") else []
    return "".join(_text(used.strip()) for used in uses) + text
