"""In-memory memo of Hub lookups, one lookup in flight per model, and a deadline for the webhook.

The admission webhook may wait only a fraction of its ``timeoutSeconds`` for a model it does not know
(policy ``modelLookup.timeoutSeconds``, default 0.5 s). :func:`run_with_deadline` starts the lookup in a
daemon thread and stops *waiting* when the budget is spent; the lookup itself carries on, fills the
Hugging Face cache and this memo, and the next admission of the same model is answered from memory.
Concurrent requests for the same model share one lookup, and at most ``MAX_IN_FLIGHT`` lookups run at
once, so a slow or unreachable Hub cannot pile up threads.

Results for a commit sha never change and are kept until evicted; results for a branch or tag are kept
for ``BRANCH_TTL_S``; "does not exist" / "gated" / "its config.json is malformed or implausible" answers for
``NEGATIVE_TTL_S`` so a bad name (or a hostile repository) in a crash-looping Deployment does not hit the Hub on
every admission.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Generic, TypeVar

from planner.errors import (
    GatedModelError,
    HubUnavailableError,
    InvalidModelConfigError,
    ModelNotFoundError,
    ResolutionTimeoutError,
)

# concurrent.futures (and the logging it imports) only when a lookup runs with a deadline: a catalog
# model on the command line never needs it.
if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")

BRANCH_TTL_S = 600.0
NEGATIVE_TTL_S = 60.0
MAX_ENTRIES = 256
MAX_IN_FLIGHT = 8

_COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")


def ttl_for(revision: str | None) -> float | None:
    """How long a successful lookup of this revision stays valid (None: forever)."""
    return None if revision is not None and _COMMIT_SHA.match(revision) else BRANCH_TTL_S


class Memo(Generic[T]):
    """A small LRU of results and definitive failures with per-entry expiry (thread-safe)."""

    def __init__(self, max_entries: int = MAX_ENTRIES, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: OrderedDict[Hashable, tuple[T | None, BaseException | None, float | None]] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_entries
        self._clock = clock

    def get(self, key: Hashable) -> T | None:
        """The memoized result; re-raises a memoized definitive failure; None when absent or expired."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            value, error, expires = entry
            if expires is not None and self._clock() >= expires:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
        if error is not None:
            raise error
        return value

    def put(self, key: Hashable, value: T, ttl: float | None) -> None:
        self._store(key, (value, None, None if ttl is None else self._clock() + ttl))

    def put_failure(self, key: Hashable, error: BaseException) -> None:
        """Memoize a definitive failure: the repo does not exist, is gated, or its config.json was read and
        refused (malformed, over a bound of planner/models/bounds.py). Transient ones (network, timeouts) are not."""
        if isinstance(error, (ModelNotFoundError, GatedModelError, InvalidModelConfigError)):
            self._store(key, (None, error, self._clock() + NEGATIVE_TTL_S))

    def _store(self, key: Hashable, entry: tuple[T | None, BaseException | None, float | None]) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


class SingleFlight(Generic[T]):
    """Runs each keyed job at most once at a time, in a daemon thread."""

    def __init__(self, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self._flights: dict[Hashable, Future[T]] = {}
        self._lock = threading.Lock()
        self._max = max_in_flight

    def submit(self, key: Hashable, job: Callable[[], T], limit: int | None = None) -> Future[T]:
        """``limit``: a lower bound on lookups in flight for this caller (the webhook's HubLimits)."""
        with self._lock:
            running = self._flights.get(key)
            if running is not None:
                return running
            if len(self._flights) >= min(self._max, limit or self._max):
                raise HubUnavailableError(
                    f"{len(self._flights)} model lookups are already waiting on the Hub; not starting another.",
                    hint="The Hub or its mirror is slow or unreachable.",
                )
            from concurrent.futures import Future

            future: Future[T] = Future()
            self._flights[key] = future

        def work() -> None:
            try:
                result = job()
            except BaseException as error:  # handed to the waiting caller, never lost
                self._finish(key)
                future.set_exception(error)
            else:
                self._finish(key)
                future.set_result(result)

        threading.Thread(target=work, name="kv-planner-hub-lookup", daemon=True).start()
        return future

    def _finish(self, key: Hashable) -> None:
        with self._lock:
            self._flights.pop(key, None)

    def in_flight(self) -> int:
        with self._lock:
            return len(self._flights)


def run_with_deadline(
    flights: SingleFlight[T],
    key: Hashable,
    job: Callable[[], T],
    timeout: float,
    *,
    what: str,
    limit: int | None = None,
) -> T:
    """The job's result if it finishes within ``timeout`` seconds, else :class:`ResolutionTimeoutError`."""
    from concurrent.futures import TimeoutError as FutureTimeout

    future = flights.submit(key, job, limit)
    try:
        return future.result(timeout=max(timeout, 0.0))
    except FutureTimeout:
        raise ResolutionTimeoutError(
            f"{what} was not resolved within {timeout:g} s; the lookup continues in the background.",
            model=what,
        ) from None
