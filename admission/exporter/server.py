"""The exporter's HTTP server (``/metrics``, ``/healthz``, ``/readyz``) and its wiring.

One asyncio process: uvicorn serves a small Starlette app; Kubernetes discovery runs in a daemon
thread; the retuner (if on) is a task on the same loop. ``build`` assembles the parts from
:class:`ExporterConfig`, so tests and the CLI share one path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from admission.exporter.discovery import DEFAULT_NAMESPACE_SELECTOR, KubeDiscovery
from admission.exporter.promapi import PrometheusSource
from admission.exporter.service import Exporter, ScrapeSettings
from admission.exporter.state import ExporterState
from admission.observations.targets import Target
from admission.retuner import Retuner, RetunerSettings
from admission.retuner.kube import KubeWriter
from admission.retuner.owners import OwnerResolver

logger = logging.getLogger("admission.exporter")

TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"


class ExporterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    host: str = "0.0.0.0"
    port: int = Field(default=9400, ge=0, le=65535)
    targets: list[Target] = Field(default_factory=list)
    discover: bool = False
    prometheus_url: str | None = None
    prometheus_selector: str = ""
    namespace_selector: str = DEFAULT_NAMESPACE_SELECTOR
    pod_selector: str | None = None
    resync_s: float = 60.0
    kubeconfig: str | None = None
    scrape: ScrapeSettings = ScrapeSettings()
    retuner: RetunerSettings = RetunerSettings()
    log_level: str = "info"


class Parts(BaseModel):
    """The running pieces (for tests and the app)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    exporter: Exporter
    discovery: KubeDiscovery | None = None
    retuner: Retuner | None = None


def build(config: ExporterConfig, *, core_api: Any = None, apps_api: Any = None) -> Parts:
    """Assemble exporter, discovery and retuner. Kubernetes clients are created only when needed."""
    state = ExporterState()
    discovery: KubeDiscovery | None = None
    if config.discover:
        if core_api is None:
            from admission import kubeapi

            kubeapi.load_config(config.kubeconfig)
            core_api, apps_api = kubeapi.core_api(), apps_api or kubeapi.apps_api()
        discovery = KubeDiscovery(
            core_api,
            namespace_selector=config.namespace_selector,
            pod_selector=config.pod_selector,
            resync_s=config.resync_s,
        )
        state.add_provider(discovery.families)
    static: Sequence[Target] = list(config.targets)
    provider = discovery.targets if discovery is not None else (lambda: static)
    prometheus = (
        PrometheusSource(config.prometheus_url, selector=config.prometheus_selector) if config.prometheus_url else None
    )
    source = "prometheus" if prometheus else ("kubernetes" if discovery else "static")
    exporter = Exporter(config.scrape, targets=provider, prometheus=prometheus, state=state, source=source)
    retuner: Retuner | None = None
    if config.retuner.mode != "off":
        writer: KubeWriter | None = None
        resolver: OwnerResolver | None = None
        if config.retuner.namespaces:
            # Writes only in the listed namespaces, to owners resolved through the API (never from a
            # pod's own labels or owner references).
            if core_api is None or apps_api is None:
                from admission import kubeapi

                kubeapi.load_config(config.kubeconfig)
                core_api, apps_api = core_api or kubeapi.core_api(), apps_api or kubeapi.apps_api()
            writer = KubeWriter(apps_api, core_api, config.retuner)
            resolver = OwnerResolver(core_api, apps_api, config.retuner.namespaces)
        else:
            logger.info("retuner: no --retune-namespaces, so no Events, annotations or rollouts (metrics only)")
        retuner = Retuner(config.retuner, writer=writer, resolver=resolver)
        state.add_provider(retuner.families)
    return Parts(exporter=exporter, discovery=discovery, retuner=retuner)


def create_app(parts: Parts) -> Starlette:
    exporter = parts.exporter

    async def metrics(request: Request) -> Response:
        budget = exporter.settings.budget(request.headers.get(TIMEOUT_HEADER))
        try:
            body, content_type = await exporter.render(budget, request.headers.get("accept"))
        except Exception:  # a bug here must not take the process down
            logger.exception("collection failed")
            return PlainTextResponse("collection failed; see the exporter's log\n", status_code=500)
        return Response(body, headers={"Content-Type": content_type})

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(_: Request) -> Response:
        if parts.discovery is not None and not parts.discovery.synced.is_set():
            return PlainTextResponse("waiting for the first pod list\n", status_code=503)
        return PlainTextResponse("ok\n")

    async def index(_: Request) -> Response:
        return PlainTextResponse("kv-planner exporter: /metrics /healthz /readyz\n")

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        stop = asyncio.Event()
        tasks: list[asyncio.Task[None]] = []
        if parts.discovery is not None:
            parts.discovery.start()
        if parts.retuner is not None:
            budget = exporter.settings.budget(None)
            tasks.append(asyncio.create_task(parts.retuner.run(exporter, stop, budget_s=budget)))
        try:
            yield
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if parts.discovery is not None:
                parts.discovery.stop()
            await exporter.aclose()

    return Starlette(
        routes=[Route("/metrics", metrics), Route("/healthz", healthz), Route("/readyz", readyz), Route("/", index)],
        lifespan=lifespan,
    )


def serve(config: ExporterConfig) -> None:
    import uvicorn

    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if config.log_level.lower() != "debug":
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per target per scrape is noise at scale
    parts = build(config)
    uvicorn.run(
        create_app(parts), host=config.host, port=config.port, log_level=config.log_level.lower(), access_log=False
    )


class RunningExporter:
    """The exporter app on 127.0.0.1 in a background thread (tests, benchmarks). A context manager."""

    def __init__(self, parts: Parts, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.parts = parts
        self.host = host
        self._port = port
        self.port = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> RunningExporter:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port))
        self.port = sock.getsockname()[1]
        self._socket = sock
        config = uvicorn.Config(create_app(self.parts), log_level="warning", access_log=False, lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name=f"exporter-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if self._error is not None or not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the exporter did not start: {self._error}")
            time.sleep(0.01)
        return self

    def _serve(self) -> None:
        try:
            assert self._socket is not None
            asyncio.run(self._server.serve(sockets=[self._socket]))
        except BaseException as error:  # reported by start()
            self._error = error

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> RunningExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_exporter(config: ExporterConfig, *, core_api: Any = None, apps_api: Any = None) -> RunningExporter:
    """Build the exporter from ``config`` and serve it on 127.0.0.1 (port from ``config.port``, 0 = free)."""
    return RunningExporter(build(config, core_api=core_api, apps_api=apps_api), port=config.port).start()
