"""The webhook's HTTP surface (FastAPI): ``/mutate``, ``/validate``, ``/healthz``, ``/readyz``.

Hardening from Kubernetes' webhook good practices and controller-runtime: a request body limit (413),
``Content-Type: application/json`` required, malformed input answered 400 (never 500, never a hang),
the API server's ``?timeout=`` honoured (a review that cannot finish in time is allowed unchanged with
a warning), and no side effects (dry-run requests get the same answer).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from admission.webhook.handler import BadRequest, Endpoint, Outcome, Reviewer, parse_review, parse_timeout
from admission.webhook.metrics import WebhookMetrics

log = logging.getLogger("kv_planner.webhook")
DEFAULT_BODY_LIMIT = 7 * 1024 * 1024  # the API server's own request limit is 3 MiB; controller-runtime uses 7
DEFAULT_BUDGET = 8.0  # seconds, when the API server sends no timeout (its default is 10 s)
_MARGIN = 0.25  # answer this long before the API server gives up


class TooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None:
        try:
            if int(length) > limit:
                raise TooLarge
        except ValueError:
            raise BadRequest("invalid Content-Length") from None
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    reviewer: Reviewer,
    metrics: WebhookMetrics,
    *,
    body_limit: int = DEFAULT_BODY_LIMIT,
    ready: Callable[[], bool] = lambda: True,
    workers: int = 1,
) -> FastAPI:
    """The webhook ASGI app around ``reviewer``."""
    app = FastAPI(title="kv-planner admission webhook", docs_url=None, redoc_url=None, openapi_url=None)
    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="review")
    app.state.executor = executor

    async def handle(request: Request, endpoint: Endpoint) -> Response:
        started = time.perf_counter()
        content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        try:
            if content_type != "application/json":
                raise BadRequest(f"Content-Type must be application/json, got {content_type or 'none'!r}")
            body = await _read_body(request, body_limit)
            review = parse_review(body)
        except TooLarge:
            metrics.rejected.labels("too-large").inc()
            return JSONResponse({"error": f"request body larger than {body_limit} bytes"}, status_code=413)
        except BadRequest as error:
            metrics.rejected.labels("malformed").inc()
            return JSONResponse({"error": str(error)}, status_code=400)

        request_data = review.request
        timeout = parse_timeout(request.query_params.get("timeout"))
        budget = max(0.05, (timeout or DEFAULT_BUDGET) - _MARGIN)
        outcome: Outcome
        try:
            # The decision runs on a worker thread so the event loop keeps serving (health checks, the
            # deadline); a review past its budget is answered while the thread finishes in the background.
            loop = asyncio.get_running_loop()
            work = loop.run_in_executor(executor, reviewer.decide, request_data)
            decision = await asyncio.wait_for(asyncio.shield(work), budget)
            outcome = reviewer.respond(request_data, endpoint, decision)
        except (TimeoutError, asyncio.TimeoutError):
            outcome = reviewer.fail_open(request_data, f"review took longer than {budget:.2f}s: allowed unchecked")
        except Exception as error:  # the boundary: never a 500, never a denial for our own failure
            log.exception("review %s failed", request_data.uid)
            outcome = reviewer.fail_open(request_data, f"internal error ({type(error).__name__}): allowed unchecked")
        elapsed = time.perf_counter() - started
        metrics.requests.labels(endpoint, outcome.decision).inc()
        metrics.duration.labels(endpoint, outcome.decision).observe(elapsed)
        # Server-Timing lets clients (and the benchmark) see the server-side time of each review.
        timing = {"Server-Timing": f"review;dur={elapsed * 1000:.3f}"}
        return Response(outcome.body, media_type="application/json", headers=timing)

    @app.post("/mutate")
    async def mutate(request: Request) -> Response:
        return await handle(request, "mutate")

    @app.post("/validate")
    async def validate(request: Request) -> Response:
        return await handle(request, "validate")

    @app.get("/healthz")
    async def healthz() -> Response:
        return PlainTextResponse("ok")

    @app.get("/readyz")
    async def readyz() -> Response:
        if ready():
            return PlainTextResponse("ok")
        return PlainTextResponse("not ready", status_code=503)

    return app
