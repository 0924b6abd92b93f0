"""The webhook's HTTP surface (FastAPI): ``/mutate``, ``/validate``, ``/healthz``, ``/readyz``.

Hardening from Kubernetes' webhook good practices and controller-runtime: a request body limit (413),
``Content-Type: application/json`` required, malformed input answered 400 (never 500, never a hang),
the API server's ``?timeout=`` honoured, and no side effects (dry-run requests get the same answer).

The event loop parses and answers; every decision runs in a worker process of :class:`DecisionPool`
within a per-review budget (the smaller of ``review_budget`` and the API server's deadline). A review
that cannot be decided in that time is answered by policy (``onTimeout``: Enforce denies by default,
Audit allows) with KVP051; the pool's own failures are allowed unchecked with KVP049. Both are logged with
their reason code and counted in ``kv_planner_webhook_unchecked_total``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import time
from collections.abc import Callable

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.requests import ClientDisconnect

from admission.webhook.caches import ClusterCache
from admission.webhook.handler import (
    BadRequest,
    Endpoint,
    Outcome,
    PolicyHolder,
    Received,
    fail_open,
    parse_timeout,
    receive,
    skipped,
    undecided,
)
from admission.webhook.metrics import WebhookMetrics
from admission.webhook.pool import DecisionPool, Undecided, WorkerFailed
from admission.webhook.review import AdmissionRequest
from admission.webhook.worker import Job
from planner.k8s.nodes import NodeInfo
from planner.policy.codes import Code
from planner.policy.model import EffectivePolicy

log = logging.getLogger("kv_planner.webhook")
_PARSE_INLINE = 256 * 1024  # bodies up to this size decode on the loop (well under a millisecond)
DEFAULT_BODY_LIMIT = 7 * 1024 * 1024  # the API server's own request limit is 3 MiB; controller-runtime uses 7
DEFAULT_DEADLINE = 10.0  # seconds, when the API server sends no timeout (its default)
DEFAULT_REVIEW_BUDGET = 1.0  # seconds of decision time one review may use, whatever the deadline
_MARGIN = 0.25  # answer this long before the API server gives up


class TooLarge(Exception):
    pass


class Busy(Exception):
    """More request bytes are held than the server allows (answered 503: retry)."""


class Pending:
    """Request bytes held in memory across all connections (each connection may send up to the body limit;
    a thousand of them must not add up to gigabytes)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, count: int) -> None:
        if self.held + count > self.limit:
            raise Busy
        self.held += count

    def give(self, count: int) -> None:
        self.held -= count


async def _read_body(request: Request, limit: int, pending: Pending, held: list[int]) -> bytes:
    """The body, counting what it holds in ``held`` (given back by the caller)."""
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
        pending.take(len(chunk))
        held[0] += len(chunk)
        chunks.append(chunk)
    return b"".join(chunks)


class Inventory:
    """The node inventory, versioned by the cache's ``nodes_generation``, so that workers are sent the
    (possibly large) list only when it changed, not with every review; it is pickled once per version, not
    once per worker (thousands of nodes: tens of milliseconds on the loop, megabytes)."""

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._version: int | None = None  # the generation the list below was read at (None: not yet read)
        self._nodes: list[NodeInfo] = []
        self._encoded: bytes | None = None

    def current(self) -> int:
        """The version of the cache's nodes now (O(1) unless they changed). Never negative: a new worker
        holds version -1, so its first job carries the nodes."""
        generation = self._cache.nodes_generation()
        if generation != self._version:
            self._version, self._nodes, self._encoded = generation, self._cache.nodes(), None
        return generation

    def for_worker(self, known_version: int) -> tuple[int, bytes | None]:
        """The current version, and the nodes pickled for a worker that holds ``known_version`` (None when
        that is the current one): worker.Job's ``inventory_version`` and ``inventory``, one snapshot."""
        version = self.current()
        if version == known_version:
            return version, None
        if self._encoded is None:
            self._encoded = pickle.dumps(self._nodes, protocol=pickle.HIGHEST_PROTOCOL)
        return version, self._encoded


def job_maker(
    received: Received, endpoint: Endpoint, policy: EffectivePolicy, inventory: Inventory
) -> Callable[[int], Job]:
    """The job for the worker a review gets (DecisionPool.decide calls it with the inventory version that
    worker holds)."""

    def make_job(known_version: int) -> Job:
        version, nodes = inventory.for_worker(known_version)
        return Job(received.payload, received.encoding, endpoint, policy, version, nodes)

    return make_job


def create_app(
    pool: DecisionPool,
    policy: PolicyHolder,
    cache: ClusterCache,
    metrics: WebhookMetrics,
    *,
    body_limit: int = DEFAULT_BODY_LIMIT,
    max_pending_bytes: int = 64 * 2**20,
    review_budget: float = DEFAULT_REVIEW_BUDGET,
    ready: Callable[[], bool] = lambda: True,
) -> FastAPI:
    """The webhook ASGI app: parses and answers on the event loop, decides in ``pool``'s workers."""
    app = FastAPI(title="kv-planner admission webhook", docs_url=None, redoc_url=None, openapi_url=None)
    inventory = Inventory(cache)
    pending = Pending(max_pending_bytes)

    def unchecked(request: AdmissionRequest, outcome: Outcome, code: str, kind: str, reason: str) -> Outcome:
        # Every answer that is not a decision is logged with its reason code and counted.
        log.warning("review %s (%s/%s): %s %s: %s", request.uid, request.namespace, request.name, code, kind, reason)
        metrics.unchecked.labels(code, kind).inc()
        return outcome

    async def review(received: Received, endpoint: Endpoint, deadline: float) -> Outcome:
        request = received.request
        if not received.reviewable:
            return skipped(request)
        namespace = received.namespace
        effective = policy.policy.for_namespace(namespace, cache.namespace(namespace))
        budget = max(0.05, min(review_budget, deadline))

        make_job = job_maker(received, endpoint, effective, inventory)
        try:
            reply = await pool.decide(make_job, tenant=namespace or "", budget=budget, key=received.key)
        except Undecided as error:
            outcome = undecided(request, effective, error.reason)
            return unchecked(request, outcome, Code.REVIEW_TIMED_OUT.value, error.kind, error.reason)
        except WorkerFailed as error:
            outcome = fail_open(request, f"internal error ({error}): allowed unchecked")
            return unchecked(request, outcome, Code.INTERNAL_ERROR.value, "worker-failed", str(error))
        outcome = Outcome(body=reply.body, decision=reply.decision, worker_seconds=reply.seconds)
        if reply.error is not None or Code.INTERNAL_ERROR.value in reply.codes:
            reason = reply.error or _warning_with(reply.body, Code.INTERNAL_ERROR.value)
            unchecked(request, outcome, Code.INTERNAL_ERROR.value, "internal-error", reason)
        return outcome

    async def handle(request: Request, endpoint: Endpoint) -> Response:
        held = [0]
        try:
            return await answer(request, endpoint, held)
        finally:
            pending.give(held[0])

    async def answer(request: Request, endpoint: Endpoint, held: list[int]) -> Response:
        started = time.perf_counter()
        content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        try:
            if content_type != "application/json":
                raise BadRequest(f"Content-Type must be application/json, got {content_type or 'none'!r}")
            body = await _read_body(request, body_limit, pending, held)
            # A large body is decoded in a thread: the event loop keeps answering /healthz and other reviews
            # meanwhile (the GIL is handed over every few milliseconds) instead of stalling for a second.
            received = await asyncio.to_thread(receive, body) if len(body) > _PARSE_INLINE else receive(body)
        except Busy:
            metrics.rejected.labels("busy").inc()
            return JSONResponse({"error": "too many requests in flight"}, status_code=503, headers={"Retry-After": "1"})
        except TooLarge:
            metrics.rejected.labels("too-large").inc()
            return JSONResponse({"error": f"request body larger than {body_limit} bytes"}, status_code=413)
        except BadRequest as error:
            metrics.rejected.labels("malformed").inc()
            return JSONResponse({"error": str(error)}, status_code=400)
        except ClientDisconnect:
            metrics.rejected.labels("disconnected").inc()
            return Response(status_code=400)  # nobody is left to read it; no traceback either

        timeout = parse_timeout(request.query_params.get("timeout"))
        deadline = (timeout or DEFAULT_DEADLINE) - _MARGIN - (time.perf_counter() - started)
        try:
            outcome = await review(received, endpoint, deadline)
        except Exception as error:  # the boundary: never a 500, never a denial for our own failure
            log.exception("review %s failed", received.request.uid)
            outcome = fail_open(received.request, f"internal error ({type(error).__name__}): allowed unchecked")
            metrics.unchecked.labels(Code.INTERNAL_ERROR.value, "internal-error").inc()
        elapsed = time.perf_counter() - started
        metrics.requests.labels(endpoint, outcome.decision).inc()
        metrics.duration.labels(endpoint, outcome.decision).observe(elapsed)
        # Server-Timing lets clients (and the benchmark) see the server-side time of each review, and how
        # much of it the decision worker spent (the rest is decoding, waiting for a worker and the hand-over).
        server_timing = f"review;dur={elapsed * 1000:.3f}"
        if outcome.worker_seconds is not None:
            server_timing += f", decide;dur={outcome.worker_seconds * 1000:.3f}"
        timing = {"Server-Timing": server_timing}
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


def _warning_with(body: bytes, code: str) -> str:
    """The answer's warning that carries ``code`` (what went wrong, for the log line operators read)."""
    try:
        warnings = json.loads(body)["response"].get("warnings") or []
    except (ValueError, KeyError, TypeError, AttributeError):
        return "no detail in the answer"
    return next((w for w in warnings if isinstance(w, str) and code in w), "no detail in the answer")
