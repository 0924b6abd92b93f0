"""Fetch every target's ``/metrics`` concurrently, each inside the time left of the scrape's deadline.

A target that hangs, refuses, answers 500, sends too much, sends a broken page or one beyond the read
limits becomes a *down* observation with a reason; the others are unaffected. Nothing here raises.

Connection reuse cannot race the server's idle close: pooled connections are dropped after
:data:`KEEPALIVE_EXPIRY_S` (vLLM's server closes idle ones after 5 s, vllm X.Y.Z ``vllm/envs.py:
VLLM_HTTP_TIMEOUT_KEEP_ALIVE``, passed to uvicorn as ``timeout_keep_alive``), and a request that fails
before any response byte with a symptom of a connection closed under it (the server hung up, a read or
write on a dead socket) is retried once on a fresh connection if the deadline allows.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import httpx

from admission.exporter.normalize import ReadLimits, parse_page_steps
from admission.observations.model import EngineObservation, ErrorReason, TargetObservation
from admission.observations.targets import Target
from planner.errors import ExpositionLimitError, ScrapeError

ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"
# No compression: a body is bounded as it arrives, and a compressed one is refused (see _fetch).
_HEADERS = {"Accept": ACCEPT, "Accept-Encoding": "identity"}
# Well below the 5 s of vLLM/uvicorn (and the 60 s+ of common proxies): an idle pooled connection is
# closed by us long before the server may close it.
KEEPALIVE_EXPIRY_S = 2.0
# What a request on a connection the server closed meanwhile looks like (nothing was answered).
_STALE_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class _Failed(Exception):
    def __init__(self, reason: ErrorReason, detail: str) -> None:
        super().__init__(detail)
        self.reason: ErrorReason = reason
        self.detail = detail


class _Stale(Exception):
    """The request failed before any response arrived, as on a connection closed by the server."""

    def __init__(self, error: httpx.HTTPError) -> None:
        super().__init__(str(error))
        self.error = error


async def _fetch(client: httpx.AsyncClient, url: str, max_bytes: int) -> str:
    answered = False
    try:
        async with client.stream("GET", url, headers=_HEADERS) as response:
            answered = True
            if response.status_code != 200:
                raise _Failed("http_status", f"HTTP {response.status_code}")
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                # Asked for none (vLLM's prometheus_client compresses only when asked): a compressed body
                # would have to be inflated to be read, 1 MiB of it into 1 GiB.
                raise _Failed("parse", f"Content-Encoding {encoding[:40]!r}, not asked for")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise _Failed("too_large", f"Content-Length {declared} is more than {max_bytes} bytes")
            body = bytearray()
            async for chunk in response.aiter_bytes():  # (identity: nothing is inflated)
                body.extend(chunk)
                if len(body) > max_bytes:
                    raise _Failed("too_large", f"more than {max_bytes} bytes")
    except httpx.TimeoutException as error:
        raise _Failed("timeout", f"timed out ({type(error).__name__})") from None
    except _STALE_CONNECTION as error:
        if not answered:
            raise _Stale(error) from None
        raise _Failed("connect", f"{type(error).__name__}: {error}") from None
    except httpx.HTTPError as error:
        raise _Failed("connect", f"{type(error).__name__}: {error}") from None
    return body.decode("utf-8", errors="replace")


async def _fetch_with_retry(client: httpx.AsyncClient, url: str, max_bytes: int) -> str:
    try:
        return await _fetch(client, url, max_bytes)
    except _Stale:
        pass  # one more try on a new connection (the pool dropped the dead one)
    try:
        return await _fetch(client, url, max_bytes)
    except _Stale as stale:
        raise _Failed("connect", f"{type(stale.error).__name__}: {stale.error}") from None


def _down_reason(error: ScrapeError) -> ErrorReason:
    if isinstance(error, ExpositionLimitError):
        # (a line of a read family is long only through its labels' values: the values are bounded too)
        return "label_too_long" if error.reason in ("label_too_long", "line_too_long") else "too_many_series"
    if "no vLLM metrics" in error.message:
        return "not_vllm"
    return "parse"


async def scrape_one(
    client: httpx.AsyncClient,
    target: Target,
    *,
    deadline: float,
    timeout_s: float,
    max_bytes: int,
    limits: ReadLimits | None = None,
) -> TargetObservation:
    started = time.monotonic()
    remaining = min(timeout_s, deadline - started)

    def down(reason: ErrorReason, detail: str) -> TargetObservation:
        return TargetObservation(
            target=target, up=False, error=reason, detail=detail, duration_s=time.monotonic() - started
        )

    if remaining <= 0:
        return down("budget", "no time left in the scrape budget")
    try:
        text = await asyncio.wait_for(_fetch_with_retry(client, target.url, max_bytes), remaining)
    except asyncio.TimeoutError:
        return down("timeout", f"no complete answer within {remaining:.2f} s")
    except _Failed as failure:
        return down(failure.reason, failure.detail)
    # Reading the page is part of the target's time too: a page that is slow to read (every line at the
    # read limits) costs its own target's time, in slices, and not the other targets'.
    left = max(0.0, remaining - (time.monotonic() - started))
    try:
        engines, missing = await asyncio.wait_for(_read(text, limits), left)
    except asyncio.TimeoutError:
        return down("timeout", f"a page of {len(text)} characters not read within {remaining:.2f} s")
    except ScrapeError as error:
        return down(_down_reason(error), error.message)
    return TargetObservation(
        target=target, up=True, engines=engines, missing=missing, duration_s=time.monotonic() - started
    )


# How long a read runs before it gives the event loop back (checked every few lines): short enough that
# the other targets' reads and timers are not held up, long enough that a healthy page (~2 ms to read) is
# read in one or two slices (a yield every 64 lines cost ~10% more CPU per scrape of 50 targets).
_SLICE_S = 0.002


async def _read(text: str, limits: ReadLimits | None) -> tuple[list[EngineObservation], list[str]]:
    """parse_page in slices of :data:`_SLICE_S`: the other targets' reads and timers run in between, and a
    cancelled read stops at the next slice."""
    steps = parse_page_steps(text, limits)
    slice_end = time.perf_counter() + _SLICE_S
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if time.perf_counter() >= slice_end:
            await asyncio.sleep(0)
            slice_end = time.perf_counter() + _SLICE_S


async def scrape_all(
    client_for: Callable[[Target], httpx.AsyncClient],
    targets: Sequence[Target],
    *,
    budget_s: float,
    timeout_for: Callable[[Target], float],
    max_bytes: int,
    concurrency: int,
    limits: ReadLimits | None = None,
) -> list[TargetObservation]:
    """Every target, each within ``min(timeout_for(target), time left before the collection's deadline)``.

    The deadline is ``budget_s`` from now for the whole collection: a target waiting for a free slot
    (``concurrency``) gets only what is left, so the collection ends on time whatever any target does.
    """
    deadline = time.monotonic() + budget_s
    gate = asyncio.Semaphore(max(1, concurrency))

    async def guarded(target: Target) -> TargetObservation:
        async with gate:
            return await scrape_one(
                client_for(target),
                target,
                deadline=deadline,
                timeout_s=timeout_for(target),
                max_bytes=max_bytes,
                limits=limits,
            )

    return list(await asyncio.gather(*(guarded(t) for t in targets)))
