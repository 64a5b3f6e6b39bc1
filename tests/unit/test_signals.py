"""The test tools' SIGTERM: it unwinds the main thread, so what a run started is stopped."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.support import signals


def test_sigterm_raises_system_exit_in_the_main_thread() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    cleaned = []
    try:
        signals.exit_on_sigterm()
        with pytest.raises(SystemExit) as exited:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # The handler runs at the next bytecode; this is never reached in full.
            finally:
                cleaned.append(True)
        assert exited.value.code == 143
        assert cleaned == [True]
    finally:
        signal.signal(signal.SIGTERM, previous)
