"""Run the webhook: uvicorn over TLS (our SSLContext), plus a plain-HTTP metrics server.

One event loop runs both servers and a small loop that reloads the certificate and the policy file when
they change (cert-manager rotates Secrets in place; the chart's ConfigMap can change without a restart).
The process is ready once the policy is loaded, the cluster caches have synced and the planner has
answered one warm-up review (catalogs loaded), so the first real request does not pay for imports.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import ssl
from collections.abc import Generator
from typing import Any

import uvicorn
from prometheus_client import make_asgi_app
from pydantic import BaseModel, ConfigDict

from admission.webhook.app import DEFAULT_BODY_LIMIT, create_app
from admission.webhook.caches import ClusterCache, KubernetesCache, StaticCache
from admission.webhook.handler import PolicyHolder, Reviewer
from admission.webhook.metrics import WebhookMetrics
from admission.webhook.review import AdmissionRequest
from admission.webhook.tls import ReloadingTLS
from planner.policy.planning import CoreBackend, PlanningBackend

log = logging.getLogger("kv_planner.webhook")

_WARMUP_OBJECT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "kv-planner-warmup", "namespace": "default"},
    "spec": {
        "template": {
            "metadata": {},
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                "containers": [
                    {
                        "name": "vllm",
                        "image": "vllm/vllm-openai:latest",
                        "args": ["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        }
    },
}


class WebhookSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str = "0.0.0.0"
    port: int = 8443
    tls_cert_file: str
    tls_key_file: str
    client_ca_file: str | None = None
    policy_file: str | None = None
    metrics_port: int = 9090
    metrics_host: str = "0.0.0.0"
    reload_interval: float = 10.0
    body_limit: int = DEFAULT_BODY_LIMIT
    cluster: bool = True
    log_level: str = "info"
    limit_concurrency: int = 200


class _TLSConfig(uvicorn.Config):
    """uvicorn.Config that serves with a given SSLContext (uvicorn cannot set a minimum TLS version)."""

    def __init__(self, app: Any, *, ssl_context: ssl.SSLContext, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._context = ssl_context

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
        backend: PlanningBackend | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = WebhookMetrics()
        self.tls = ReloadingTLS(settings.tls_cert_file, settings.tls_key_file, client_ca_file=settings.client_ca_file)
        self.tls.context.set_alpn_protocols(["http/1.1"])
        self.policy = PolicyHolder(settings.policy_file)
        self.metrics.policy_info.set(self.policy.generation)
        if cache is None:
            cache = KubernetesCache() if settings.cluster else StaticCache()
        self.cache = cache
        self.backend = backend or CoreBackend()
        self.reviewer = Reviewer(policy=self.policy, cache=self.cache, backend=self.backend)
        self.warm = False
        self._running: tuple[uvicorn.Server, ...] = ()
        self.app = create_app(self.reviewer, self.metrics, body_limit=settings.body_limit, ready=self.ready)
        self.metrics_app = make_asgi_app(registry=self.metrics.registry)

    def ready(self) -> bool:
        return self.warm and self.cache.ready()

    def warm_up(self) -> None:
        """Answer one review in-process so catalogs and imports are loaded before traffic arrives."""
        request = AdmissionRequest(uid="warmup", operation="CREATE", object=_WARMUP_OBJECT, namespace="default")
        try:
            self.reviewer.decide(request)
        except Exception as error:  # a failed warm-up only delays readiness of nothing: log and go on
            log.warning("warm-up review failed: %s", error)
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
                host=s.host,
                port=s.port,
                log_level=s.log_level,
                lifespan="off",
                limit_concurrency=s.limit_concurrency,
                timeout_keep_alive=30,
                timeout_graceful_shutdown=5,  # then close idle keep-alive connections and exit
                access_log=False,
                server_header=False,
            )
        )
        metrics = _QuietServer(
            uvicorn.Config(
                self.metrics_app,
                host=s.metrics_host,
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

    async def serve(self) -> None:
        main, metrics = self.servers()
        self._running = (main, metrics)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.warm_up)
        # Catalogs, flag tables and imports now live for the whole process: move them out of the
        # collector's reach, so full collections stay short (otherwise a gen-2 pass over them stalls
        # the event loop for tens of milliseconds under load).
        gc.collect()
        gc.freeze()

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


def run(settings: WebhookSettings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(Webhook(settings).serve())
