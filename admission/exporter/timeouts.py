"""Each target's share of a scrape's deadline, derived from how that target has answered.

The whole collection has one deadline (Prometheus' scrape timeout minus the offset). Within it, a
target gets ``min(time left, its own timeout)``, where its own timeout is:

* ``factor`` x the slowest of its recent successful reads, kept between ``floor_s`` and ``cap_s``:
  a pod that answers in 30 ms gets ``floor_s`` (1 s by default), a pod that needs 1.2 s under load gets
  4.8 s, so slowness that is normal for it is never reported as down;
* ``floor_s`` when none of its recent reads succeeded (a hung or dead target stops costing more than
  the floor after one read: one hung pod among 50 healthy ones keeps the scrape near 1 s);
* ``cap_s`` before its first read (nothing is known yet; bounded by the deadline anyway).

"Recent" is the last ``window`` reads, so a target that hangs ages out of its history within a few
scrapes, and one that recovers earns its time back on its first success.
"""

from __future__ import annotations

import threading
from collections import deque

from pydantic import BaseModel, ConfigDict, Field


class TimeoutPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    floor_s: float = Field(default=1.0, gt=0, description="a target's timeout unless its history asks for more")
    cap_s: float = Field(default=5.0, gt=0, description="the most any one target is given")
    factor: float = Field(default=4.0, ge=1.0)
    window: int = Field(default=5, ge=1)


class TargetTimeouts:
    """Per-target read history (thread-safe: the retuner reads from another task of the same loop or
    a test's own loop)."""

    def __init__(self, policy: TimeoutPolicy) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._history: dict[str, deque[float | None]] = {}

    def timeout_for(self, url: str) -> float:
        p = self.policy
        with self._lock:
            history = self._history.get(url)
            if history is None:
                return max(p.floor_s, p.cap_s)
            successes = [d for d in history if d is not None]
        if not successes:
            return p.floor_s
        return min(max(p.floor_s, p.factor * max(successes)), max(p.floor_s, p.cap_s))

    def record(self, url: str, duration_s: float | None) -> None:
        """A read's duration, or None when it failed (timeouts and every other failure)."""
        with self._lock:
            history = self._history.setdefault(url, deque(maxlen=self.policy.window))
            history.append(duration_s)

    def forget_except(self, urls: set[str]) -> None:
        with self._lock:
            for url in [u for u in self._history if u not in urls]:
                del self._history[url]
