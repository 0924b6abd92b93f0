"""The simulator's HTTP API: the OpenAI-compatible endpoints, ``/health``, ``/version`` and ``/metrics``
of ``vllm serve``. Built on FastAPI like vLLM's own server; imported only when a simulator starts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from planner.sim import tokens as tok
from planner.sim.engine import VOCAB_SIZE, TokenEvent
from planner.sim.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    Delta,
    ErrorInfo,
    ErrorResponse,
    ModelCard,
    ModelList,
    Usage,
)
from planner.sim.runtime import SimulatorRuntime
from planner.sim.scheduler import Request as EngineRequest
from planner.sim.settings import SimulatorSettings

OWNED_BY = "kv-planner-simulator"


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param


def _error(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
    body = ErrorResponse(error=ErrorInfo(message=message, type=kind, param=param, code=status))
    return JSONResponse(body.model_dump(), status_code=status)


def create_app(settings: SimulatorSettings) -> FastAPI:
    holder: dict[str, SimulatorRuntime] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        runtime = SimulatorRuntime(settings)
        holder["runtime"] = runtime
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    app = FastAPI(title="kv-planner vLLM simulator", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.holder = holder

    def runtime() -> SimulatorRuntime:
        return holder["runtime"]

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, error: ApiError) -> JSONResponse:
        return _error(error.status, error.message, error.kind, error.param)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
        # vLLM answers malformed bodies with 400 (not FastAPI's 422).
        details = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in error.errors()[:5])
        return _error(400, f"invalid request: {details}", "BadRequestError")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        kind = "NotFoundError" if error.status_code == 404 else "BadRequestError"
        return _error(error.status_code, str(error.detail), kind)

    @app.get("/health")
    async def health() -> Response:
        if runtime().failed is not None:
            return Response(status_code=503)
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": settings.vllm_version or settings.release}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(runtime().recorder.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = ModelCard(
            id=settings.name,
            created=int(runtime().started_at),
            owned_by=OWNED_BY,
            root=settings.model,
            max_model_len=settings.effective_max_model_len,
        )
        return ModelList(data=[card]).model_dump()

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, raw: Request) -> Response:
        _check_model(body.model)
        prompt = _completion_prompt(body.prompt)
        request = _engine_request(
            runtime(), "cmpl", prompt, body.max_tokens, body.min_tokens, body.ignore_eos, body.n, default_max=False
        )
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        if body.stream:
            return _sse(_stream_completion(runtime(), request, include_usage))
        events = await _until_disconnect(raw, runtime(), request)
        if events is None:
            return Response(status_code=499)  # nobody is listening any more
        text = "".join(tok.decode_token(e.token_id) for e in events if e.token_id is not None)
        result = CompletionResponse(
            id=request.request_id,
            created=int(time.time()),
            model=settings.name,
            choices=[CompletionChoice(text=text, finish_reason=events[-1].finish_reason)],
            usage=_usage(request),
        )
        return JSONResponse(result.model_dump())

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatCompletionRequest, raw: Request) -> Response:
        _check_model(body.model)
        messages: list[tuple[str, str]] = []
        for message in body.messages:
            content = message.content
            text = content if isinstance(content, str) else " ".join(p.text for p in content or [])
            messages.append((message.role, text))
        prompt = tok.chat_prompt(messages)
        max_tokens = body.max_completion_tokens or body.max_tokens
        request = _engine_request(
            runtime(), "chatcmpl", prompt, max_tokens, body.min_tokens, body.ignore_eos, body.n, default_max=True
        )
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        if body.stream:
            return _sse(_stream_chat(runtime(), request, include_usage))
        events = await _until_disconnect(raw, runtime(), request)
        if events is None:
            return Response(status_code=499)  # nobody is listening any more
        text = "".join(tok.decode_token(e.token_id) for e in events if e.token_id is not None)
        result = ChatCompletionResponse(
            id=request.request_id,
            created=int(time.time()),
            model=settings.name,
            choices=[ChatChoice(message=AssistantMessage(content=text), finish_reason=events[-1].finish_reason)],
            usage=_usage(request),
        )
        return JSONResponse(result.model_dump())

    def _check_model(name: str | None) -> None:
        if name is not None and name not in (settings.name, settings.model):
            raise ApiError(404, f"The model `{name}` does not exist.", "NotFoundError", "model")

    def _completion_prompt(prompt: str | list[int] | list[str] | list[list[int]]) -> list[int]:
        if isinstance(prompt, str):
            return tok.encode(prompt)
        if prompt and all(isinstance(item, int) for item in prompt):
            ids = [int(item) for item in prompt]  # type: ignore[arg-type]
            bad = [i for i in ids if not 0 <= i < VOCAB_SIZE]
            if bad:
                raise ApiError(400, f"Token id {bad[0]} is out of vocabulary (size {VOCAB_SIZE}).", param="prompt")
            return ids
        if len(prompt) == 1:
            return _completion_prompt(prompt[0])  # type: ignore[arg-type]
        if not prompt:
            raise ApiError(400, "prompt cannot be empty", param="prompt")
        raise ApiError(
            400, "the simulator serves one prompt per request; send a batch as separate requests", param="prompt"
        )

    def _engine_request(
        rt: SimulatorRuntime,
        prefix: str,
        prompt: list[int],
        max_tokens: int | None,
        min_tokens: int,
        ignore_eos: bool,
        n: int,
        *,
        default_max: bool,
    ) -> EngineRequest:
        limit = settings.effective_max_model_len
        if not prompt:
            raise ApiError(400, "The prompt is empty; send at least one token.", param="prompt")
        if n != 1:
            raise ApiError(400, "The simulator serves n=1 only.", param="n")
        if len(prompt) >= limit:
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your request has "
                f"{len(prompt)} input tokens. Please reduce the length of the input.",
                param="prompt",
            )
        if max_tokens is None:
            max_tokens = limit - len(prompt)
        elif len(prompt) + max_tokens > limit:
            raise ApiError(
                400,
                f"'max_tokens' is too large: {max_tokens}. This model's maximum context length is {limit} "
                f"tokens and your request has {len(prompt)} input tokens ({max_tokens} > {limit} - "
                f"{len(prompt)}).",
                param="max_tokens",
            )
        return EngineRequest(
            request_id=rt.next_request_id(prefix),
            prompt_token_ids=prompt,
            max_tokens=max_tokens,
            min_tokens=min(min_tokens, max_tokens),
            ignore_eos=ignore_eos,
            max_tokens_param=max_tokens,
            n=n,
        )

    return app


def _usage(request: EngineRequest) -> Usage:
    completion = len(request.output_token_ids)
    return Usage(
        prompt_tokens=request.num_prompt_tokens,
        completion_tokens=completion,
        total_tokens=request.num_prompt_tokens + completion,
    )


async def _until_disconnect(raw: Request, runtime: SimulatorRuntime, request: EngineRequest) -> list[TokenEvent] | None:
    """All of a non-streamed request's events, or None when the client went away first: then the
    request is aborted at once and its blocks freed, as vLLM's ``with_cancellation`` does for its
    non-streaming handlers (vllm 0.19.0 vllm/entrypoints/utils.py: with_cancellation); streamed requests
    are cancelled by Starlette's StreamingResponse the same way."""

    async def collect() -> list[TokenEvent]:
        return [event async for event in runtime.generate(request)]

    async def disconnected() -> None:
        while (await raw.receive())["type"] != "http.disconnect":
            pass

    work, watch = asyncio.create_task(collect()), asyncio.create_task(disconnected())
    done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    for task in (work, watch):
        if task not in done:
            task.cancel()
    await asyncio.gather(work, watch, return_exceptions=True)
    return work.result() if work in done else None


def _sse(chunks: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(chunks, media_type="text/event-stream")


def _data(payload: dict[str, Any]) -> str:
    # Like vLLM, leave unset fields out of stream chunks: no "usage": null, no "role": null in deltas.
    if payload.get("usage") is None:
        payload.pop("usage", None)
    for choice in payload.get("choices", []):
        if "delta" in choice:
            choice["delta"] = {k: v for k, v in choice["delta"].items() if v is not None}
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


async def _stream_completion(
    runtime: SimulatorRuntime, request: EngineRequest, include_usage: bool
) -> AsyncIterator[str]:
    created = int(time.time())
    name = runtime.settings.name
    async for event in runtime.generate(request):
        text = tok.decode_token(event.token_id) if event.token_id is not None else ""
        chunk = CompletionResponse(
            id=request.request_id,
            created=created,
            model=name,
            choices=[CompletionChoice(text=text, finish_reason=event.finish_reason)],
        )
        yield _data(chunk.model_dump())
    if include_usage:
        usage = CompletionResponse(
            id=request.request_id, created=created, model=name, choices=[], usage=_usage(request)
        )
        yield _data(usage.model_dump())
    yield "data: [DONE]\n\n"


async def _stream_chat(runtime: SimulatorRuntime, request: EngineRequest, include_usage: bool) -> AsyncIterator[str]:
    created = int(time.time())
    name = runtime.settings.name
    first = ChatCompletionChunk(
        id=request.request_id,
        created=created,
        model=name,
        choices=[ChatChunkChoice(delta=Delta(role="assistant", content=""))],
    )
    yield _data(first.model_dump())
    async for event in runtime.generate(request):
        text = tok.decode_token(event.token_id) if event.token_id is not None else ""
        chunk = ChatCompletionChunk(
            id=request.request_id,
            created=created,
            model=name,
            choices=[ChatChunkChoice(delta=Delta(content=text), finish_reason=event.finish_reason)],
        )
        yield _data(chunk.model_dump())
    if include_usage:
        usage = ChatCompletionChunk(
            id=request.request_id, created=created, model=name, choices=[], usage=_usage(request)
        )
        yield _data(usage.model_dump())
    yield "data: [DONE]\n\n"
