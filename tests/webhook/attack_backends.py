"""Planning backends for the attack tests, importable by the webhook's worker processes."""

from __future__ import annotations

import os
import time
from typing import Any

from planner.policy.planning import CoreBackend

ATTACKER_MODEL = "attacker/endless"


class EndlessForAttacker(CoreBackend):
    """The real backend, except that planning the attacker's model never ends: it stands for any review
    that overruns its budget (a pathological manifest, a planner bug), without depending on a particular
    slow path that a later fix would remove."""

    def resolve_model(self, name: str, **kwargs: Any) -> Any:
        if name == ATTACKER_MODEL:
            while True:  # burns CPU, as a runaway planning step would (time.sleep would be "starved")
                sum(range(10_000))
        return super().resolve_model(name, **kwargs)


SLEEPY_MODEL = "attacker/sleepy"


class SleepyForAttacker(CoreBackend):
    """Planning the sleepy model waits 3 s without using CPU: a review on a CPU-starved machine."""

    def resolve_model(self, name: str, **kwargs: Any) -> Any:
        if name == SLEEPY_MODEL:
            time.sleep(3)
        return super().resolve_model(name, **kwargs)


CRASHING_MODEL = "attacker/crash"


class CrashingForAttacker(CoreBackend):
    """Planning the crashing model ends the worker process at once (a segfault in a native library, the
    kernel's OOM killer): the review in flight loses its worker."""

    def resolve_model(self, name: str, **kwargs: Any) -> Any:
        if name == CRASHING_MODEL:
            os._exit(3)
        return super().resolve_model(name, **kwargs)
