"""A bounded memo keyed by an object's identity, for per-model invariants of the planning arithmetic.

Catalog specs are frozen pydantic models: hashing one walks every field, which costs more than most of
the arithmetic it would save. Identity is enough — the same spec object asks the same question — and
each entry keeps its key object alive, so an ``id`` cannot be reused by another object while cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class IdentityMemo(Generic[T]):
    """``get(obj, extra, compute)``: ``compute()`` once per (obj identity, extra), least recently used
    entries dropped beyond ``size``. Only for pure computations whose result is never mutated."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._entries: OrderedDict[tuple[int, Hashable], tuple[object, T]] = OrderedDict()

    def get(self, obj: object, extra: Hashable, compute: Callable[[], T]) -> T:
        key = (id(obj), extra)
        found = self._entries.get(key)
        if found is not None and found[0] is obj:
            self._entries.move_to_end(key)
            return found[1]
        value = compute()
        self._entries[key] = (obj, value)
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        self._entries.clear()
