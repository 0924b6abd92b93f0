"""OpenAI-compatible request and response bodies, the subset vLLM's server accepts that the simulator honours.

Unknown request fields are ignored (vLLM logs and ignores them too), so clients written for vLLM work
unchanged. Sampling parameters that do not change KV usage (temperature, top_p, stop strings ...) are
accepted and have no effect.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Request):
    include_usage: bool = False


class CompletionRequest(_Request):
    model: str | None = None
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)  # OpenAI/vLLM completions default
    min_tokens: int = Field(default=0, ge=0)
    ignore_eos: bool = False
    n: int = Field(default=1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None


class TextPart(_Request):
    type: Literal["text"] = "text"
    text: str


class ChatMessage(_Request):
    role: str
    content: str | list[TextPart] | None = None


class ChatCompletionRequest(_Request):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    min_tokens: int = Field(default=0, ge=0)
    ignore_eos: bool = False
    n: int = Field(default=1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None


class _Response(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Usage(_Response):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int
    prompt_tokens_details: None = None


class CompletionChoice(_Response):
    index: int = 0
    text: str
    logprobs: None = None
    finish_reason: str | None = None
    stop_reason: None = None


class CompletionResponse(_Response):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class AssistantMessage(_Response):
    role: Literal["assistant"] = "assistant"
    content: str
    tool_calls: list[Any] = Field(default_factory=list)


class ChatChoice(_Response):
    index: int = 0
    message: AssistantMessage
    logprobs: None = None
    finish_reason: str | None = None
    stop_reason: None = None


class ChatCompletionResponse(_Response):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class Delta(_Response):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(_Response):
    index: int = 0
    delta: Delta
    logprobs: None = None
    finish_reason: str | None = None
    stop_reason: None = None


class ChatCompletionChunk(_Response):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class ModelCard(_Response):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    root: str
    parent: None = None
    max_model_len: int


class ModelList(_Response):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorInfo(_Response):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(_Response):
    """vLLM's error body (0.10.1+): ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorInfo
