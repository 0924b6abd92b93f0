"""Bounds on one Hub lookup, for callers that resolve models named by untrusted input (the webhook).

Anyone can publish a Hub repo: a 300 MB ``config.json``, a 24 MB safetensors header, an index that
lists 2,000 shards. A lookup under a :class:`LookupBudget` is stopped (:class:`HubLimitError`, a
:class:`~planner.errors.ModelResolutionError`: "not checked", never a denial) as soon as it would exceed
any of: requests, bytes received in all, bytes of one file by kind, wall time, or shards read. The
budget rides on a context variable and is enforced by an httpx transport that huggingface_hub's client
is built with (:func:`install`), so every request huggingface_hub makes counts, whatever the call.
Outside a budget (the CLI, where the user chose the model) nothing is limited.

:func:`bound_cache` keeps the on-disk Hugging Face cache under a size by removing the least recently
used repos: with at most ``max_concurrent`` lookups of at most ``max_bytes`` each in flight, the cache
never outgrows ``max_cache_bytes + max_concurrent * max_bytes`` (the chart mounts 256 MiB).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import httpx

from planner.errors import ModelResolutionError
from planner.hub.settings import HubLimits

log = logging.getLogger(__name__)


class HubLimitError(ModelResolutionError):
    """A lookup went over one of its :class:`HubLimits` (the repo is not read further)."""


class LookupBudget:
    """What one lookup may still use (thread-safe: shard headers are read in parallel)."""

    def __init__(self, limits: HubLimits, what: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.what = what
        self._clock = clock
        self.deadline = clock() + limits.max_seconds
        self.requests = 0
        self.received = 0
        self._lock = threading.Lock()

    def _fail(self, text: str) -> HubLimitError:
        return HubLimitError(f"{self.what}: {text}; the repo is not read further", model=self.what)

    def on_request(self) -> float:
        """Count a request; the seconds left for it."""
        with self._lock:
            self.requests += 1
            if self.requests > self.limits.max_requests:
                raise self._fail(f"more than {self.limits.max_requests} Hub requests")
        left = float(self.deadline - self._clock())
        if left <= 0:
            raise self._fail(f"lookup took longer than {self.limits.max_seconds:g} s")
        return left

    def on_bytes(self, count: int) -> None:
        with self._lock:
            self.received += count
            if self.received > self.limits.max_bytes:
                raise self._fail(f"more than {self.limits.max_bytes} bytes from the Hub")

    def file_cap(self, path: str) -> tuple[int, str]:
        """The largest response allowed for a URL path, and what it is."""
        name = path.rsplit("/", 1)[-1]
        if name == "config.json":
            return self.limits.max_config_bytes, "config.json"
        if name.endswith(".safetensors"):
            return self.limits.max_header_bytes, "safetensors header"
        if name.endswith(".json"):
            return self.limits.max_index_bytes, name
        return self.limits.max_bytes, name

    def check_size(self, size: int, path: str) -> None:
        cap, what = self.file_cap(path)
        if size > cap:
            raise self._fail(f"{what} of {size} bytes is over {cap}")

    def check_shards(self, count: int) -> None:
        if count > self.limits.max_shards:
            raise self._fail(f"{count} safetensors shards are over {self.limits.max_shards}")


_CURRENT: ContextVar[LookupBudget | None] = ContextVar("kv_planner_hub_budget", default=None)


def current_budget() -> LookupBudget | None:
    return _CURRENT.get()


@contextlib.contextmanager
def budget_scope(budget: LookupBudget | None) -> Iterator[None]:
    """Run the block (in this thread) under ``budget``; None: unbounded."""
    token = _CURRENT.set(budget)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class _CountedStream(httpx.SyncByteStream):
    def __init__(self, inner: Any, budget: LookupBudget, path: str) -> None:
        self._inner = inner
        self._budget = budget
        self._path = path
        self._seen = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._seen += len(chunk)
            self._budget.check_size(self._seen, self._path)
            self._budget.on_bytes(len(chunk))
            yield chunk

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if callable(close):
            close()


class BudgetTransport(httpx.BaseTransport):
    """An httpx transport that enforces the current thread's :class:`LookupBudget` (if any)."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        budget = _CURRENT.get()
        if budget is None:
            return self._inner.handle_request(request)
        left = budget.on_request()
        timeouts = dict(request.extensions.get("timeout") or {})
        request.extensions["timeout"] = {
            key: min(left, value) if isinstance(value, (int, float)) else left
            for key, value in {"connect": None, "read": None, "write": None, "pool": None, **timeouts}.items()
        }
        response = self._inner.handle_request(request)
        path = request.url.path
        # HEAD answers carry the file's size before anything is downloaded; GETs are counted as they stream.
        length = response.headers.get("x-linked-size") if request.method == "HEAD" else None
        length = length or response.headers.get("content-length")
        # (a HEAD of a weight file announces the whole file; only its header is ever read, by range)
        whole_weights = request.method == "HEAD" and path.endswith(".safetensors")
        if length is not None and length.isdigit() and not whole_weights and not 300 <= response.status_code < 400:
            try:
                budget.check_size(int(length), path)
            except HubLimitError:
                response.close()
                raise
        response.stream = _CountedStream(response.stream, budget, path)
        return response

    def close(self) -> None:
        self._inner.close()


_INSTALLED: list[bool] = []  # [True] once installed in this process
_INSTALL_LOCK = threading.Lock()


def install() -> bool:
    """Make huggingface_hub's shared client enforce budgets (once per process). False when this
    huggingface_hub has no client factory (before 1.0): lookups then run without the HTTP bounds."""
    with _INSTALL_LOCK:
        if _INSTALLED:
            return True
        try:
            from huggingface_hub import set_client_factory
            from huggingface_hub.utils import _http as hf_http
        except ImportError:
            return False
        hook = getattr(hf_http, "hf_request_event_hook", None)

        def factory() -> httpx.Client:
            return httpx.Client(
                transport=BudgetTransport(httpx.HTTPTransport()),
                event_hooks={"request": [hook]} if hook is not None else {},
                follow_redirects=True,
                timeout=None,
            )

        set_client_factory(factory)
        _INSTALLED.append(True)
        return True


def bound_cache(folders: list[Path], max_bytes: int) -> int:
    """Remove least recently used repo folders (``models--org--name``) under ``folders`` until their
    files together take at most ``max_bytes``; the bytes left."""
    repos: list[tuple[float, int, Path]] = []
    for folder in folders:
        if not folder.is_dir():
            continue
        for child in folder.iterdir():
            if child.is_dir() and child.name.startswith("models--"):
                size, newest = _usage(child)
                repos.append((newest, size, child))
    total = sum(size for _, size, _ in repos)
    for _, size, path in sorted(repos):
        if total <= max_bytes:
            break
        shutil.rmtree(path, ignore_errors=True)
        total -= size
        log.info("evicted %s from the model cache (%d bytes)", path.name, size)
    return total


def _usage(path: Path) -> tuple[int, float]:
    size, newest = 0, 0.0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                stat = os.lstat(os.path.join(root, name))
                if not os.path.islink(os.path.join(root, name)):
                    size += stat.st_size
                newest = max(newest, stat.st_mtime)
    return size, newest
