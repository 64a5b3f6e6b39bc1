"""Container images for the real node, built offline from Debian's packages: no registry, no daemon.

The real node's containerd has no registry to pull from, so every image it runs is made here from
Debian's packages (fetched by ``mmdebstrap`` from the mirror the host's apt uses), assembled with
``buildah`` and written as a ``docker-archive`` tar for ``ctr -n k8s.io images import``:

* the operator, ``localhost/agentihooks-swarm:test``: the repository's ``Dockerfile``, built with
  ``buildah bud --pull=never --network=none`` on a Debian base with python3 (``mmdebstrap
  --variant=apt``) given as ``PYTHON_IMAGE``, with the wheels that pip downloaded on the host
  from the lock files (CPython 3.11, manylinux x86_64; hashes checked) in the build context's
  ``wheels/``; with it, ``sbom.cdx.json``, a CycloneDX SBOM of the Python packages the image's
  venv holds (:func:`image_sbom`);
* busybox, ``localhost/busybox:test``, from ``busybox-static`` (taken from the mirror with
  ``mmdebstrap --variant=extract``, so the host's own busybox package is left alone): real worker
  containers (``sh -c 'printf …; exit 78'``), user 65534 so that ``runAsNonRoot`` Pods accept it;
* pause, ``localhost/pause:test``: the sandbox image, the busybox layer sleeping until TERM;
* Redis, ``localhost/redis:test``, from ``redis-server``: the chart's bundled Redis (the chart
  runs ``redis-server`` with its own arguments as user 999, the image's user too).

Cache: ``~/.cache/agentihooks-swarm/images/<name>-<key>/`` (``AGENTIHOOKS_SWARM_CACHE`` moves the
root, as for the control plane's binaries). The key hashes every input (the Debian sources and
package lists, the Dockerfile and the files it copies, the lock files), so a warm call
only finds a file; the three most recently used entries of each image are kept (checkouts on one
machine share the cache). A Debian base from a moving mirror is kept until its inputs change:
delete the folder to refresh it.

buildah's storage is this module's own, ``images/buildah/`` under the cache (``--root storage``,
``--runroot run``), so the host's buildah images and tags are left alone; only the Debian base
stays in it between builds. Every working container made here is removed (``buildah rm``
unmounts it) before the function that made it returns, and each build starts and ends by
removing those a killed run left (on this storage only).

A build prints one line per image it builds (``[2/3] operator image ... 2m10s``) and sends the
tools' output to ``images/build.log`` under the cache, whose last lines a failure shows; a warm
call prints nothing.

Command line: ``python -m tests.tools.images`` builds what is missing and prints "REF TAR" per image.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import hashlib
import io
import json
import os
import secrets
import shlex
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from tests.support import locks, progress

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
SUITE: Final = "bookworm"
#: The wheels' target: the Debian base's Python (bookworm: 3.11) on x86_64 with glibc 2.36 (pip
#: takes a platform tag literally, so every manylinux tag up to glibc 2.36 is listed).
PYTHON_VERSION: Final = "3.11"
WHEEL_PLATFORMS: Final = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
#: The hashed lock files the Dockerfile installs from (``make lock``, :mod:`tests.tools.lock`):
#: resolved for the target (CPython 3.11 on Linux), so they already hold what only the target
#: needs (redis's async-timeout below Python 3.11.3; bookworm has 3.11.2), with no marker for
#: the host's pip to drop. The wheels are downloaded from them, hashes checked.
LOCKS: Final = (locks.LOCK, locks.BUILD_LOCK)

OPERATOR_REF: Final = "localhost/agentihooks-swarm:test"
#: The operator image's CycloneDX SBOM, next to its archive in the cache entry.
SBOM: Final = "sbom.cdx.json"
#: The Dockerfile's venv, which holds every Python package the image runs.
IMAGE_VENV: Final = "opt/agentihooks-swarm"
BUSYBOX_REF: Final = "localhost/busybox:test"
PAUSE_REF: Final = "localhost/pause:test"
REDIS_REF: Final = "localhost/redis:test"
#: The user of the worker image (``nobody``), of the pause image (upstream pause's) and of Redis
#: (the chart's ``redis.bundled.runAsUser``).
BUSYBOX_USER: Final = "65534:65534"
PAUSE_USER: Final = "65535:65535"
REDIS_USER: Final = "999:999"

#: Debian packages this module runs, by the command each provides.
TOOLS: Final = {"mmdebstrap": "mmdebstrap", "buildah": "buildah", "runc": "runc"}
#: Files of the repository the Dockerfile's build context holds (see .dockerignore).
CONTEXT_FILES: Final = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", *LOCKS)
CONTEXT_TREES: Final = ("operator",)
_IGNORED: Final = ("__pycache__", "*.pyc", "*.egg-info")

_PATH: Final = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_APT_TIMEOUT_SECONDS: Final = 900.0
_STEP_TIMEOUT_SECONDS: Final = 1200.0
#: Working containers are named for the process that made them, so a sweep can tell a killed
#: run's leftovers from a live one's.
_OWNED: Final = "agentihooks-swarm-"
_BASE_NAME: Final = "localhost/agentihooks-swarm-base"
#: Cache entries kept per image (the newest by last use).
_KEEP: Final = 3
#: No documentation, manual pages or translations in the images (copyright files stay).
_DPKG_SLIM: Final = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
)
#: bookworm's essential set resolves init-system-helpers' "usrmerge | usr-is-merged" to usrmerge,
#: which pulls in perl (about 50 MB); usr-is-merged (included) keeps the dependency satisfied.
_PURGE_PERL: Final = (
    'chroot "$1" dpkg --purge usrmerge libfile-find-rule-perl libnumber-compare-perl '
    "libtext-glob-perl perl libperl5.36 perl-modules-5.36 >/dev/null"
)
#: The pause image's process: PID 1 with a TERM/INT trap, so a stop ends it at once.
_PAUSE_SCRIPT: Final = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"
_BASE_PACKAGES: Final = ("python3", "python3-venv", "ca-certificates", "usr-is-merged")
_REDIS_PACKAGES: Final = ("redis-server", "usr-is-merged")
_REDIS_MAKE_DATA: Final = f'mkdir -p "$1/data" && chown {REDIS_USER} "$1/data" && chmod 0770 "$1/data"'
_REDIS_CONFIG: Final = (
    f"--user={REDIS_USER}",
    "--workingdir=/data",
    "--port=6379/tcp",
    '--cmd=["redis-server", "--dir", "/data"]',
)


class ImageError(progress.StageFailed):
    """An image could not be built: a tool is missing, or a build step failed (the message has
    the end of the build log, so a progress stage does not print it again)."""


# --------------------------------------------------------------------------------------------
# Inputs: cache, tools, the host's Debian sources


def cache_root() -> Path:
    """``${AGENTIHOOKS_SWARM_CACHE:-~/.cache/agentihooks-swarm}/images``."""
    root = os.environ.get("AGENTIHOOKS_SWARM_CACHE") or str(Path.home() / ".cache" / "agentihooks-swarm")
    return Path(root) / "images"


def missing_tools(*, tools: Mapping[str, str] = TOOLS) -> list[str]:
    """The Debian packages of the commands in ``tools`` that are not on PATH."""
    return sorted({package for command, package in tools.items() if shutil.which(command) is None})


def ensure_tools(*, tools: Mapping[str, str] = TOOLS, log: Path | None = None) -> None:
    """Install the Debian packages of the commands that are missing (needs root and apt-get)."""
    missing = missing_tools(tools=tools)
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise ImageError(
            f"the real node's images are built with {', '.join(missing)}, which are not installed: run "
            f"'sudo apt-get install {' '.join(missing)}' (or 'make system-deps' as root), then run this again"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", *missing]):
        _run(command, env=env, timeout=_APT_TIMEOUT_SECONDS, log=log)


def buildah_works() -> bool:
    """Whether this process can build and run images here: root, with buildah or apt-get."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    return shutil.which("buildah") is not None or shutil.which("apt-get") is not None


def debian_sources(*, suite: str = SUITE, apt_dir: Path = Path("/etc/apt")) -> list[str]:
    """The host's apt sources for ``suite`` and its ``suite-*`` siblings, as one-line entries.

    Read from ``sources.list`` and ``sources.list.d/*.list`` / ``*.sources`` (deb822); an empty
    list lets mmdebstrap use its default mirror (it adds updates and security for stable).
    """
    entries: list[str] = []
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in files:
        if path.is_file():
            entries += [e for e in _one_line_entries(path.read_text()) if _for_suite(e, suite)]
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        entries += [e for e in _deb822_entries(path.read_text()) if _for_suite(e, suite)]
    return list(dict.fromkeys(entries))


def _one_line_entries(text: str) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [" ".join(line.split()) for line in lines if line.startswith("deb ")]


def _deb822_entries(text: str) -> list[str]:
    entries: list[str] = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            name, value = line.split(":", 1)
            fields[name.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
            continue
        options = f"[signed-by={fields['signed-by']}] " if fields.get("signed-by", "").startswith("/") else ""
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                entries.append(f"deb {options}{uri} {suite} {fields.get('components', 'main')}".strip())
    return entries


def _for_suite(entry: str, suite: str) -> bool:
    words = entry.split()
    if len(words) > 1 and words[1].startswith("["):
        while words and not words[1].endswith("]"):
            del words[1]
        del words[1]
    return len(words) > 2 and (words[2] == suite or words[2].startswith(f"{suite}-"))


def _key(inputs: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def _tree_digest(root: Path, names: Sequence[str], trees: Sequence[str]) -> str:
    """One digest of the named files and of every file under the named trees (paths and bytes)."""
    digest = hashlib.sha256()
    paths = [root / name for name in names]
    for tree in trees:
        paths += sorted(p for p in (root / tree).rglob("*") if p.is_file() and not _ignored(p))
    for path in paths:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _ignored(path: Path) -> bool:
    return any(fnmatch.fnmatch(part, pattern) for part in path.parts for pattern in _IGNORED)


# --------------------------------------------------------------------------------------------
# Processes: commands, buildah with this module's storage


def build_log(cache: Path) -> Path:
    """Where the tools' output goes: ``build.log`` in the cache (one build at a time holds it)."""
    return cache / "build.log"


def _run(
    argv: Sequence[str],
    *,
    log: Path | None,
    env: Mapping[str, str] | None = None,
    timeout: float = _STEP_TIMEOUT_SECONDS,
    cwd: Path | None = None,
) -> str:
    """Run a tool with its output in ``log``; its stdout is returned, a failure (with the log's
    last lines) raised as :class:`ImageError`."""
    try:
        return progress.run(argv, log=log, env=env, cwd=cwd, timeout=timeout)
    except progress.StageFailed as error:
        raise ImageError(str(error)) from error


def buildah(*args: str, cache: Path, timeout: float = _STEP_TIMEOUT_SECONDS) -> str:
    """Run buildah on this module's storage (``cache/buildah/storage``) and return its stdout."""
    storage = ["--root", str(cache / "buildah" / "storage"), "--runroot", str(cache / "buildah" / "run")]
    return _run(["buildah", *storage, *args], timeout=timeout, log=build_log(cache)).strip()


@contextlib.contextmanager
def working_container(*, image: str, cache: Path) -> Iterator[str]:
    """A buildah working container from ``image`` (or ``scratch``), removed (and unmounted) after."""
    owned = f"{_OWNED}{os.getpid()}-{secrets.token_hex(4)}"
    name = buildah("from", "--pull=never", "--quiet", f"--name={owned}", image, cache=cache)
    try:
        yield name
    finally:
        buildah("rm", name, cache=cache)


def _in_store(ref: str, *, cache: Path) -> bool:
    try:
        buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", ref, cache=cache)
    except ImageError:
        return False
    return True


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One build at a time per cache (two test sessions may start together)."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def _entry(cache: Path, name: str, key: str, product: str) -> Iterator[tuple[Path, Path | None]]:
    """(final path, partial folder to fill or None when cached). The folder becomes the entry when
    the body succeeds. An entry's time is its last use; the newest few of each name are kept (one
    per checkout that shares the cache, typically), older ones are removed after a build."""
    final = cache / f"{name}-{key}"
    if (final / product).exists():
        os.utime(final)
        yield final / product, None
        return
    partial = cache / f"{name}-{key}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    _sweep(cache=cache)
    try:
        yield final / product, partial
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
        _sweep(cache=cache)
    entries = [p for p in cache.glob(f"{name}-*") if ".partial-" not in p.name]
    for old in sorted(entries, key=lambda p: p.stat().st_mtime, reverse=True)[_KEEP:]:
        shutil.rmtree(old, ignore_errors=True)


def _sweep(*, cache: Path) -> None:
    """Remove the working containers a killed run left: those named for a process that is gone,
    and unnamed ones (``buildah bud``'s, which run only under the cache's lock, held here)."""
    if not (cache / "buildah" / "storage").exists():
        return
    listed = buildah("containers", "--all", "--format", "{{.ContainerID}} {{.ContainerName}}", cache=cache)
    for line in listed.splitlines():
        container, _, name = line.partition(" ")
        owner = name.removeprefix(_OWNED).split("-", 1)[0] if name.startswith(_OWNED) else ""
        if not (owner.isdigit() and Path(f"/proc/{owner}").exists()):
            buildah("rm", container, cache=cache)


def _mmdebstrap(
    *,
    out: Path,
    variant: str,
    packages: Sequence[str],
    sources: Sequence[str],
    hooks: Sequence[str],
    log: Path,
) -> None:
    argv = [
        "mmdebstrap",
        "--quiet",
        f"--variant={variant}",
        "--skip=output/dev",
        '--aptopt=APT::Install-Recommends "false"',
    ]
    if packages:
        argv.append(f"--include={','.join(packages)}")
    if variant != "extract":
        argv += [f"--dpkgopt={option}" for option in _DPKG_SLIM]
    argv += [f"--customize-hook={hook}" for hook in hooks]
    _run([*argv, SUITE, str(out), *sources], log=log)


def _commit_rootfs(
    *, rootfs: Path, ref: str, cache: Path, config: Sequence[str], run: Sequence[str] = ()
) -> None:
    """``ref`` in the store: the rootfs tar as one layer, ``run`` run in it, ``buildah config``."""
    with working_container(image="scratch", cache=cache) as container:
        buildah("add", "--quiet", container, str(rootfs), "/", cache=cache)
        if run:
            buildah("run", "--network=none", container, "--", *run, cache=cache)
        buildah("config", f"--env={_PATH}", *config, container, cache=cache)
        buildah("commit", "--quiet", container, ref, cache=cache)


def _archive(*, ref: str, out: Path, cache: Path, keep: bool = False) -> None:
    """Write ``ref`` as a docker-archive tar tagged ``ref``; drop it from the store unless ``keep``."""
    buildah("push", "--quiet", ref, f"docker-archive:{out}:{ref}", cache=cache)
    if not keep:
        buildah("rmi", ref, cache=cache)


# --------------------------------------------------------------------------------------------
# The images


def _built(cache: Path, name: str, key: str, product: str) -> bool:
    """Whether the cache has entry ``name-key`` (what :func:`_entry` would find)."""
    return (cache / f"{name}-{key}" / product).exists()


def _base_key(sources: Sequence[str]) -> str:
    return _key(
        {
            "suite": SUITE,
            "sources": list(sources),
            "packages": _BASE_PACKAGES,
            "slim": _DPKG_SLIM,
            "hook": _PURGE_PERL,
        }
    )


def debian_base(*, cache: Path, sources: Sequence[str]) -> str:
    """The Debian base with python3 (and its venv module) in buildah's store; returns its ref."""
    key = _base_key(sources)
    ref = f"{_BASE_NAME}:{key}"
    with _entry(cache, "debian-python", key, "rootfs.tar") as (rootfs, partial):
        if partial is not None:
            _mmdebstrap(
                out=partial / rootfs.name,
                variant="apt",
                packages=_BASE_PACKAGES,
                sources=sources,
                hooks=[_PURGE_PERL],
                log=build_log(cache),
            )
    if not _in_store(ref, cache=cache):
        _commit_rootfs(rootfs=rootfs, ref=ref, cache=cache, config=['--cmd=["python3"]'])
        # Bases whose cache entry is gone (superseded) leave the store too.
        listed = buildah("images", "--format", "{{.Name}}:{{.Tag}}", cache=cache)
        for old in listed.splitlines():
            name, _, tag = old.rpartition(":")
            if name == _BASE_NAME and not (cache / f"debian-python-{tag}").exists():
                with contextlib.suppress(ImageError):  # Still used by another build: kept.
                    buildah("rmi", old, cache=cache)
    return ref


def _wheels_key(locks: Sequence[Path]) -> str:
    return _key(
        {
            "locks": [hashlib.sha256(lock.read_bytes()).hexdigest() for lock in locks],
            "python": PYTHON_VERSION,
            "platforms": WHEEL_PLATFORMS,
        }
    )


def wheels(*, cache: Path, locks: Sequence[Path], pip: Sequence[str] = (sys.executable, "-m", "pip")) -> Path:
    """A folder of the wheels the lock files pin, for the base's CPython, each checked against
    the lock's hashes (the build checks them again)."""
    key = _wheels_key(locks)
    with _entry(cache, "wheels", key, "wheels") as (folder, partial):
        if partial is not None:
            for lock in locks:
                _run(
                    [
                        *pip,
                        "download",
                        "--quiet",
                        "--no-deps",
                        "--require-hashes",
                        "--only-binary=:all:",
                        *(f"--platform={platform}" for platform in WHEEL_PLATFORMS),
                        f"--python-version={PYTHON_VERSION}",
                        "--implementation=cp",
                        f"--abi=cp{PYTHON_VERSION.replace('.', '')}",
                        f"--dest={partial / folder.name}",
                        f"--requirement={lock}",
                    ],
                    log=build_log(cache),
                )
    return folder


def operator_locks(*, repo: Path) -> list[Path]:
    """The lock files the Dockerfile installs from: the runtime dependencies, the build backend."""
    return [repo / name for name in LOCKS]


def _operator_key(*, repo: Path, sources: Sequence[str], ref: str) -> str:
    return _key(
        {
            "base": f"{_BASE_NAME}:{_base_key(sources)}",
            "wheels": f"wheels-{_wheels_key(operator_locks(repo=repo))}",
            "context": _tree_digest(repo, CONTEXT_FILES, CONTEXT_TREES),
            "ref": ref,
        }
    )


def operator_image(*, repo: Path, cache: Path, sources: Sequence[str], ref: str = OPERATOR_REF) -> Path:
    """The repository's Dockerfile built offline on the Debian base; returns its docker-archive.
    The base and the wheels are made (or found) only when the image itself is not cached."""
    key = _operator_key(repo=repo, sources=sources, ref=ref)
    with _entry(cache, "operator", key, "image.tar") as (archive, partial):
        if partial is not None:
            base = debian_base(cache=cache, sources=sources)
            wheel_dir = wheels(cache=cache, locks=operator_locks(repo=repo))
            context = partial / "context"
            context.mkdir()
            for name in CONTEXT_FILES:
                shutil.copy2(repo / name, context / name)
            for tree in CONTEXT_TREES:
                shutil.copytree(repo / tree, context / tree, ignore=shutil.ignore_patterns(*_IGNORED))
            shutil.copytree(wheel_dir, context / "wheels")
            buildah(
                "bud",
                "--quiet",
                "--pull=never",
                "--network=none",
                f"--build-arg=PYTHON_IMAGE={base}",
                f"--tag={ref}",
                f"--file={context / 'Dockerfile'}",
                str(context),
                cache=cache,
            )
            shutil.rmtree(context)
            image_sbom(ref=ref, out=partial / SBOM, pyproject=repo / "pyproject.toml", cache=cache)
            _archive(ref=ref, out=partial / archive.name, cache=cache)
    return archive


def operator_sbom(archive: Path) -> Path:
    """The SBOM made with the operator image whose archive is ``archive``."""
    return archive.with_name(SBOM)


def image_sbom(*, ref: str, out: Path, pyproject: Path, cache: Path) -> None:
    """A CycloneDX SBOM (JSON) of the Python packages installed in ``ref``'s venv.

    Read from the image itself: its rootfs mounted by buildah, whose venv's dist-info
    ``cyclonedx-py environment`` lists. That command asks an interpreter for its ``sys.path``;
    the image's own python is for another root (and maybe another version than the host's), so a
    stand-in answers with the mounted venv's site-packages alone, the only place the image keeps
    Python packages (the venv does not see the base's)."""
    with working_container(image=ref, cache=cache) as container:
        rootfs = Path(buildah("mount", container, cache=cache))
        found = sorted((rootfs / IMAGE_VENV / "lib").glob("python3*/site-packages"))
        if len(found) != 1:
            raise ImageError(f"{ref}: expected one site-packages in /{IMAGE_VENV}/lib, found {found}")
        with tempfile.TemporaryDirectory(prefix="agentihooks-swarm-sbom-") as folder:
            interpreter = Path(folder) / "python"
            path = shlex.quote(json.dumps([str(found[0])]))
            interpreter.write_text(f"#!/bin/sh\nprintf '%s' {path}\n")
            interpreter.chmod(0o755)
            _run(
                [
                    sys.executable,
                    "-m",
                    "cyclonedx_py",
                    "environment",
                    f"--pyproject={pyproject}",
                    "--output-reproducible",
                    f"--output-file={out}",
                    str(interpreter),
                ],
                log=build_log(cache),
            )


def _busybox_key(*, sources: Sequence[str], ref: str, pause_ref: str) -> str:
    return _key(
        {
            "suite": SUITE,
            "sources": list(sources),
            "busybox": [ref, BUSYBOX_USER],
            "pause": [pause_ref, PAUSE_USER, _PAUSE_SCRIPT],
        }
    )


def busybox_image(
    *, cache: Path, sources: Sequence[str], ref: str = BUSYBOX_REF, pause_ref: str = PAUSE_REF
) -> tuple[Path, Path]:
    """Busybox (worker containers) and pause (the sandbox), one shared layer; their archives."""
    key = _busybox_key(sources=sources, ref=ref, pause_ref=pause_ref)
    with _entry(cache, "busybox", key, "busybox.tar") as (archive, partial):
        if partial is not None:
            extracted = partial / "extracted.tar"
            _mmdebstrap(
                out=extracted,
                variant="extract",
                packages=["busybox-static"],
                sources=sources,
                hooks=[],
                log=build_log(cache),
            )
            rootfs = partial / "rootfs.tar"
            _busybox_rootfs(extracted=extracted, out=rootfs)
            _commit_rootfs(
                rootfs=rootfs,
                ref=ref,
                cache=cache,
                config=[f"--user={BUSYBOX_USER}", '--cmd=["sh"]'],
                run=["/bin/busybox", "--install", "-s", "/bin"],
            )
            with working_container(image=ref, cache=cache) as container:
                buildah(
                    "config",
                    f"--user={PAUSE_USER}",
                    "--cmd=[]",
                    f"--entrypoint={json.dumps(['/bin/sh', '-c', _PAUSE_SCRIPT])}",
                    container,
                    cache=cache,
                )
                buildah("commit", "--quiet", container, pause_ref, cache=cache)
            _archive(ref=pause_ref, out=partial / "pause.tar", cache=cache)
            _archive(ref=ref, out=partial / archive.name, cache=cache)
            extracted.unlink()
            rootfs.unlink()
    return archive, archive.with_name("pause.tar")


def _busybox_rootfs(*, extracted: Path, out: Path) -> None:
    """Busybox and its copyright from the extracted package, with the folders and users a
    container expects (the applet links are made inside, by ``busybox --install``)."""
    wanted = ("./bin/busybox", "./usr/share/doc/busybox-static/copyright")
    with tarfile.open(extracted) as source, tarfile.open(out, "w") as target:
        folders = ("bin", "etc", "tmp", "usr", "usr/share", "usr/share/doc", "usr/share/doc/busybox-static")
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if folder == "tmp" else 0o755
            target.addfile(info)
        for member in source.getmembers():
            if member.name in wanted:
                data = source.extractfile(member)
                member.name = member.name.removeprefix("./")
                target.addfile(member, data)
        users = {
            "etc/passwd": "root:x:0:0:root:/root:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
            "etc/group": "root:x:0:\nnogroup:x:65534:\n",
        }
        for name, text in users.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(text), 0o644
            target.addfile(info, io.BytesIO(text.encode()))


def _redis_key(*, sources: Sequence[str], ref: str) -> str:
    return _key(
        {
            "suite": SUITE,
            "sources": list(sources),
            "packages": _REDIS_PACKAGES,
            "slim": _DPKG_SLIM,
            "hooks": [_PURGE_PERL, _REDIS_MAKE_DATA],
            "config": _REDIS_CONFIG,
            "ref": ref,
        }
    )


def redis_image(*, cache: Path, sources: Sequence[str], ref: str = REDIS_REF) -> Path:
    """redis-server from Debian's package on the essential set, user 999, data in /data."""
    key = _redis_key(sources=sources, ref=ref)
    with _entry(cache, "redis", key, "image.tar") as (archive, partial):
        if partial is not None:
            rootfs = partial / "rootfs.tar"
            _mmdebstrap(
                out=rootfs,
                variant="essential",
                packages=_REDIS_PACKAGES,
                sources=sources,
                hooks=[_PURGE_PERL, _REDIS_MAKE_DATA],
                log=build_log(cache),
            )
            _commit_rootfs(
                rootfs=rootfs,
                ref=ref,
                cache=cache,
                config=_REDIS_CONFIG,
            )
            rootfs.unlink()
            _archive(ref=ref, out=partial / archive.name, cache=cache)
    return archive


def all_images(
    *, repo: Path = REPO_ROOT, cache: Path | None = None, out: TextIO | None = sys.stderr
) -> dict[str, Path]:
    """Every image the real node runs, image ref → docker-archive tar (built when missing).

    Each image built is one progress line on ``out`` (``None``: silent); a warm call prints
    nothing."""
    cache = cache_root() if cache is None else cache
    with _locked(cache):
        sources = debian_sources()
        tools = missing_tools()
        todo = {
            "busybox": not _built(
                cache,
                "busybox",
                _busybox_key(sources=sources, ref=BUSYBOX_REF, pause_ref=PAUSE_REF),
                "busybox.tar",
            ),
            "operator": not _built(
                cache, "operator", _operator_key(repo=repo, sources=sources, ref=OPERATOR_REF), "image.tar"
            ),
            "redis": not _built(cache, "redis", _redis_key(sources=sources, ref=REDIS_REF), "image.tar"),
        }
        stages = sum(todo.values()) + bool(tools)
        steps = progress.Progress(log=build_log(cache), total=stages, out=out) if stages else None

        def stage(needed: bool, name: str) -> contextlib.AbstractContextManager[None]:
            return steps.stage(name) if steps is not None and needed else contextlib.nullcontext()

        if steps is not None:
            steps.say(
                "images: building the real node's images from Debian's packages (first run only: about"
                f" 6 min); details in {steps.log}"
            )
        with stage(bool(tools), f"install {' '.join(tools)}"):
            ensure_tools(log=build_log(cache))
        with stage(todo["busybox"], "busybox and pause images (mmdebstrap, buildah)"):
            busybox, pause = busybox_image(cache=cache, sources=sources)
        with stage(todo["operator"], "operator image (Debian base, wheels, the Dockerfile)"):
            operator = operator_image(repo=repo, cache=cache, sources=sources)
        with stage(todo["redis"], "redis image"):
            redis = redis_image(cache=cache, sources=sources)
        return {OPERATOR_REF: operator, BUSYBOX_REF: busybox, PAUSE_REF: pause, REDIS_REF: redis}


def archive_config(archive: Path) -> dict[str, Any]:
    """The image config (``config``: User, Entrypoint, Cmd, Env…) and ``RepoTags`` of a
    docker-archive, read from the tar itself."""
    with tarfile.open(archive) as tar:
        manifest = json.load(_member(tar, "manifest.json"))[0]
        config: dict[str, Any] = json.load(_member(tar, manifest["Config"]))
    config["RepoTags"] = manifest.get("RepoTags") or []
    return config


def _member(tar: tarfile.TarFile, name: str) -> io.BufferedReader:
    data = tar.extractfile(name)
    if data is None:
        raise ImageError(f"{tar.name!r} has no file {name}")
    return data  # type: ignore[return-value]
