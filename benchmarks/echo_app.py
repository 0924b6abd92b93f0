"""The baseline for benchmarks/webhook_latency.py: a FastAPI app on uvicorn over TLS that reads the
review and answers a fixed AdmissionReview (what serving costs before any decision is made).

Run by the benchmark as ``python -m uvicorn echo_app:app`` from this folder; not part of kv-planner.
"""

from __future__ import annotations

import json
import time

from fastapi import FastAPI, Request, Response

app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)


@app.post("/mutate")
async def mutate(request: Request) -> Response:
    started = time.perf_counter()
    review = json.loads(await request.body())
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }
    elapsed = (time.perf_counter() - started) * 1000
    return Response(
        json.dumps(body), media_type="application/json", headers={"Server-Timing": f"review;dur={elapsed:.3f}"}
    )


@app.get("/readyz")
async def readyz() -> Response:
    return Response("ok")
