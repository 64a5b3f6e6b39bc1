"""The measuring instruments: the operator's /proc figures, Redis' own counters and MONITOR stream,
and the fault proxy's request log reduced to per-Pod counts by method and normalised path."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import redis

from tests.support.cluster import ControlPlane
from tests.support.proxy import WATCH_QUERY, Call

# -- the operator process ------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessFigures:
    peak_rss_mib: float
    """VmHWM: the resident set's high-water mark."""
    rss_mib: float
    """VmRSS: the resident set now (close to the peak: memory held, not a passing spike)."""
    cpu_seconds: float
    """utime + stime of the process, plus cutime + cstime of its reaped children."""


def process_figures(pid: int) -> ProcessFigures:
    status = Path(f"/proc/{pid}/status").read_text()
    kib = {}
    for field_name in ("VmHWM", "VmRSS"):
        match = re.search(rf"^{field_name}:\s+(\d+) kB", status, re.MULTILINE)
        if match is None:
            raise RuntimeError(f"/proc/{pid}/status has no {field_name}")
        kib[field_name] = int(match.group(1))
    return ProcessFigures(
        peak_rss_mib=kib["VmHWM"] / 1024, rss_mib=kib["VmRSS"] / 1024, cpu_seconds=cpu_seconds(pid)
    )


def cpu_seconds(pid: int) -> float:
    """utime + stime (+ reaped children's) of ``pid`` so far; 0 when it is gone."""
    # Fields after the parenthesised command: state is field 3, utime..cstime are fields 14..17.
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def machine_busy() -> tuple[float, float]:
    """``(busy, total)`` CPU seconds of the whole machine since boot (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(values) - idle) / tick, sum(values) / tick


@dataclass
class CpuMeter:
    """CPU seconds each named process spent between :meth:`start` and :meth:`stop`, and the machine's."""

    pids: dict[str, int]
    _start: dict[str, float] = field(default_factory=dict)
    _machine: tuple[float, float] = (0.0, 0.0)

    def start(self) -> None:
        self._start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self._machine = machine_busy()

    def stop(self) -> tuple[dict[str, float], float]:
        """Per process CPU seconds, and the machine's busy share of all CPUs (0..1) over the window."""
        used = {name: cpu_seconds(pid) - self._start[name] for name, pid in self.pids.items()}
        busy, total = machine_busy()
        spent = total - self._machine[1]
        return used, (busy - self._machine[0]) / spent if spent > 0 else 0.0


# -- Redis ---------------------------------------------------------------------------------------

#: Commands only the bench sends (the operator never does): left out of the operator's counts.
BENCH_COMMANDS: Final = frozenset(
    {"hlen", "info", "config|resetstat", "config|set", "monitor", "flushall", "hgetall", "command|docs"}
)


def command_calls(client: redis.Redis) -> Counter[str]:
    """``INFO commandstats`` as ``{command: calls}``, the bench's own commands left out."""
    stats = client.info("commandstats")
    calls: Counter[str] = Counter()
    for name, values in stats.items():
        command = str(name).removeprefix("cmdstat_")
        if command not in BENCH_COMMANDS and isinstance(values, dict):
            calls[command] = int(values["calls"])
    return calls


class Monitor:
    """``redis-cli monitor`` into a file, parsed after the run: when each hash field was written.

    A subprocess rather than a thread, so the bench's process (which also runs the proxy) does
    not parse the stream while the operator works. MONITOR's timestamps are the server's clock,
    the same host clock as the bench's ``time.time()``.
    """

    _LINE: Final = re.compile(r"^(\d+\.\d+) \[\d+ [^\]]+\] (.*)$")
    _ARG: Final = re.compile(r'"((?:[^"\\]|\\.)*)"')

    def __init__(self, *, port: int, path: Path) -> None:
        self.path = path
        self._out = path.open("wb")
        self._process = subprocess.Popen(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(port), "monitor"],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        self._out.close()

    def writes(self, *, command: str, key: str) -> dict[str, float]:
        """``{field: time of its first write}`` for ``command key field ...`` lines."""
        first: dict[str, float] = {}
        wanted = command.lower()
        for at, args in self._lines():
            if len(args) >= 3 and args[0].lower() == wanted and args[1] == key:
                first.setdefault(args[2], at)
        return first

    def _lines(self) -> Iterator[tuple[float, list[str]]]:
        with self.path.open("rb") as stream:
            for raw in stream:
                match = self._LINE.match(raw.decode(errors="replace"))
                if match is not None:
                    # The key and field come first; the (large) value is never needed.
                    yield float(match.group(1)), self._ARG.findall(match.group(2)[:600])[:3]


class ApiserverProfile:
    """kube-apiserver's CPU profile over a run (the bench's ``--profile``): Go's pprof, in windows
    of :attr:`WINDOW` seconds one after another until :meth:`stop`, each saved as it came, then
    one table of them all (``go tool pprof -top -cum``), next to the operator's py-spy stacks.

    The operator's cost is mostly the API server's; this shows what in the API server (which
    handler, which storage path) the run's requests cost. A thread, as each window is one
    blocking request; a control plane started without ``profiling`` answers 404, and the table
    says so instead.
    """

    WINDOW: Final = 5

    def __init__(self, *, plane: ControlPlane, prefix: Path) -> None:
        self._plane = plane
        self._prefix = prefix
        self._stopping = threading.Event()
        self._windows: list[Path] = []
        self._failure = ""
        self._thread = threading.Thread(target=self._run, name="kube-apiserver profile", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        path = f"/debug/pprof/profile?seconds={self.WINDOW}"
        while not self._stopping.is_set():
            try:
                status, body = self._plane.request("GET", path, timeout=self.WINDOW + 30)
            except OSError as error:
                self._failure = f"GET {path}: {error}"
                return
            if status != 200:
                self._failure = f"GET {path} answered {status}: {body[:200].decode(errors='replace')}"
                return
            window = self._prefix.with_name(f"{self._prefix.name}.kube-apiserver.{len(self._windows)}.pprof")
            window.write_bytes(body)
            self._windows.append(window)

    def stop(self) -> Path:
        """Wait for the window under way, then write the table; its path."""
        self._stopping.set()
        self._thread.join(timeout=self.WINDOW + 60)
        table = self._prefix.with_name(f"{self._prefix.name}.kube-apiserver.txt")
        go = shutil.which("go")
        if not self._windows:
            table.write_text(f"no profile: {self._failure or 'the run ended before a window did'}\n")
        elif go is None:
            table.write_text(f"go is not on PATH: read {len(self._windows)} windows with go tool pprof\n")
        else:
            binary = self._plane.bin_dir / "kube-apiserver"
            top = [go, "tool", "pprof", "-top", "-cum", "-nodecount=120", str(binary)]
            done = subprocess.run(
                [*top, *map(str, self._windows)],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            table.write_text(done.stdout + done.stderr)
        return table


def record_sizes(client: redis.Redis, key: str) -> list[int]:
    return [len(value) for value in client.hgetall(key).values()]


# -- the API server, through the proxy ------------------------------------------------------------

_PLACEHOLDERS: Final = {
    "pods": "{pod}",
    "executions": "{execution}",
    "swarms": "{swarm}",
    "configmaps": "{configmap}",
    "services": "{service}",
    "events": "{event}",
    "leases": "{lease}",
}
_RESOURCE: Final = re.compile(r"^(?P<prefix>/apis?/(?:[^/]+/)?v[^/]+)/namespaces/[^/]+/(?P<rest>.*)$")


def normalise(call: Call) -> str:
    """``METHOD path[?kind]`` with the namespace and object names replaced by placeholders."""
    path = call.path
    match = _RESOURCE.match(path)
    if match is not None:
        parts = match.group("rest").split("/")
        if len(parts) >= 2:
            parts[1] = _PLACEHOLDERS.get(parts[0], "{name}")
        path = f"{match.group('prefix')}/namespaces/{{ns}}/{'/'.join(parts)}"
    kind = ""
    if WATCH_QUERY.search(call.query):
        kind = "?watch"
    elif "fieldSelector=metadata.name" in call.query:
        kind = "?fieldSelector=metadata.name={name}"
    elif "fieldSelector=involvedObject.uid" in call.query:
        kind = "?fieldSelector=involvedObject.uid={uid}"
    elif "fieldSelector=involvedObject.kind=Pod" in call.query:
        kind = "?fieldSelector=involvedObject.kind=Pod"
    elif "labelSelector=" in call.query:
        selector = call.query.split("labelSelector=", 1)[1].split("&", 1)[0]
        # An attempt's pin names its labels' values; the worker Pods' list only asks for a key.
        kind = "?labelSelector={attempt}" if "=" in selector else "?labelSelector={key}"
    return f"{call.method} {path}{kind}"


def per_pod(calls: Sequence[Call], *, pods: int) -> dict[str, float]:
    """Requests per refused Pod by normalised call, watches and the Lease left out (per operator)."""
    counted = Counter(normalise(c) for c in calls)
    return {name: count / pods for name, count in sorted(counted.items()) if not operator_wide(name)}


#: The API discovery kopf and the client do at start-up: ``/api``, ``/api/v1``, ``/apis``, ``/apis/G/V``.
_DISCOVERY: Final = re.compile(r"^GET (/api|/api/v1|/apis|/apis/[^/]+/[^/]+)$")
#: A whole collection listed with no selector (what a watch starts from), cluster-wide or in {ns}.
_LIST: Final = re.compile(r"^GET (/api/v1|/apis/[^/]+/[^/]+)(/namespaces/\{ns\})?/[a-z]+$")


def operator_wide(name: str) -> bool:
    """Requests that cost per operator (its start, a watch's restart) and per second, not per Pod:
    watches and the lists they start from (the Events index's, the worker Pods' by label key, whole
    collections), the API discovery, and the leadership Lease."""
    if _DISCOVERY.match(name) or _LIST.match(name):
        return True
    per_operator = ("?watch", "?fieldSelector=involvedObject.kind=Pod", "?labelSelector={key}")
    return name.endswith(per_operator) or "/leases" in name


def operator_wide_calls(calls: Iterable[Call]) -> dict[str, int]:
    counted = Counter(normalise(c) for c in calls)
    return {name: count for name, count in sorted(counted.items()) if operator_wide(name)}
