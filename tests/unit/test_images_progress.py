"""The image builder's progress (tests/support/images.py): silent when every image is cached, one
line per image it builds, and a failed tool's output in the error. The tools here are stand-ins
that fail, so nothing is built: the real builds are tests/images'."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import images


@pytest.fixture
def failing_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """mmdebstrap, buildah and runc on PATH, each printing a line and exiting 1."""
    folder = tmp_path / "tools"
    folder.mkdir()
    for tool in images.TOOLS:
        script = folder / tool
        script.write_text(f"#!/bin/sh\necho '{tool} was asked to work' >&2\nexit 1\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    yield folder


def cached(cache: Path, *, sources: list[str], skip: str = "") -> dict[str, Path]:
    """Cache entries for every image but ``skip``, where the builders look for them."""
    busybox = images._busybox_key(sources=sources, ref=images.BUSYBOX_REF, pause_ref=images.PAUSE_REF)
    entries = {
        "busybox": cache / f"busybox-{busybox}" / "busybox.tar",
        "operator": cache
        / f"operator-{images._operator_key(repo=images.REPO_ROOT, sources=sources, ref=images.OPERATOR_REF)}"
        / "image.tar",
        "redis": cache / f"redis-{images._redis_key(sources=sources, ref=images.REDIS_REF)}" / "image.tar",
    }
    for name, path in entries.items():
        if name != skip:
            path.parent.mkdir(parents=True)
            path.write_bytes(b"")
            if name == "busybox":
                path.with_name("pause.tar").write_bytes(b"")
    return entries


def test_a_warm_cache_prints_nothing_and_runs_no_tool(failing_tools: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    entries = cached(cache, sources=images.debian_sources())
    out = io.StringIO()
    built = images.all_images(cache=cache, out=out)
    assert out.getvalue() == ""
    assert built == {
        images.OPERATOR_REF: entries["operator"],
        images.BUSYBOX_REF: entries["busybox"],
        images.PAUSE_REF: entries["busybox"].with_name("pause.tar"),
        images.REDIS_REF: entries["redis"],
    }
    assert not images.build_log(cache).exists()


def test_a_missing_image_is_one_stage_and_its_failure_shows_the_tools_output(
    failing_tools: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    cached(cache, sources=images.debian_sources(), skip="redis")
    out = io.StringIO()
    with pytest.raises(images.ImageError) as raised:
        images.all_images(cache=cache, out=out)
    log = images.build_log(cache)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("images: building the real node's images") and str(log) in lines[0]
    assert re.fullmatch(r"\[1/1\] redis image \.\.\. failed after \d+\.\ds", lines[1])
    assert len(lines) == 2
    assert "mmdebstrap" in str(raised.value) and "exited 1" in str(raised.value)
    assert "mmdebstrap was asked to work" in str(raised.value)  # the log's tail, in the error
