"""Images pinned by digest (docs/security.md, "Supply chain"): the operator's image (controller and
records reader) and the bundled Redis's accept ``digest``; set, every Pod names
``repository@digest``; empty (the default), ``repository:tag``. The schema takes only a sha256."""

from __future__ import annotations

from typing import Any, Final

import pytest
import yaml

from tests.chart.conftest import CHART_DIR, RELEASE, Chart, Object, Rendered, RenderError

APP_VERSION: Final = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["appVersion"]
#: A well-formed digest made up for the test (no registry is asked: helm only renders it).
DIGEST: Final = "sha256:" + "0123456789abcdef" * 4


def _images(rendered: Rendered, kind: str, name: str) -> list[str]:
    """The image of every container and init container of a workload, in order."""
    spec: Object = rendered.one(kind, name)["spec"]["template"]["spec"]
    return [c["image"] for c in [*spec.get("initContainers", []), *spec["containers"]]]


def _operator_images(rendered: Rendered) -> list[str]:
    return [
        *_images(rendered, "Deployment", f"{RELEASE}-controller"),
        *_images(rendered, "StatefulSet", f"{RELEASE}-records"),
    ]


def test_defaults_are_tags(chart: Chart) -> None:
    rendered = chart.render()
    operator = _operator_images(rendered)
    assert operator and set(operator) == {f"ghcr.io/agentihooks/agentihooks-swarm:{APP_VERSION}"}
    assert _images(rendered, "StatefulSet", f"{RELEASE}-redis") == ["redis:7-alpine", "redis:7-alpine"]


def test_a_digest_pins_the_operator_image(chart: Chart) -> None:
    values = {"image": {"repository": "registry.local/swarm", "tag": "dev", "digest": DIGEST}}
    rendered = chart.render(values)
    assert set(_operator_images(rendered)) == {f"registry.local/swarm@{DIGEST}"}
    # The Redis image keeps its own setting.
    assert set(_images(rendered, "StatefulSet", f"{RELEASE}-redis")) == {"redis:7-alpine"}


def test_a_digest_pins_the_bundled_redis(chart: Chart) -> None:
    rendered = chart.render({"redis": {"bundled": {"image": {"digest": DIGEST}}}})
    assert _images(rendered, "StatefulSet", f"{RELEASE}-redis") == [f"redis@{DIGEST}"] * 2
    assert set(_operator_images(rendered)) == {f"ghcr.io/agentihooks/agentihooks-swarm:{APP_VERSION}"}


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"image": {"digest": "0123456789abcdef"}}, "/image/digest"),
        ({"image": {"digest": "sha256:XYZ"}}, "/image/digest"),
        ({"redis": {"bundled": {"image": {"digest": "latest"}}}}, "/redis/bundled/image/digest"),
    ],
)
def test_the_schema_takes_only_a_sha256_digest(chart: Chart, values: dict[str, Any], where: str) -> None:
    with pytest.raises(RenderError) as refused:
        chart.render(values)
    assert f"at '{where}" in str(refused.value)
