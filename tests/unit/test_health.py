"""The probes (health.py): /healthz fails once a task was given up, /readyz until every watch has
listed once; each answer says which."""

from __future__ import annotations

import aiohttp

from agentihooks_swarm import health


async def test_the_probes_answer_what_the_operator_says() -> None:
    problems: dict[str, object] = {}
    synced = {"executions": False, "pod events": True}
    async with (
        health.serving(host="127.0.0.1", port=0, healthy=lambda: problems, ready=lambda: synced) as port,
        aiohttp.ClientSession() as session,
    ):
        base = f"http://127.0.0.1:{port}"
        async with session.get(f"{base}/healthz") as answer:
            assert answer.status == 200 and await answer.json() == {"ok": True}
        async with session.get(f"{base}/readyz") as answer:
            assert answer.status == 503
            assert await answer.json() == {"ok": False, "synced": {"executions": False, "pod events": True}}
        synced["executions"] = True
        async with session.get(f"{base}/readyz") as answer:
            assert answer.status == 200
        problems["given_up"] = "watch executions"
        async with session.get(f"{base}/healthz") as answer:
            assert answer.status == 500
            assert await answer.json() == {"ok": False, "given_up": "watch executions"}
