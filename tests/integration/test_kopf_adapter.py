"""kopf, run the way the operator runs it (kopf_adapter.Operator: its own thread and loop), against
the real API server: it logs in, its event handlers on our registry get ``type``, ``body`` and
``namespace``, it stops when asked, and the tasks of the operator's loop are left running."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import kopf
from kubernetes_asyncio import client, client as k8s, config as k8s_config

from agentihooks_swarm import kopf_adapter
from tests.support import builders
from tests.support.cluster import ControlPlane


async def credentials(kubeconfig: Path) -> k8s.Configuration:
    loaded = k8s.Configuration()
    await k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=loaded)
    return loaded


async def test_kopf_hands_events_to_our_registry_and_stops_on_its_flag(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    swarm_crds: list[str],
) -> None:
    await client.CustomObjectsApi(admin_api).create_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, "swarms", builders.swarm(name="s", namespace=namespace)
    )
    registry = kopf_adapter.registry(credentials=lambda: credentials(control_plane.token_kubeconfig))
    seen: list[dict[str, Any]] = []
    arrived = asyncio.Event()

    loop = asyncio.get_running_loop()

    @kopf.on.event("swarm.agentihooks.io", "v1alpha1", "swarms", registry=registry)
    async def changed(type: str | None, body: Any, namespace: str | None, **_: Any) -> None:
        seen.append({"type": type, "name": body["metadata"]["name"], "namespace": namespace})
        loop.call_soon_threadsafe(arrived.set)  # kopf runs in its own thread and loop.

    ours = asyncio.create_task(asyncio.sleep(3600), name="the operator's own")
    operator = kopf_adapter.Operator(
        registry=registry, settings=kopf_adapter.settings(), namespaces=[namespace]
    )
    running = asyncio.create_task(operator.run())
    try:
        await asyncio.wait_for(arrived.wait(), timeout=30)
        assert seen[0]["name"] == "s" and seen[0]["namespace"] == namespace
        assert set(seen[0]) == {"type", "name", "namespace"}
        operator.stop()
        await asyncio.wait_for(running, timeout=30)  # Returns: asked to stop, not a failure.
        assert not ours.done()
        assert not [t for t in threading.enumerate() if t.name == "kopf"]
    finally:
        operator.stop()
        ours.cancel()
        await asyncio.gather(ours, running, return_exceptions=True)
