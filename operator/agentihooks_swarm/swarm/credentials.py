"""A swarm's worker credential: the Redis user its workers report as, and the Secret that carries it.

Each Swarm gets a Redis ACL user (:mod:`agentihooks_swarm.storage.acl`: it may write this swarm's
heartbeats and outcomes and nothing else) and a Secret ``swarm-worker-redis-<swarm>`` in its
namespace, owned by the Swarm (by UID, so it goes with it), with the keys a worker reads
(:mod:`agentihooks_swarm.worker.credential`): ``url``, ``username``, ``password``, ``prefix``,
``mode`` (and ``sentinels``, ``sentinel-master``, ``ca.crt`` when they apply). Every worker Pod
mounts it (optional: a Pod never waits for it).

When (docs/workers.md says the same):

* **Before a launch** (:meth:`WorkerCredentials.ensure`): the Secret exists and Redis has the user
  before the worker Pod is created; done once per swarm per interval, not on every launch.
* **Every pass** of the leader (``WORKER_CREDENTIALS_INTERVAL_SECONDS``) and **at once after a new
  Redis primary** (:class:`agentihooks_swarm.storage.failover.PrimaryWatch` tells it): users are per
  server and not replicated, and a Redis restarted without an ``aclfile`` has lost them, so each is
  stated again from its Secret, which is the one place the password lives.
* **Rotation** (``WORKER_CREDENTIALS_ROTATION_SECONDS``): Redis first accepts both the new and the
  old password, then the Secret gets the new one (the kubelet updates mounted Secrets in place, and
  each worker command reads the files again); the old one stays valid until the first pass at least
  one interval later, and is then dropped. A worker that keeps a connection open keeps it: Redis
  does not close an authenticated connection when a password goes.

Where Redis refuses ``ACL SETUSER`` (a managed Redis), an admin supplies the Secret, annotated
``swarm.agentihooks.io/supplied: "true"``: it is mounted as it is and never changed. The Swarm's
condition ``WorkerCredential`` says which case holds and, when workers get nothing, what to do;
a Warning Event says it when it turns false. The Secret's content and each pass's decision are
pure, in :mod:`.worker_secret`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets as secrets_
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from agentihooks_swarm import errors, metrics as metrics_
from agentihooks_swarm.kubernetes import custom, labels, posting, secrets
from agentihooks_swarm.lifecycle import events, status as status_
from agentihooks_swarm.storage import acl
from agentihooks_swarm.swarm import worker_secret

logger = logging.getLogger(__name__)

#: Swarms listed per request.
PAGE: Final = 200
#: How often a replica that does not lead asks whether it leads now.
FOLLOWER_SECONDS: Final = 1.0


class Slugs(Protocol):
    """Which namespace owns a slug (:class:`agentihooks_swarm.storage.slugs.Slugs`)."""

    async def claim(self, *, slug: str, namespace: str) -> str: ...


@dataclasses.dataclass(kw_only=True)
class WorkerCredentials:
    """Every Swarm's worker credential, made before launches and kept by the leader; see the module."""

    secrets: secrets.SecretClient
    swarms: custom.CustomClient
    events: posting.EventClient
    users: acl.WorkerUsers
    metrics: metrics_.Metrics
    content: worker_secret.Content
    #: Only the Swarm of the namespace that owns its slug gets the slug's user.
    slugs: Slugs
    #: The namespaces served (empty: every namespace).
    namespaces: tuple[str, ...]
    holds: Callable[[], bool]
    interval: float
    rotation_seconds: float
    instance: str
    #: The records reader's password (by digest), whose read-only user each pass makes again
    #: (docs/security.md); empty: an admin supplies that user, or there is none.
    reader_digests: tuple[str, ...] = ()
    #: The next pass after the reader's user could not be made comes this soon.
    reader_retry_seconds: float = 5.0
    clock: Callable[[], float] = time.time
    password: Callable[[], str] = dataclasses.field(default=lambda: secrets_.token_urlsafe(32))
    #: The swarms made lately by this process, by (namespace, name): their Swarm's UID and when.
    _fresh: dict[tuple[str, str], tuple[str, float]] = dataclasses.field(default_factory=dict)
    _locks: dict[tuple[str, str], asyncio.Lock] = dataclasses.field(default_factory=dict)
    #: The slugs whose users this process made: a Swarm gone from a whole listing loses its user.
    _made: set[str] = dataclasses.field(default_factory=set)
    _woken: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    #: The last pass could not make the reader's user.
    _reader_missing: bool = False

    # --- a launch ---------------------------------------------------------------------------------

    async def ensure(self, *, swarm: Mapping[str, Any]) -> str | None:
        """Before a launch: the Secret a worker Pod of ``swarm`` mounts (None: none to mount).

        Made at most once per interval per swarm by this process. Raises
        :class:`errors.ApiUnavailable`/:class:`errors.ApiTimeout`/:class:`errors.StoreUnavailable`
        (the launch waits and tries again); a refusal is a verdict, and the worker launches.
        """
        ref = worker_secret.SwarmRef.of(swarm)
        fresh = self._fresh.get((ref.namespace, ref.name))
        if fresh is not None and fresh[0] == ref.uid and self.clock() - fresh[1] < self.interval:
            return ref.secret
        verdict = await self.make(ref)
        return ref.secret if verdict.mounted else None

    # --- the leader's passes ----------------------------------------------------------------------

    def wake(self) -> None:
        """A new Redis primary: make every user again now (it may have none of them)."""
        self._fresh.clear()
        self._woken.set()

    async def run(self) -> None:
        """A pass at once, then every ``interval`` seconds or on :meth:`wake`, while leading.

        A replica that does not lead looks again every ``FOLLOWER_SECONDS``: once it leads, its
        first pass comes then, not an interval later (the records reader has no user until it).
        While the reader's user could not be made, the next pass comes after
        ``reader_retry_seconds``.
        """
        while True:
            leading = self.holds()
            wait = self.interval if leading else min(self.interval, FOLLOWER_SECONDS)
            if leading:
                await self.refresh_all()
                if self._reader_missing:  # Redis not up yet (a fresh install): soon, not in minutes.
                    wait = min(self.interval, self.reader_retry_seconds)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), timeout=wait)
            self._woken.clear()

    async def refresh_all(self) -> None:
        """One pass over every Swarm; a Swarm gone from the whole listing loses its user. The records
        reader's user first: like the workers', a restarted Redis or a new primary has lost it."""
        await self.refresh_reader()
        seen: set[str] = set()
        try:
            async for page in self.swarms.served_pages(
                namespaces=self.namespaces, field_selector="", limit=PAGE
            ):
                for swarm in page.get("items") or []:
                    if not self.holds():
                        return
                    seen.add(worker_secret.SwarmRef.of(swarm).name)
                    await self.refresh(swarm)
        except errors.ApiError as e:
            logger.warning(
                "Could not list the Swarms for their worker credentials; the next pass retries: %s", e
            )
            return
        for slug in sorted(self._made - seen):
            try:
                await self.users.drop(slug=slug)
            except (errors.AclRefused, errors.StoreUnavailable) as e:
                logger.warning(
                    "Could not remove the worker user of swarm %s (its Swarm is gone): %s", slug, e
                )
                continue
            self._made.discard(slug)

    async def refresh_reader(self) -> None:
        """Make the records reader's user again, when the operator has its password."""
        if not self.reader_digests:
            return
        try:
            await self.users.ensure_reader(digests=self.reader_digests)
        except errors.AclRefused as e:  # A verdict: the admin supplies the user (records.redisSecret).
            logger.warning("Redis refused to make the records reader's user; the next pass asks again: %s", e)
        except errors.StoreUnavailable as e:
            self._reader_missing = True
            logger.warning("Could not make the records reader's Redis user; retrying soon: %s", e)
        else:
            self._reader_missing = False

    async def refresh(self, swarm: Mapping[str, Any]) -> None:
        """One Swarm: make its credential again, and say on the Swarm what its workers get."""
        ref = worker_secret.SwarmRef.of(swarm)
        metadata = swarm.get("metadata") or {}
        if metadata.get("deletionTimestamp") or not ref.uid:
            return
        try:
            if await self.slugs.claim(slug=ref.name, namespace=ref.namespace) != ref.namespace:
                return  # Another namespace's swarm of that name: its own Swarm says so (SlugInUse).
            verdict = await self.make(ref)
        except (errors.ApiError, errors.StoreUnavailable) as e:
            logger.warning(
                "Could not make the worker credential of swarm %s/%s: %s", ref.namespace, ref.name, e
            )
            return
        found = swarm.get("status")
        current: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        patch: dict[str, Any] = {}
        status_.set_condition(patch, current.get("conditions"), verdict.condition())
        if not patch:
            return
        try:
            await self.swarms.patch_status(namespace=ref.namespace, name=ref.name, uid=ref.uid, status=patch)
        except errors.ApiError as e:
            logger.warning(
                "Could not write the WorkerCredential condition of %s/%s: %s", ref.namespace, ref.name, e
            )
            return
        if not verdict.ready and not _was_false(current):
            notes = events.Collected()
            notes.warning(reason=verdict.reason, message=verdict.message)
            await events.post(
                client=self.events, involved=ref.involved(), notes=notes, instance=self.instance
            )

    # --- one swarm --------------------------------------------------------------------------------

    async def make(self, ref: worker_secret.SwarmRef) -> worker_secret.Verdict:
        """Make (or keep) ``ref``'s Secret and Redis user; the verdict for its condition."""
        lock = self._locks.setdefault((ref.namespace, ref.name), asyncio.Lock())
        async with lock:
            try:
                verdict = await self._make(ref)
            except errors.AclRefused as e:
                self.metrics.worker_credentials.labels(result="redis_refused").inc()
                verdict = worker_secret.redis_refused(ref, e)
            except (errors.ApiUnavailable, errors.ApiTimeout, errors.StoreUnavailable):
                self.metrics.worker_credentials.labels(result="failed").inc()
                raise
            except errors.ApiRefused as e:
                self.metrics.worker_credentials.labels(result="secret_refused").inc()
                verdict = worker_secret.secret_refused(ref, e)
            if not verdict.ready:
                logger.warning("Swarm %s/%s: %s", ref.namespace, ref.name, verdict.message)
            self._fresh[(ref.namespace, ref.name)] = (ref.uid, self.clock())
            return verdict

    async def _make(self, ref: worker_secret.SwarmRef) -> worker_secret.Verdict:
        user = acl.username(prefix=self.content.prefix, slug=ref.name)
        secret: Mapping[str, Any] | None = await self.secrets.read(namespace=ref.namespace, name=ref.secret)
        if secret is None:
            secret = await self._create(ref, user=user)
            if secret is None:
                return worker_secret.ready(ref, user=user)
        kind = worker_secret.kind_of(secret)
        if kind == "supplied":
            self.metrics.worker_credentials.labels(result="supplied").inc()
            return worker_secret.supplied(ref, secret)
        if kind == "foreign":
            self.metrics.worker_credentials.labels(result="not_ours").inc()
            return worker_secret.not_ours(ref)
        now = self.clock()
        decided = worker_secret.plan(
            secret,
            uid=ref.uid,
            now=now,
            rotation_seconds=self.rotation_seconds,
            interval_seconds=self.interval,
        )
        if decided.rotate:
            await self._rotate(ref, secret=secret, user=user, kept=decided.digests, now=now)
            return worker_secret.ready(ref, user=user)
        await self.users.ensure(slug=ref.name, digests=decided.digests)
        self._made.add(ref.name)
        if decided.forget_previous:
            await self._patch(ref, secret=secret, annotations={labels.PREVIOUS_DIGEST: None})
            self.metrics.worker_credentials.labels(result="previous_dropped").inc()
        else:
            self.metrics.worker_credentials.labels(result="kept").inc()
        return worker_secret.ready(ref, user=user)

    async def _create(self, ref: worker_secret.SwarmRef, *, user: str) -> Mapping[str, Any] | None:
        """A new Secret with a new password; None once made, or the Secret someone made meanwhile."""
        password = self.password()
        # Redis first: a Secret whose password Redis does not know would keep workers from falling
        # back to what they used before.
        await self.users.ensure(slug=ref.name, digests=[acl.digest(password)])
        self._made.add(ref.name)
        body = worker_secret.secret_body(
            swarm=ref, data=self.content.data(username=user, password=password), at=self.clock()
        )
        try:
            await self.secrets.create(namespace=ref.namespace, body=body)
        except errors.AlreadyExists:  # Its content wins: the caller states the user from it.
            found = await self.secrets.read(namespace=ref.namespace, name=ref.secret)
            if found is None:
                raise errors.ApiUnavailable(f"secret {ref.namespace}/{ref.secret} came and went") from None
            return found
        self.metrics.worker_credentials.labels(result="made").inc()
        logger.info(
            "Made the worker credential of swarm %s/%s (Redis user %s).", ref.namespace, ref.name, user
        )
        return None

    async def _rotate(
        self,
        ref: worker_secret.SwarmRef,
        *,
        secret: Mapping[str, Any],
        user: str,
        kept: tuple[str, ...],
        now: float,
    ) -> None:
        """A new password: Redis takes it beside the old one first, then the Secret gets it."""
        password = self.password()
        old = worker_secret.decoded(secret, "password")
        await self.users.ensure(slug=ref.name, digests=[acl.digest(password), *kept])
        self._made.add(ref.name)
        await self._patch(
            ref,
            secret=secret,
            annotations={
                labels.ROTATED_AT: worker_secret.timestamp(now),
                labels.PREVIOUS_DIGEST: acl.digest(old) if old else None,
            },
            data=self.content.data(username=user, password=password),
        )
        self.metrics.worker_credentials.labels(result="rotated").inc()
        logger.info("Rotated the worker password of swarm %s/%s.", ref.namespace, ref.name)

    async def _patch(
        self,
        ref: worker_secret.SwarmRef,
        *,
        secret: Mapping[str, Any],
        annotations: dict[str, str | None],
        data: dict[str, str] | None = None,
    ) -> None:
        """Patch the Secret as it was read (its resourceVersion), owned by this Swarm's life."""
        metadata = secret.get("metadata") or {}
        body: dict[str, Any] = {
            "metadata": {
                "resourceVersion": metadata.get("resourceVersion"),
                "annotations": annotations,
                "ownerReferences": [worker_secret.owner_reference(ref)],
            }
        }
        if data is not None:
            # Every key, so a key the operator no longer writes (ca.crt) is removed too.
            body["data"] = {**{k: None for k in secret.get("data") or {}}, **data}
        try:
            await self.secrets.patch(namespace=ref.namespace, name=ref.secret, body=body)
        except (
            errors.PreconditionFailed,
            errors.NotFound,
        ) as e:  # Changed since read: the next pass reads it.
            raise errors.ApiUnavailable(
                f"secret {ref.namespace}/{ref.secret} changed while patched: {e}"
            ) from e


def _was_false(status: Mapping[str, Any]) -> bool:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == worker_secret.CONDITION:
            return condition.get("status") == "False"
    return False
