"""The real node's images (``tests/support/images.py``), built offline and run as a kubelet would.

Each image is read back from the docker-archive the node imports (its config and tag), then run
with ``runc`` on a rootfs that buildah mounts: the image's user, environment, entrypoint and
working folder, a read-only root filesystem and no capabilities, with tmpfs only where the chart
mounts a volume (``/tmp``, Redis's ``/data``), owned like an emptyDir under the chart's fsGroup.
Runs where buildah can (root on Linux; the tools are installed with apt-get when missing); the
first test builds what the cache lacks.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from packaging.utils import canonicalize_name

from tests.support import images, locks

pytestmark = [pytest.mark.images, pytest.mark.timeout(1800)]

#: The operator image's budget, uncompressed (the Debian base is about 124 MB of it).
OPERATOR_MAX_BYTES: Final = 230 * 1000 * 1000
PLANTED: Final = "worker startup refused: planted kind refusal"


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


@pytest.fixture(scope="module")
def cache() -> Path:
    return images.cache_root()


@pytest.fixture(scope="module")
def built(cache: Path) -> dict[str, Path]:
    if not images.buildah_works():
        pytest.skip("buildah needs root on Linux here")
    return images.all_images(cache=cache)


@pytest.fixture(scope="module")
def runner(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    run = Runner(cache=cache, state=tmp_path_factory.mktemp("runc"))
    try:
        yield run
    finally:
        run.close()


class Runner:
    """Runs an image's archive with runc, read-only; drops what it loaded into buildah at close."""

    def __init__(self, *, cache: Path, state: Path) -> None:
        self.cache = cache
        self.state = state
        self.loaded: dict[Path, str] = {}

    def close(self) -> None:
        for image_id in self.loaded.values():
            # Not forced: another session may run the same image right now; then it stays.
            with contextlib.suppress(images.ImageError):
                images.buildah("rmi", image_id, cache=self.cache)

    @contextlib.contextmanager
    def bundle(
        self, *, archive: Path, command: Sequence[str] | None, writable: Sequence[str]
    ) -> Iterator[tuple[Path, str]]:
        """An OCI bundle for the image in ``archive``: (bundle folder, container id)."""
        if archive not in self.loaded:
            self.loaded[archive] = images.buildah(
                "pull", "--quiet", f"docker-archive:{archive}", cache=self.cache
            ).splitlines()[-1]
        config = images.archive_config(archive)["config"]
        with images.working_container(image=self.loaded[archive], cache=self.cache) as container:
            rootfs = Path(images.buildah("mount", container, cache=self.cache))
            bundle = self.state / container
            bundle.mkdir()
            subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True)
            default = json.loads((bundle / "config.json").read_text())
            spec = _spec(default=default, rootfs=rootfs, config=config, command=command, writable=writable)
            (bundle / "config.json").write_text(json.dumps(spec))
            yield bundle, f"image-check-{uuid.uuid4().hex[:8]}"

    def run(
        self, *, archive: Path, command: Sequence[str] | None = None, writable: Sequence[str] = ("/tmp",)
    ) -> Ran:
        """Run to completion (``command`` replaces the entrypoint and arguments, like a Pod's)."""
        runc = ["runc", "--root", str(self.state / "runc")]
        with self.bundle(archive=archive, command=command, writable=writable) as (bundle, name):
            process = subprocess.Popen(
                [*runc, "run", "--bundle", str(bundle), name],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                out, err = process.communicate(timeout=120)
            finally:
                if process.poll() is None:  # Timed out: stop the container, then runc.
                    subprocess.run([*runc, "kill", name, "KILL"], capture_output=True, check=False)
                    process.communicate(timeout=30)
                subprocess.run([*runc, "delete", "--force", name], capture_output=True, check=False)
        return Ran(code=process.returncode, out=out, err=err)


def _spec(
    *,
    default: dict[str, Any],
    rootfs: Path,
    config: Mapping[str, Any],
    command: Sequence[str] | None,
    writable: Sequence[str],
) -> dict[str, Any]:
    """runc's default spec with the image's process, a read-only root and no capabilities."""
    spec = dict(default)
    uid, _, gid = str(config.get("User") or "0").partition(":")
    argv = (
        list(command)
        if command is not None
        else [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
    )
    spec["process"].update(
        terminal=False,
        args=argv,
        env=list(config.get("Env") or []),
        cwd=config.get("WorkingDir") or "/",
        user={"uid": int(uid), "gid": int(gid or uid)},
        capabilities={kind: [] for kind in ("bounding", "effective", "inheritable", "permitted", "ambient")},
        noNewPrivileges=True,
    )
    spec["root"] = {"path": str(rootfs), "readonly": True}
    # Like an emptyDir under the chart's fsGroup: owned by the image's group (runc gives a tmpfs
    # the mode of the folder it covers).
    options = ["nosuid", "nodev", f"uid={uid}", f"gid={gid or uid}"]
    spec["mounts"] += [
        {"destination": p, "type": "tmpfs", "source": "tmpfs", "options": options} for p in writable
    ]
    return spec


def _layers_size(archive: Path) -> int:
    with tarfile.open(archive) as tar:
        return sum(m.size for m in tar.getmembers() if m.name.endswith(".tar"))


# --------------------------------------------------------------------------------------------


def test_every_image_is_an_archive_tagged_with_its_ref(built: dict[str, Path], cache: Path) -> None:
    assert set(built) == {images.OPERATOR_REF, images.BUSYBOX_REF, images.PAUSE_REF, images.REDIS_REF}
    for ref, archive in built.items():
        assert archive.is_relative_to(cache), archive
        assert images.archive_config(archive)["RepoTags"] == [ref]


def test_a_warm_call_rebuilds_nothing(built: dict[str, Path], cache: Path) -> None:
    stamps = {path: path.stat().st_mtime_ns for path in built.values()}
    started = time.monotonic()
    again = images.all_images(cache=cache)
    elapsed = time.monotonic() - started
    assert again == built
    assert {path: path.stat().st_mtime_ns for path in again.values()} == stamps, f"{elapsed:.2f} s"
    # This process left no working container (other sessions may be building right now).
    names = images.buildah("containers", "--all", "--format", "{{.ContainerName}}", cache=cache).split()
    assert [n for n in names if n.startswith(f"agentihooks-swarm-{os.getpid()}-")] == []


def test_operator_image_config(built: dict[str, Path]) -> None:
    archive = built[images.OPERATOR_REF]
    config = images.archive_config(archive)["config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["agentihooks-swarm"]
    assert config["Cmd"][0] == "run"
    assert {"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"} <= set(config["Env"])
    assert config["Env"][0].startswith("PATH=/opt/agentihooks-swarm/bin:")
    assert set(config["ExposedPorts"]) == {"8080/tcp", "9090/tcp"}
    size = _layers_size(archive)
    assert size < OPERATOR_MAX_BYTES, f"the operator image is {size / 1e6:.1f} MB uncompressed"


def test_operator_entrypoint_serves_its_commands_read_only(built: dict[str, Path], runner: Runner) -> None:
    archive = built[images.OPERATOR_REF]
    ran = runner.run(archive=archive, command=["agentihooks-swarm", "--help"])
    assert ran.code == 0, ran
    for command in ("run", "records", "worker"):
        assert command in ran.out, ran.out
    # The image's own entrypoint with the chart's first argument: `run`, the operator's own main.
    config = images.archive_config(archive)["config"]
    ran = runner.run(archive=archive, command=[*config["Entrypoint"], "run", "--help"])
    assert ran.code == 0 and "--liveness" in ran.out and "--namespace" in ran.out, ran
    ran = runner.run(archive=archive, command=[*config["Entrypoint"], "records", "--help"])
    assert ran.code == 0 and "startup" in ran.out, ran


def test_operator_python_reads_records_as_the_spec_says(built: dict[str, Path], runner: Runner) -> None:
    """``kubectl exec … -c controller -- python -c …``: the venv's python, as user 10001, with a
    read-only root (writes only to /tmp), no pip and no compiler in the image."""
    program = """
import errno, importlib.util, os, shutil, sys
import agentihooks_swarm
from agentihooks_swarm.store import connect
assert (os.getuid(), os.getgid()) == (10001, 10001), (os.getuid(), os.getgid())
assert sys.prefix == "/opt/agentihooks-swarm", sys.prefix
assert sys.dont_write_bytecode
for path in ("/opt/agentihooks-swarm/x", "/etc/x", "/x"):
    try:
        open(path, "w")
    except OSError as e:
        assert e.errno == errno.EROFS, (path, e)
    else:
        raise AssertionError(path + " is writable")
open("/tmp/x", "w").write("ok")
assert importlib.util.find_spec("pip") is None
assert not any(shutil.which(tool) for tool in ("pip", "pip3", "gcc", "cc"))
print("ok", os.path.dirname(agentihooks_swarm.__file__))
"""
    ran = runner.run(archive=built[images.OPERATOR_REF], command=["python", "-c", program])
    assert (ran.code, ran.out.split()) == (
        0,
        ["ok", "/opt/agentihooks-swarm/lib/python3.11/site-packages/agentihooks_swarm"],
    ), ran


def test_busybox_runs_a_refused_worker(built: dict[str, Path], runner: Runner) -> None:
    config = images.archive_config(built[images.BUSYBOX_REF])["config"]
    assert config["User"] == images.BUSYBOX_USER
    script = f"printf '%s\\n' \"$(id -u)\" '{PLANTED}'; printf 'to stderr\\n' >&2; exit 78"
    ran = runner.run(archive=built[images.BUSYBOX_REF], command=["sh", "-c", script])
    assert (ran.code, ran.out, ran.err) == (78, f"65534\n{PLANTED}\n", "to stderr\n"), ran


def test_pause_sleeps_until_terminated(built: dict[str, Path], runner: Runner) -> None:
    config = images.archive_config(built[images.PAUSE_REF])["config"]
    assert config["User"] == images.PAUSE_USER
    state = ["runc", "--root", str(runner.state / "runc")]
    with runner.bundle(archive=built[images.PAUSE_REF], command=None, writable=()) as (bundle, name):
        process = subprocess.Popen(
            [*state, "run", "--bundle", str(bundle), name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 30
            while b'"running"' not in subprocess.run([*state, "state", name], capture_output=True).stdout:
                assert process.poll() is None and time.monotonic() < deadline, process.communicate()
                time.sleep(0.05)
            time.sleep(0.5)
            assert process.poll() is None, "pause exited by itself"
            subprocess.run([*state, "kill", name, "TERM"], check=True)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                subprocess.run([*state, "kill", name, "KILL"], check=False)
                process.wait(timeout=10)
            process.communicate()


def test_redis_serves_with_the_charts_arguments(built: dict[str, Path], runner: Runner) -> None:
    config = images.archive_config(built[images.REDIS_REF])["config"]
    assert config["User"] == images.REDIS_USER == "999:999"
    assert set(config["ExposedPorts"]) == {"6379/tcp"}
    # The chart's command and arguments (templates/redis.yaml), on a unix socket: the runtime's
    # network namespace has no address to listen on.
    script = (
        "redis-server --dir /data --appendonly yes --save '' --requirepass secret "
        "--port 0 --unixsocket /tmp/redis.sock --daemonize yes >/dev/null"
        " && for i in $(seq 100); do [ -S /tmp/redis.sock ] && break; sleep 0.05; done"
        " && cli='redis-cli -s /tmp/redis.sock -a secret --no-auth-warning'"
        " && $cli set proof stored >/dev/null && $cli get proof && id -u && ls /data"
        " && $cli shutdown >/dev/null 2>&1; true"
    )
    ran = runner.run(
        archive=built[images.REDIS_REF], command=["sh", "-c", script], writable=("/tmp", "/data")
    )
    assert ran.code == 0, ran
    assert ran.out.split() == ["stored", "999", "appendonlydir"], ran


def test_debian_sources_are_the_hosts_entries_for_the_suite(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# a comment\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib\n"
        "deb-src http://mirror.example/debian bookworm main\n"
        "deb http://mirror.example/debian trixie main  # another suite\n"
    )
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n"
        "# http://snapshot.example/archive/debian/20250520T000000Z\n"
        "URIs: http://deb.example/debian\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        "\n"
        "Types: deb\n"
        "URIs: http://deb.example/debian-security\n"
        "Suites: bookworm-security\n"
        "Components: main\n"
        "\n"
        "Types: deb\n"
        "URIs: http://off.example/debian\n"
        "Suites: bookworm\n"
        "Enabled: no\n"
    )
    (tmp_path / "sources.list.d" / "vendor.sources").write_text(
        "Types: deb\nURIs: https://vendor.example/apt\nSuites: nodistro\nComponents: main\n"
    )
    (tmp_path / "sources.list.d" / "old.list.disabled").write_text("deb http://old.example bookworm main\n")
    keyring = "[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]"
    assert images.debian_sources(suite="bookworm", apt_dir=tmp_path) == [
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib",
        f"deb {keyring} http://deb.example/debian bookworm main",
        f"deb {keyring} http://deb.example/debian bookworm-updates main",
        "deb http://deb.example/debian-security bookworm-security main",
    ]
    assert images.debian_sources(suite="bullseye", apt_dir=tmp_path) == []


def test_operator_wheels_come_from_the_lock_files() -> None:
    assert [p.name for p in images.operator_locks(repo=images.REPO_ROOT)] == [locks.LOCK, locks.BUILD_LOCK]
    assert set(images.LOCKS) <= set(images.CONTEXT_FILES)


def test_operator_sbom_lists_what_the_lock_pins(built: dict[str, Path]) -> None:
    """The SBOM made with the image, from its venv's dist-info: the runtime dependencies at the
    lock's versions, as PyPI package URLs, and no pip or setuptools (the Dockerfile removes them)."""
    sbom = json.loads(images.operator_sbom(built[images.OPERATOR_REF]).read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    assert sbom["metadata"]["component"]["name"] == "agentihooks-swarm"
    found = {str(canonicalize_name(c["name"])): c for c in sbom["components"]}
    pinned = locks.pins((images.REPO_ROOT / locks.LOCK).read_text())
    for name in ("kopf", "kubernetes-asyncio", "redis", "pydantic", "prometheus-client"):
        assert found[name]["version"] == pinned[name].version, (name, found.get(name))
        assert found[name]["purl"] == f"pkg:pypi/{name}@{pinned[name].version}", found[name]
    # Everything the lock pins is in the image at its version, and nothing else but the package.
    assert {n: c["version"] for n, c in found.items() if n != "agentihooks-swarm"} == {
        n: p.version for n, p in pinned.items()
    }
