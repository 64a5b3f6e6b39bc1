"""One line per stage of a long step, and the details in a log file.

A long step (building images, starting the cluster, installing packages) is a few stages; the user
sees one line per stage with its elapsed time, and ``[n/N]`` when the number of stages is known::

    [2/6] kube-apiserver ... 6.1s

On a terminal the line's time ticks while the stage runs. The commands a stage runs write to the
log file (:meth:`Progress.run`), whose path the caller prints up front; when a stage fails, the
line says so and the last lines of that log follow it, so the cause is on the screen without
opening the file. ``tests/support/progress.sh`` is the same helper for the shell scripts.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final, TextIO

__all__ = ["Progress", "StageFailed", "duration", "log_path", "run", "tail"]

#: Log lines shown under a failed stage.
TAIL_LINES: Final = 30
_TICK_SECONDS: Final = 1.0


class StageFailed(RuntimeError):
    """A command run by :meth:`Progress.run` failed; the message ends with the log's last lines."""


def log_path(name: str) -> Path:
    """``${AGENTIHOOKS_SWARM_CACHE:-~/.cache/agentihooks-swarm}/logs/<name>``: where a step that
    has no cache entry of its own keeps its log (as ``tests/support/system-deps.sh`` does)."""
    root = os.environ.get("AGENTIHOOKS_SWARM_CACHE") or str(Path.home() / ".cache" / "agentihooks-swarm")
    return Path(root) / "logs" / name


def duration(seconds: float) -> str:
    """``0.4s``, ``41s``, ``5m12s``: short enough for a progress line, precise where it matters."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def tail(path: Path, *, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path`` (a note instead when it cannot be read)."""
    try:
        text = path.read_bytes()[-32768:].decode(errors="replace")
    except OSError as error:
        return f"(no log: {error})"
    return "\n".join(text.splitlines()[-lines:])


def run(
    argv: Sequence[str],
    *,
    log: Path | None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
) -> str:
    """Run ``argv`` and return its stdout. Its stderr goes to ``log`` as it comes, its stdout
    after it ends. A non-zero exit or a timeout raises :class:`StageFailed`, whose message ends
    with the log's last lines (with no log: with the end of the command's stderr)."""
    _note(log, f"$ {shlex.join(argv)}")
    with contextlib.ExitStack() as stack:
        errors: int = subprocess.PIPE if log is None else stack.enter_context(log.open("ab")).fileno()
        try:
            done = subprocess.run(
                list(argv),
                env=None if env is None else dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise StageFailed(_failure(argv, f"did not finish within {timeout:g}s", log, b"")) from error
    stdout = done.stdout.decode(errors="replace")
    if stdout.strip():
        _note(log, stdout.rstrip("\n"))
    if done.returncode != 0:
        raise StageFailed(_failure(argv, f"exited {done.returncode}", log, done.stderr or b""))
    return stdout


def _failure(argv: Sequence[str], what: str, log: Path | None, stderr: bytes) -> str:
    command = f"{shlex.join(argv[:3])}{' …' if len(argv) > 3 else ''}"
    if log is not None:
        return f"{command} {what}; last lines of {log}:\n{tail(log)}"
    lines = stderr.decode(errors="replace").splitlines()[-TAIL_LINES:]
    return f"{command} {what}" + "".join(f"\n{line}" for line in lines)


def _note(log: Path | None, text: str) -> None:
    if log is not None:
        with log.open("a") as stream:
            stream.write(text + "\n")


class Progress:
    """Prints one line per stage to ``out`` (``None``: silent) and keeps the details in ``log``.

    ``total`` is the number of stages when it is known. ``log`` is truncated when the object is
    made: it holds the details of this run only.
    """

    def __init__(
        self,
        *,
        log: Path | None = None,
        total: int | None = None,
        out: TextIO | None = sys.stderr,
        ticking: bool | None = None,
    ) -> None:
        self.log = log
        self.total = total
        self.out = out
        self.done = 0
        self._ticking = (out is not None and out.isatty()) if ticking is None else ticking
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_bytes(b"")

    def say(self, text: str) -> None:
        """One line of its own (e.g. what is about to happen, and where the log is)."""
        if self.out is not None:
            print(text, file=self.out, flush=True)

    def again(self, reason: str) -> None:
        """Say why the stages start over (a retry), and count them from 1 again."""
        self.say(reason)
        self._note(f"=== {reason}")
        self.done = 0

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the body as the next stage: ``[n/N] name ... 12s``, or ``... failed after 12s``
        and the log's last lines when the body raises."""
        self.done += 1
        counter = f"[{self.done}/{self.total}] " if self.total else ""
        head = f"{counter}{name} ..."
        self._note(f"=== {head}")
        began = time.monotonic()
        stop = threading.Event()
        ticker = self._start_ticker(head, began, stop)
        try:
            yield
        except StageFailed:  # its message has the log's tail already
            self._finish(head, f"failed after {duration(time.monotonic() - began)}", stop, ticker)
            raise
        except Exception:
            self._finish(head, f"failed after {duration(time.monotonic() - began)}", stop, ticker)
            if self.log is not None and self.out is not None:
                print(f"--- last lines of {self.log}:\n{tail(self.log)}", file=self.out, flush=True)
            raise
        except BaseException:
            self._finish(head, f"interrupted after {duration(time.monotonic() - began)}", stop, ticker)
            raise
        self._finish(head, duration(time.monotonic() - began), stop, ticker)

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float | None = None,
    ) -> str:
        """:func:`run` with this progress's log."""
        return run(argv, log=self.log, env=env, cwd=cwd, timeout=timeout)

    # -- internals -------------------------------------------------------------------------

    def _note(self, text: str) -> None:
        _note(self.log, text)

    def _start_ticker(self, head: str, began: float, stop: threading.Event) -> threading.Thread | None:
        if self.out is None:
            return None
        out = self.out
        if not self._ticking:
            out.write(head)
            out.flush()
            return None

        def tick() -> None:
            while True:
                out.write(f"\r\033[K{head} {duration(time.monotonic() - began)}")
                out.flush()
                if stop.wait(_TICK_SECONDS):
                    return

        ticker = threading.Thread(target=tick, name="progress-ticker", daemon=True)
        ticker.start()
        return ticker

    def _finish(
        self, head: str, outcome: str, stop: threading.Event, ticker: threading.Thread | None
    ) -> None:
        stop.set()
        if ticker is not None:
            ticker.join()
        self._note(f"=== {head} {outcome}")
        if self.out is None:
            return
        self.out.write(f"\r\033[K{head} {outcome}\n" if self._ticking else f" {outcome}\n")
        self.out.flush()
