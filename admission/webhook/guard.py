"""uvicorn's HTTP/1.1 protocol with the bounds uvicorn lacks: a request read deadline and a connection cap.

uvicorn (0.54, ``protocols/http/h11_impl.py``) arms its keep-alive timer only after a response and
cancels it on the first byte of the next request, and counts idle connections against
``limit_concurrency``: 260 connections that send half a header and wait make every real review a 503.
Here instead:

- every request (header and body) must be read within ``request_timeout`` seconds of the connection
  opening or of the previous response; a slow client is dropped, however it trickles its bytes;
- at most ``max_connections`` connections are open; when one more arrives, the oldest connection that is
  not being answered (idle, or still sending its request) is closed to make room, so slow or idle
  connections can never lock out the API server;
- a client that disconnects mid-request is dropped without a traceback (app.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("kv_planner.webhook.http")


class GuardedH11Protocol(H11Protocol):
    """H11Protocol plus the read deadline and connection cap (settings from the uvicorn Config)."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._request_timeout: float = getattr(config, "request_timeout", 10.0)
        self._max_connections: int = getattr(config, "max_connections", 1000)
        self._on_drop: Callable[[str], None] = getattr(config, "on_drop", lambda reason: None)
        self._read_timer: asyncio.TimerHandle | None = None
        self._timed_cycle: Any = None
        self.opened_at = time.monotonic()

    # A connection is "answering" while a request has been read and its response is not complete.
    def answering(self) -> bool:
        cycle = self.cycle
        return cycle is not None and cycle is not self._timed_cycle and not cycle.response_complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self._max_connections:
            self._evict_one()
        super().connection_made(transport)
        self._arm()

    def _evict_one(self) -> None:
        candidates = [c for c in self.connections if isinstance(c, GuardedH11Protocol) and not c.answering()]
        if candidates:
            oldest = min(candidates, key=lambda c: c.opened_at)
            oldest.drop("excess")

    def drop(self, reason: str) -> None:
        self._on_drop(reason)
        self._disarm()
        self.connections.discard(self)
        if not self.transport.is_closing():
            self.transport.close()

    def _arm(self) -> None:
        self._disarm()
        self._timed_cycle = self.cycle
        self._read_timer = self.loop.call_later(self._request_timeout, self.drop, "slow")

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        cycle = self.cycle
        # The request is fully read once a new cycle has received its whole body.
        if (
            self._read_timer is not None
            and cycle is not None
            and cycle is not self._timed_cycle
            and not cycle.more_body
        ):
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)
