"""``/healthz`` and ``/readyz`` for the kubelet's probes.

* ``/healthz`` (liveness) answers 500 once the supervisor has given up a task (see
  :mod:`supervisor`): the process is about to stop, and Kubernetes restarts the Pod.
* ``/readyz`` (readiness) answers 503 until every watch has listed its objects once (the
  Executions, the Pods' Events): before that, this replica's view of the cluster is partial.

Both answer a JSON body that says which task or watch is the matter.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping

from aiohttp import web

logger = logging.getLogger(__name__)


def _answer(ok: bool, body: Mapping[str, object], *, failing: int) -> web.Response:
    return web.Response(
        status=200 if ok else failing, text=json.dumps(body, sort_keys=True), content_type="application/json"
    )


@contextlib.asynccontextmanager
async def serving(
    *,
    host: str,
    port: int,
    healthy: Callable[[], Mapping[str, object]],
    ready: Callable[[], Mapping[str, bool]],
) -> AsyncIterator[int]:
    """Serve the probes on ``host:port`` (0: any free port, yielded) while the block runs.

    ``healthy()`` is empty when all is well, else says what is wrong; ``ready()`` maps each watch
    to whether it has synced.
    """

    async def healthz(request: web.Request) -> web.Response:
        problems = healthy()
        return _answer(not problems, {"ok": not problems, **problems}, failing=500)

    async def readyz(request: web.Request) -> web.Response:
        watches = dict(ready())
        ok = all(watches.values())
        return _answer(ok, {"ok": ok, "synced": watches}, failing=503)

    app = web.Application()
    app.add_routes([web.get("/healthz", healthz), web.get("/readyz", readyz)])
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host=host, port=port, reuse_address=True)
    await site.start()
    bound = int(runner.addresses[0][1]) if runner.addresses else port
    logger.info("Probes served on %s:%d (/healthz, /readyz).", host, bound)
    try:
        yield bound
    finally:
        await runner.cleanup()
