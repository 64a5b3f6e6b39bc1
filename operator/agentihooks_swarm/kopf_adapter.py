"""Everything the operator takes from kopf, in one place.

kopf runs the Swarm handlers (:mod:`handlers`) and configures the process' logging; it is
started from the operator's own ``run`` (:mod:`__main__`) through its documented embedding API,
``kopf.operator(...)``, in a thread of its own (:class:`Operator`), in standalone mode: which
replica acts is decided by the operator's Lease (:mod:`controller.leadership`), never by kopf's
peering. The Executions' lifecycle does not run in kopf (see :mod:`lifecycle.step`); what remains relied on is
listed here, and each item has a test (``tests/unit/test_kopf_adapter.py``,
``tests/integration/test_kopf_adapter.py``) that fails if a kopf release changes it:

* ``kopf.operator`` takes a registry, settings, ``standalone``, the namespaces (or
  ``clusterwide``) and a ``stop_flag`` (a ``threading.Event``), runs in a thread that is not the
  main one (without signal handlers), and returns once that flag is set;
* handlers registered with ``registry=`` on ``kopf.on.event`` get ``type``, ``body`` and
  ``namespace`` as keyword arguments;
* a ``kopf.on.login`` handler's ``kopf.ConnectionInfo`` (server, CA, token or client
  certificate) is how kopf logs in;
* the finalizer kopf put on Executions when an earlier version of this operator ran their
  delete handler in kopf: ``OperatorSettings().persistence.finalizer``; Executions of that
  version still carry it, and the lifecycle releases it together with its own.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Final, Literal

import kopf
from kubernetes_asyncio import client as k8s

LogFormat = Literal["plain", "full", "json"]

_FORMATS: Final = {"plain": kopf.LogFormat.PLAIN, "full": kopf.LogFormat.FULL, "json": kopf.LogFormat.JSON}


Credentials = Callable[[], Awaitable[k8s.Configuration]]


def registry(*, credentials: Credentials) -> kopf.OperatorRegistry:
    """A registry of our own (not kopf's global default), filled by :func:`handlers.register`.

    kopf logs in with the operator's own credentials (``credentials``: kubernetes-asyncio's
    configuration, read anew on each login, as a rotated token needs): a registry made here has
    none of the login handlers that kopf's default registry guesses from what is installed.
    """
    made = kopf.OperatorRegistry()

    @kopf.on.login(registry=made)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return await connection(await credentials())

    return made


async def connection(configuration: k8s.Configuration) -> kopf.ConnectionInfo:
    """kopf's view of kubernetes-asyncio's credentials (as kopf's own async-client login maps them)."""
    found: Any = configuration.get_api_key_with_prefix("BearerToken")
    header = await found if inspect.isawaitable(found) else found
    scheme, _, token = str(header or "").rpartition(" ")
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


def settings() -> kopf.OperatorSettings:
    """kopf's settings for the operator's handlers (the Swarms')."""
    configured = kopf.OperatorSettings()
    # kopf's own Events about its handlers stay out of `kubectl describe` unless they are warnings;
    # the operator posts its own Events itself (events.py).
    configured.posting.level = logging.WARNING
    configured.watching.server_timeout = 300
    return configured


def legacy_finalizers() -> frozenset[str]:
    """The finalizer an earlier version's kopf delete handler put on Executions."""
    return frozenset({kopf.OperatorSettings().persistence.finalizer})


def configure_logging(*, verbose: bool, debug: bool, quiet: bool, log_format: LogFormat) -> None:
    """The process' logging, as ``kopf run`` sets it up (the chart's ``--log-format`` and ``--verbose``)."""
    kopf.configure(verbose=verbose, debug=debug, quiet=quiet, log_format=_FORMATS[log_format])


#: How long stopping waits for kopf's thread to finish.
STOP_SECONDS: Final = 15.0


class Operator:
    """kopf's operator for one registry, in a thread of its own with its own event loop.

    Its own loop keeps kopf's task bookkeeping apart from the operator's: kopf treats every task
    of its loop as its own (it cancels them when it stops), and the operator's supervised tasks,
    steps and connections must end in the operator's order, not kopf's. kopf does not install
    signal handlers outside the main thread: the operator's ``run`` handles SIGTERM and stops it.
    :meth:`run` is a supervised task (kopf failing is a failure to restart).
    """

    def __init__(
        self, *, registry: kopf.OperatorRegistry, settings: kopf.OperatorSettings, namespaces: Collection[str]
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.namespaces = list(namespaces)
        self._stopped = False
        self._flag = threading.Event()

    def stop(self) -> None:
        """Stop kopf for good (it does within a moment; :meth:`run` then returns)."""
        self._stopped = True
        self._flag.set()

    async def run(self) -> None:
        """kopf until :meth:`stop` (or until it fails: then this raises, and it may run again)."""
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        flag = self._flag = threading.Event()
        if self._stopped:
            return

        def report(error: BaseException | None) -> None:
            if finished.done():
                return
            if error is None:
                finished.set_result(None)
            else:
                finished.set_exception(error)

        def main() -> None:
            try:
                asyncio.run(self._operator(flag))
            except BaseException as e:  # Handed to the supervisor in the operator's loop.
                loop.call_soon_threadsafe(report, e)
            else:
                loop.call_soon_threadsafe(report, None)

        thread = threading.Thread(target=main, name="kopf", daemon=True)
        thread.start()
        try:
            await finished
        finally:
            flag.set()
            await asyncio.to_thread(thread.join, STOP_SECONDS)
        if not self._stopped:
            raise RuntimeError("kopf's operator stopped on its own")

    async def _operator(self, flag: threading.Event) -> None:
        await kopf.operator(
            registry=self.registry,
            settings=self.settings,
            standalone=True,
            clusterwide=not self.namespaces,
            namespaces=self.namespaces,
            stop_flag=flag,
        )
