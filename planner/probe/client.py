"""One streaming completion against an OpenAI-compatible vLLM server, timed.

The prompt is sent as a list of random token ids (the completions API accepts them), so its length is
exact without a tokenizer and no two prompts share a prefix (no prefix-cache hits flatter the
measurement). ``ignore_eos`` and ``min_tokens`` (vLLM extensions) make the server generate exactly
``max_tokens`` tokens. Time to first token is measured from sending the request to the first streamed
chunk; inter-token latency is the time from the first to the last token over the tokens in between.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import httpx

from planner.errors import ScrapeError

TOKEN_ID_LOW = 1000
TOKEN_ID_HIGH = 30000
"""Random prompt token ids come from this range: inside any current LLM vocabulary (>= 32k entries),
above the special tokens most tokenizers put first."""


@dataclass
class RequestResult:
    prompt_tokens: int
    max_tokens: int
    started: float
    first_token: float | None = None
    last_token: float | None = None
    finished: float | None = None
    output_tokens: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.finished is not None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.started

    @property
    def itl(self) -> float | None:
        if self.first_token is None or self.last_token is None or self.output_tokens < 2:
            return None
        return (self.last_token - self.first_token) / (self.output_tokens - 1)


async def fetch_model(client: httpx.AsyncClient, base_url: str, model: str | None) -> tuple[str, int | None]:
    """The model to use (given, or the first served one) and its ``max_model_len`` from ``/v1/models``."""
    url = f"{base_url}/v1/models"
    try:
        response = await client.get(url)
    except httpx.HTTPError as error:
        raise ScrapeError(f"cannot reach {url}: {type(error).__name__}: {error}") from None
    if response.status_code != 200:
        raise ScrapeError(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
    try:
        cards = response.json()["data"]
    except (ValueError, KeyError, TypeError):
        raise ScrapeError(f"{url}: not an OpenAI model list") from None
    if not cards:
        raise ScrapeError(f"{url}: the server lists no model")
    chosen = next((c for c in cards if c.get("id") == model), None) if model else cards[0]
    if chosen is None:
        names = ", ".join(str(c.get("id")) for c in cards)
        raise ScrapeError(f"{url}: model {model!r} is not served (served: {names})")
    length = chosen.get("max_model_len")
    return str(chosen["id"]), int(length) if isinstance(length, int) else None


async def stream_completion(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    prompt: list[int],
    max_tokens: int,
) -> RequestResult:
    """Send one streaming completion and time it. Errors are recorded, not raised (cancellation is)."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    result = RequestResult(prompt_tokens=len(prompt), max_tokens=max_tokens, started=time.monotonic())
    streamed = 0
    try:
        async with client.stream("POST", f"{base_url}/v1/completions", json=body) as response:
            if response.status_code != 200:
                text = (await response.aread())[:300].decode(errors="replace")
                result.error = f"HTTP {response.status_code}: {_error_message(text)}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                if chunk.get("choices"):
                    now = time.monotonic()
                    if result.first_token is None:
                        result.first_token = now
                    result.last_token = now
                    streamed += 1
                usage = chunk.get("usage")
                if usage and usage.get("completion_tokens") is not None:
                    result.output_tokens = int(usage["completion_tokens"])
    except (httpx.HTTPError, json.JSONDecodeError) as error:
        result.error = f"{type(error).__name__}: {error}"
        return result
    if not result.output_tokens:
        result.output_tokens = streamed
    result.finished = time.monotonic()
    return result


def _error_message(text: str) -> str:
    try:
        return str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return text.strip()
