"""A tiny OpenAI-compatible server with vLLM-style metrics, for the probe's unit tests.

Deterministic on purpose: a request "is preempted" (one preemption counted) the first time it sees
more than ``capacity`` requests in flight (checked at its start and at every token), so the probe's
answer must be exactly ``capacity``. Each request spends ``prefill_s`` before its first token, so it
stays in flight much longer than the client's turnaround between two requests (otherwise the server
would rarely see all ``c`` of the probe's requests at once). Time to first token also grows with the
number in flight when ``ttft_per_request_s`` is set.
It serves the real HTTP protocol (uvicorn on 127.0.0.1, a free port, SSE streaming) so the probe's
httpx client, cancellation and timing are exercised for real.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse


@dataclass
class FakeState:
    capacity: int = 4
    max_model_len: int = 2048
    token_delay_s: float = 0.002
    prefill_s: float = 0.1
    ttft_per_request_s: float = 0.0
    metric_names: str = "new"  # "new": kv_cache_usage_perc, "old": gpu_cache_usage_perc, "none": 404
    fail_status: int | None = None
    num_gpu_blocks: int = 1000
    block_size: int = 16
    active: int = 0
    preemptions: int = 0
    started: int = 0
    finished: int = 0
    cancelled: int = 0
    prompts: list[int] = field(default_factory=list)
    max_active: int = 0


def create_app(state: FakeState) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": "fake-model", "object": "model", "owned_by": "test", "max_model_len": state.max_model_len}],
        }

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        if state.metric_names == "none":
            return PlainTextResponse("not found", status_code=404)
        usage_name = "vllm:kv_cache_usage_perc" if state.metric_names == "new" else "vllm:gpu_cache_usage_perc"
        usage = min(1.0, state.active / (state.capacity + 1))
        labels = 'engine="0",model_name="fake-model"'
        page = [
            f"# TYPE {usage_name} gauge",
            f"{usage_name}{{{labels}}} {usage}",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{{{labels}}} {state.preemptions}",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {min(state.active, state.capacity)}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} {max(0, state.active - state.capacity)}",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{state.block_size}",engine="0",'
            f'num_gpu_blocks="{state.num_gpu_blocks}"}} 1.0',
        ]
        return PlainTextResponse("\n".join(page) + "\n")

    @app.post("/v1/completions", response_model=None)
    async def completions(request: Request) -> Any:
        body = await request.json()
        if state.fail_status is not None:
            return JSONResponse(
                {
                    "error": {
                        "message": "simulated failure",
                        "type": "BadRequestError",
                        "param": None,
                        "code": state.fail_status,
                    }
                },
                status_code=state.fail_status,
            )
        prompt = body["prompt"]
        assert isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)
        assert body["stream"] is True and body["ignore_eos"] is True
        max_tokens = int(body["max_tokens"])
        if len(prompt) + max_tokens > state.max_model_len:
            return JSONResponse(
                {"error": {"message": "too long", "type": "BadRequestError", "param": "max_tokens", "code": 400}},
                status_code=400,
            )
        state.prompts.append(len(prompt))
        state.active += 1
        state.started += 1
        state.max_active = max(state.max_active, state.active)
        preempted = False

        def check() -> None:
            nonlocal preempted
            if state.active > state.capacity and not preempted:
                preempted = True
                state.preemptions += 1

        check()

        async def stream() -> AsyncIterator[str]:
            in_flight = True
            try:
                await asyncio.sleep(state.prefill_s + state.ttft_per_request_s * state.active)
                for i in range(max_tokens):
                    check()
                    await asyncio.sleep(state.token_delay_s)
                    chunk = {
                        "id": "x",
                        "object": "text_completion",
                        "created": int(time.time()),
                        "model": "fake-model",
                        "choices": [{"index": 0, "text": f" t{i}", "finish_reason": None}],
                    }
                    yield f"data: {json.dumps(chunk)}\n\n"
                # Leave the batch before the client can see the end (it may start the next one at once).
                state.active -= 1
                state.finished += 1
                in_flight = False
                usage = {
                    "prompt_tokens": len(prompt),
                    "completion_tokens": max_tokens,
                    "total_tokens": len(prompt) + max_tokens,
                }
                yield f"data: {json.dumps({'id': 'x', 'choices': [], 'usage': usage})}\n\n"
                yield "data: [DONE]\n\n"
            finally:
                if in_flight:  # the client went away (cancelled)
                    state.active -= 1
                    state.cancelled += 1

        return StreamingResponse(stream(), media_type="text/event-stream")

    return app


class FakeServer:
    """Serve :func:`create_app` on 127.0.0.1 in a background thread (context manager)."""

    def __init__(self, state: FakeState) -> None:
        self.state = state
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.socket = sock
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(state), log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[sock])), daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        for _ in range(500):  # bounded: 5 s
            if self.server.started:
                return self
            time.sleep(0.01)
        raise RuntimeError("the fake server did not start")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()
