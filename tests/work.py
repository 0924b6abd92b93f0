"""Work counted, not timed: the Python calls a function makes (deterministic on a shared machine, where
wall-clock bounds flake; speed itself is measured by benchmarks/)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def python_calls(function: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """How many Python and C function calls ``function(*args, **kwargs)`` makes."""
    count = 0

    def tally(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(tally)
    try:
        function(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return count
