"""Run the webhook: uvicorn over TLS (our SSLContext), plus a plain-HTTP metrics server.

One event loop runs both servers and a small loop that reloads the certificate and the policy file when
they change (cert-manager rotates Secrets in place; the chart's ConfigMap can change without a restart).
The process is ready once the policy is loaded, the cluster caches have synced and the planner has
answered one warm-up review (catalogs loaded), so the first real request does not pay for imports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Generator
from typing import Any, Literal

import uvicorn
from prometheus_client import make_asgi_app
from pydantic import BaseModel, ConfigDict, Field

from admission.webhook import heap
from admission.webhook.app import DEFAULT_BODY_LIMIT, DEFAULT_REVIEW_BUDGET, create_app
from admission.webhook.caches import ClusterCache, KubernetesCache, StaticCache
from admission.webhook.guard import GuardedH11Protocol
from admission.webhook.handler import PolicyHolder
from admission.webhook.metrics import WebhookMetrics
from admission.webhook.pool import DecisionPool, cpu_limit, workers_for
from admission.webhook.tls import ReloadingTLS
from admission.webhook.worker import shared_backend
from planner.policy.planning import PlanningBackend

log = logging.getLogger("kv_planner.webhook")


class WebhookSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str = "0.0.0.0"
    port: int = 8443
    tls_cert_file: str
    tls_key_file: str
    client_ca_file: str | None = None
    tls_min_version: Literal["1.2", "1.3"] = "1.2"
    policy_file: str | None = None
    metrics_port: int = 9090
    metrics_host: str | None = Field(default=None, description="None: the same address as host")
    reload_interval: float = 10.0
    body_limit: int = DEFAULT_BODY_LIMIT
    cluster: bool = True
    log_level: str = "info"
    workers: int = Field(default=0, ge=0, le=64, description="decision worker processes (0: from the CPU limit)")
    review_budget: float = Field(default=DEFAULT_REVIEW_BUDGET, gt=0, le=30, description="seconds per review")
    max_waiting: int = Field(default=32, ge=1, description="reviews of one namespace waiting for a worker")
    worker_max_rss: int = Field(default=200 * 2**20, ge=0, description="bytes; a bigger worker is replaced")
    request_timeout: float = Field(default=10.0, gt=0, description="seconds to receive one request")
    keep_alive: float = Field(default=5.0, gt=0, description="seconds an idle connection is kept")
    handshake_timeout: float = Field(default=5.0, gt=0, description="seconds for the TLS handshake")
    max_connections: int = Field(default=1000, ge=1, description="open connections on the TLS port")
    max_pending_bytes: int = Field(default=64 * 2**20, ge=2**20, description="request bytes held at once")


class _TLSConfig(uvicorn.Config):
    """uvicorn.Config that serves with a given SSLContext (uvicorn cannot set a minimum TLS version), and
    carries the request deadline and connection cap to :class:`GuardedH11Protocol`."""

    def __init__(
        self,
        app: Any,
        *,
        ssl_context: ssl.SSLContext,
        request_timeout: float,
        max_connections: int,
        on_drop: Callable[[str], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(app, http=GuardedH11Protocol, **kwargs)
        self._context = ssl_context
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self.on_drop = on_drop

    def load(self) -> None:
        super().load()
        self.ssl = self._context


class _QuietServer(uvicorn.Server):
    """The metrics server: leaves signal handling to the main server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class Webhook:
    """The assembled process: app, TLS, policy, caches, metrics."""

    def __init__(
        self,
        settings: WebhookSettings,
        *,
        cache: ClusterCache | None = None,
        backend_factory: Callable[[], PlanningBackend] = shared_backend,
    ) -> None:
        self.settings = settings
        self.metrics = WebhookMetrics()
        self.tls = ReloadingTLS(
            settings.tls_cert_file,
            settings.tls_key_file,
            client_ca_file=settings.client_ca_file,
            minimum_version=ssl.TLSVersion.TLSv1_3 if settings.tls_min_version == "1.3" else ssl.TLSVersion.TLSv1_2,
        )
        self.tls.context.set_alpn_protocols(["http/1.1"])
        self.policy = PolicyHolder(settings.policy_file)
        self.metrics.policy_info.set(self.policy.generation)
        if cache is None:
            cache = KubernetesCache() if settings.cluster else StaticCache()
        self.cache = cache
        self.pool = DecisionPool(
            settings.workers or workers_for(cpu_limit()),
            backend_factory,
            max_waiting=settings.max_waiting,
            max_rss=settings.worker_max_rss,
            log_level=settings.log_level,
            on_restart=lambda reason: self.metrics.worker_restarts.labels(reason).inc(),
        )
        self.warm = False
        self._running: tuple[uvicorn.Server, ...] = ()
        self.app = create_app(
            self.pool,
            self.policy,
            self.cache,
            self.metrics,
            body_limit=settings.body_limit,
            max_pending_bytes=settings.max_pending_bytes,
            review_budget=settings.review_budget,
            ready=self.ready,
        )
        self.metrics_app = make_asgi_app(registry=self.metrics.registry)

    def ready(self) -> bool:
        return self.warm and self.cache.ready() and self.pool.alive() > 0

    def warm_up(self) -> None:
        """Start the decision workers (each answers one review before it takes traffic)."""
        self.pool.start()
        self.warm = True

    def reload(self) -> None:
        if self.tls.reload():
            self.metrics.reloads.labels("tls", "ok").inc()
        if self.policy.reload():
            self.metrics.reloads.labels("policy", "ok").inc()
            self.metrics.policy_info.set(self.policy.generation)

    def servers(self) -> tuple[uvicorn.Server, uvicorn.Server]:
        s = self.settings
        main = uvicorn.Server(
            _TLSConfig(
                self.app,
                ssl_context=self.tls.context,
                request_timeout=s.request_timeout,
                max_connections=s.max_connections,
                on_drop=lambda reason: self.metrics.connections_dropped.labels(reason).inc(),
                host=s.host,
                port=s.port,
                log_level=s.log_level,
                lifespan="off",
                timeout_keep_alive=s.keep_alive,
                h11_max_incomplete_event_size=16 * 1024,  # request line + headers
                timeout_graceful_shutdown=5,  # then close idle keep-alive connections and exit
                access_log=False,
                server_header=False,
            )
        )
        metrics = _QuietServer(
            uvicorn.Config(
                self.metrics_app,
                host=s.metrics_host if s.metrics_host is not None else s.host,
                port=s.metrics_port,
                log_level="warning",
                lifespan="off",
                access_log=False,
            )
        )
        return main, metrics

    def stop(self) -> None:
        """Ask the running servers to finish (they drain open requests first)."""
        for server in self._running:
            server.should_exit = True

    async def serve(self, *, on_warm: Callable[[], None] = lambda: None) -> None:
        """Serve until stopped; ``on_warm`` runs once the workers are ready, before traffic is taken."""
        main, metrics = self.servers()
        self._running = (main, metrics)
        loop = asyncio.get_running_loop()
        _bound_tls_handshakes(loop, self.settings.handshake_timeout)
        await loop.run_in_executor(None, self.warm_up)
        on_warm()

        async def reload_loop() -> None:
            while not main.should_exit:
                await asyncio.sleep(self.settings.reload_interval)
                await loop.run_in_executor(None, self.reload)

        metrics_task = asyncio.create_task(metrics.serve())
        reload_task = asyncio.create_task(reload_loop())
        try:
            await main.serve()
        finally:
            metrics.should_exit = True
            reload_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reload_task
            await metrics_task
            self.pool.close()


def _bound_tls_handshakes(loop: asyncio.AbstractEventLoop, timeout: float) -> None:
    """Make the TLS server this loop creates drop a handshake after ``timeout`` seconds.

    uvicorn calls ``loop.create_server(..., ssl=context)`` without ``ssl_handshake_timeout``, so asyncio's
    default of 60 s applies: a client that opens connections and never finishes the handshake holds each
    for a minute. Only servers with TLS get the bound (asyncio refuses it without ``ssl``).
    """
    original = loop.create_server

    async def create_server(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("ssl") is not None:
            kwargs.setdefault("ssl_handshake_timeout", timeout)
        return await original(*args, **kwargs)

    loop.create_server = create_server  # type: ignore[method-assign]


def run(settings: WebhookSettings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The process is the webhook's alone: its collector is tuned for reviews (heap.py).
    asyncio.run(Webhook(settings).serve(on_warm=heap.settle))
