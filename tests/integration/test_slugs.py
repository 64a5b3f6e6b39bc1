"""A swarm's name belongs to the first namespace that used it, on the real Redis: another
namespace is answered with the owner, and the name is released only by its owner once nothing of
it is left (``records release``)."""

from __future__ import annotations

import subprocess

import pytest

from agentihooks_swarm import records
from agentihooks_swarm.storage import operations
from tests.support import commands

pytestmark = pytest.mark.integration

SLUG = "shared-name"


def release(*, redis_url: str, namespace: str) -> subprocess.CompletedProcess[str]:
    return commands.records_release(slug=SLUG, namespace=namespace, redis_url=redis_url)


async def test_the_first_namespace_owns_a_name_until_it_releases_it_with_nothing_left(
    store: operations.AsyncStore, redis_url: str
) -> None:
    assert await store.slugs.claim(slug=SLUG, namespace="team-a") == "team-a"
    assert await store.slugs.claim(slug=SLUG, namespace="team-b") == "team-a"
    assert await store.slugs.claim(slug=SLUG, namespace="team-a") == "team-a"
    # Another swarm name is another claim.
    assert await store.slugs.claim(slug="other", namespace="team-b") == "team-b"

    owner = records.Owner(uid="uid-a", namespace="team-a", at="2026-12-04T00:00:00Z")
    assert await store.claim(slug=SLUG, execution="build-42", owner=owner) == owner

    not_owner = release(redis_url=redis_url, namespace="team-b")
    assert not_owner.returncode == 1
    assert "owned by namespace 'team-a'" in not_owner.stderr

    held = release(redis_url=redis_url, namespace="team-a")
    assert held.returncode == 1
    assert "still has records" in held.stderr and "execution-owners" in held.stderr
    assert await store.slugs.claim(slug=SLUG, namespace="team-b") == "team-a"

    # Once its records are forgotten (no API server here: --force does not ask it).
    forgotten = commands.records_forget(
        slug=SLUG, execution="build-42", redis_url=redis_url, kubeconfig=None, force=True
    )
    assert forgotten.returncode == 0, forgotten.stderr
    released = release(redis_url=redis_url, namespace="team-a")
    assert released.returncode == 0, released.stderr
    assert "Released swarm name" in released.stdout
    assert await store.slugs.claim(slug=SLUG, namespace="team-b") == "team-b"


async def test_a_name_is_claimed_with_its_slug_only_in_a_slug_the_namespace_owns(
    store: operations.AsyncStore,
) -> None:
    mine = records.Owner(uid="uid-a", namespace="team-a", at="2026-12-04T00:00:00Z")
    theirs = records.Owner(uid="uid-b", namespace="team-b", at="2026-12-04T00:01:00Z")
    # Nobody's slug: the slug and the name are claimed together, and a retried launch gets the same.
    for _ in range(2):
        assert await store.claim_in_slug(slug=SLUG, namespace="team-a", execution="e1", owner=mine) == mine
    assert await store.slugs.owner(slug=SLUG) == "team-a"
    assert await store.owner(slug=SLUG, execution="e1") == mine

    # Another namespace is told whose slug it is, and claims nothing, not even a new name.
    answer = await store.claim_in_slug(slug=SLUG, namespace="team-b", execution="e2", owner=theirs)
    assert answer == operations.OtherNamespace(namespace="team-a")
    assert await store.owner(slug=SLUG, execution="e2") is None

    # Within its own slug, a name another Execution claimed is answered with that one's claim,
    # and records without an owner with None, as store.claim answers.
    other = records.Owner(uid="uid-a2", namespace="team-a", at="2026-12-04T00:02:00Z")
    assert await store.claim_in_slug(slug=SLUG, namespace="team-a", execution="e1", owner=other) == mine
    await store.redis.hset(store.key(SLUG, "attempt-retained"), "old", "{}")
    assert await store.claim_in_slug(slug=SLUG, namespace="team-a", execution="old", owner=other) is None
    assert await store.owner(slug=SLUG, execution="old") is None
