"""The progress helpers: tests/support/progress.py and its shell twin tests/support/progress.sh.

One line per stage with its time, the details in the log, and on failure the log's last lines.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from tests.support import progress
from tests.support.progress import Progress, StageFailed

SHELL_HELPER: Final = Path(progress.__file__).with_name("progress.sh")
#: A time as both helpers print it: 0.4s, 41s, 5m12s.
TIME: Final = r"(\d\.\d|\d{2}|\d+m\d{2})s"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0.04, "0.0s"), (0.44, "0.4s"), (9.94, "9.9s"), (10.2, "10s"), (41.4, "41s"), (312.4, "5m12s")],
)
def test_duration(seconds: float, shown: str) -> None:
    assert progress.duration(seconds) == shown


def test_each_stage_is_one_line_with_its_counter_and_time(tmp_path: Path) -> None:
    out = io.StringIO()
    steps = Progress(log=tmp_path / "step.log", total=2, out=out, ticking=False)
    with steps.stage("first"):
        pass
    with steps.stage("second"):
        pass
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(rf"\[1/2\] first \.\.\. {TIME}", lines[0])
    assert re.fullmatch(rf"\[2/2\] second \.\.\. {TIME}", lines[1])


def test_without_a_total_there_is_no_counter(tmp_path: Path) -> None:
    out = io.StringIO()
    with Progress(out=out, ticking=False).stage("starting"):
        pass
    assert re.fullmatch(rf"starting \.\.\. {TIME}\n", out.getvalue())


def test_stages_started_again_count_from_one(tmp_path: Path) -> None:
    out = io.StringIO()
    steps = Progress(total=2, out=out, ticking=False)
    with steps.stage("first"):
        pass
    steps.again("a port was taken: starting again")
    with steps.stage("first"):
        pass
    lines = out.getvalue().splitlines()
    assert [line.split(" ...")[0] for line in lines] == [
        "[1/2] first",
        "a port was taken: starting again",
        "[1/2] first",
    ]


def test_a_commands_output_goes_to_the_log_not_the_screen(tmp_path: Path) -> None:
    out = io.StringIO()
    log = tmp_path / "step.log"
    log.write_text("a previous run's details\n")
    steps = Progress(log=log, total=1, out=out, ticking=False)
    with steps.stage("talkative"):
        printed = steps.run(
            [sys.executable, "-c", "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"]
        )
    assert printed == "to stdout\n"
    assert "to std" not in out.getvalue()
    details = log.read_text()
    assert "a previous run's details" not in details  # the log holds this run only
    assert "to stdout" in details and "to stderr" in details
    assert "=== [1/1] talkative ..." in details


def test_a_failed_command_fails_its_stage_with_the_logs_tail(tmp_path: Path) -> None:
    out = io.StringIO()
    log = tmp_path / "step.log"
    steps = Progress(log=log, total=3, out=out, ticking=False)
    script = "import sys\nfor i in range(100): print(f'line {i}', file=sys.stderr)\nsys.exit(3)"
    with pytest.raises(StageFailed) as raised, steps.stage("breaks"):
        steps.run([sys.executable, "-c", script])
    message = str(raised.value)
    assert "exited 3" in message and str(log) in message
    assert "line 99" in message and "line 69" not in message  # the tail, not the whole log
    assert "line 69" in log.read_text()
    # The error carries the tail; the screen has the stage's line only (the tail once, not twice).
    assert re.fullmatch(rf"\[1/3\] breaks \.\.\. failed after {TIME}\n", out.getvalue())


def test_any_other_error_in_a_stage_prints_the_logs_tail(tmp_path: Path) -> None:
    out = io.StringIO()
    log = tmp_path / "step.log"
    steps = Progress(log=log, total=1, out=out, ticking=False)
    with pytest.raises(ValueError, match="boom"), steps.stage("raises"):
        steps.run(["echo", "what the command said"])
        raise ValueError("boom")
    assert re.fullmatch(
        rf"\[1/1\] raises \.\.\. failed after {TIME}\n--- last lines of {re.escape(str(log))}:\n"
        r"=== \[1/1\] raises \.\.\.\n\$ echo 'what the command said'\nwhat the command said\n"
        rf"=== \[1/1\] raises \.\.\. failed after {TIME}\n",
        out.getvalue(),
    )


def test_an_interrupted_stage_says_so(tmp_path: Path) -> None:
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt), Progress(out=out, ticking=False).stage("long"):
        raise KeyboardInterrupt
    assert re.fullmatch(rf"long \.\.\. interrupted after {TIME}\n", out.getvalue())


def test_without_a_log_the_error_has_the_end_of_the_commands_stderr() -> None:
    script = "import sys\nfor i in range(100): print(f'line {i}', file=sys.stderr)\nsys.exit(4)"
    with pytest.raises(StageFailed) as raised:
        progress.run([sys.executable, "-c", script], log=None)
    assert "exited 4" in str(raised.value)
    assert "line 99" in str(raised.value) and "line 69" not in str(raised.value)


def test_a_command_that_outlasts_its_timeout_fails_the_stage(tmp_path: Path) -> None:
    steps = Progress(log=tmp_path / "step.log", out=None)
    with pytest.raises(StageFailed, match=r"did not finish within 0\.2s"), steps.stage("slow"):
        steps.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)


def test_silent_progress_still_keeps_the_log(tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    steps = Progress(log=log, total=1, out=None)
    with steps.stage("quiet"):
        steps.run(["echo", "kept"])
    assert "kept" in log.read_text()


def test_on_a_terminal_the_line_is_rewritten_in_place_and_ends_once(tmp_path: Path) -> None:
    out = io.StringIO()
    with Progress(total=1, out=out, ticking=True).stage("ticking"):
        pass
    screen = out.getvalue()
    assert screen.count("\n") == 1 and screen.endswith("\n")
    assert re.search(rf"\r\033\[K\[1/1\] ticking \.\.\. {TIME}\n$", screen)


# --- the shell twin -------------------------------------------------------------------------


def run_shell(body: str, *, log: Path) -> subprocess.CompletedProcess[str]:
    """Run ``body`` under ``set -euo pipefail`` after sourcing progress.sh (stderr not a terminal)."""
    script = f"set -euo pipefail\nsource {SHELL_HELPER}\nprogress_begin {log} 2\n{body}"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, check=False)


def test_shell_stages_print_one_line_each_and_log_the_output(tmp_path: Path) -> None:
    log = tmp_path / "shell.log"
    done = run_shell(
        "progress_stage 'first' echo 'said by first'\n"
        "progress_stage 'second' sh -c 'echo oops >&2'\n"
        "echo end",
        log=log,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "end\n"  # the commands' output is in the log only
    lines = done.stderr.splitlines()
    assert len(lines) == 2
    assert re.fullmatch(rf"\[1/2\] first \.\.\. {TIME}", lines[0])
    assert re.fullmatch(rf"\[2/2\] second \.\.\. {TIME}", lines[1])
    assert "said by first" in log.read_text() and "oops" in log.read_text()


def test_a_failed_shell_stage_shows_the_tail_and_stops_the_script(tmp_path: Path) -> None:
    log = tmp_path / "shell.log"
    done = run_shell(
        "progress_stage 'breaks' sh -c 'for i in $(seq 100); do echo line $i; done; exit 3'\n"
        "echo not reached",
        log=log,
    )
    assert done.returncode == 3
    assert "not reached" not in done.stdout
    assert re.match(
        rf"\[1/2\] breaks \.\.\. failed after {TIME} \(exit 3\)\n--- last lines of {log}:\n", done.stderr
    )
    assert "line 100" in done.stderr and "line 60" not in done.stderr
    assert "line 60" in log.read_text()


def test_a_shell_stage_runs_a_function_with_set_e(tmp_path: Path) -> None:
    log = tmp_path / "shell.log"
    done = run_shell("steps() { echo one; false; echo two; }\nprogress_stage 'function' steps", log=log)
    assert done.returncode == 1
    assert "one" in log.read_text() and "two" not in log.read_text()


def test_the_shell_scripts_parse() -> None:
    scripts = [
        SHELL_HELPER,
        SHELL_HELPER.with_name("system-deps.sh"),
        SHELL_HELPER.parents[1] / "tools" / "binaries" / "build.sh",
    ]
    for script in scripts:
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{script}: {done.stderr}"
