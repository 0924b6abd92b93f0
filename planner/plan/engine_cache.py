"""A bounded cache of engine stages across plans, for a long-lived planner (the admission webhook's backend).

Why: a review of a never-seen workload is a known model on a known GPU with a new ``--max-model-len``, and it
plans that deployment several times (as written, with the ``--max-num-seqs`` it emits, with the utilization
it fills): each plan ran the whole engine stage again (KV specs and grouping, weights, the memory terms),
though the engine reads the limits and the utilization only through the resolved batch values
(:class:`planner.plan.engine.EngineBase`). Planned once per model, GPU, release and flags but those, the
engine stage is shared by every context and count that resolves to the same batch values.

Unlike the sweep's :class:`~planner.plan.engine.EngineMemo` (one model and set of flags, GPUs alike but in
memory, unbounded for the length of one sweep), this cache is keyed by the exact GPU, release and
coefficients, and bounded: its keys come from manifests, which are untrusted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import MemoryCoefficients
from planner.models.spec import ModelSpec
from planner.plan.engine import (
    EngineBase,
    EngineLayout,
    base_fields,
    batch_fields,
    compute_engine,
    engine_base,
    engine_with_batch,
)
from planner.vllm.args import ServingArgs
from planner.vllm.defaults import ResolvedArgs
from planner.vllm.releases import Release, Version

# Engine bases kept: one per model, GPU, release and flags but the limits (the webhook sees a few dozen
# models on a handful of GPUs and releases).
MAX_BASES = 256
# Engine stages kept: a base's batch sizes (the count emitted changes them) and, for vision models, its
# context (the encoder's profile reads it).
MAX_ENGINES = 1024
# The flags the engine reads only through ResolvedArgs (the batch values and the budget), left out of the key.
_THROUGH_RESOLVED = frozenset({"max_model_len", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization"})

V = TypeVar("V")


class _Lru(Generic[V]):
    """Least recently used entries dropped beyond ``size``; each entry keeps the objects whose ``id`` is in
    its key alive (so an id cannot be reused while cached) and is found only by those same objects."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[Hashable, tuple[tuple[object, ...], V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, owners: tuple[object, ...]) -> V | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None or any(a is not b for a, b in zip(found[0], owners, strict=True)):
                return None
            self._entries.move_to_end(key)
            return found[1]

    def put(self, key: Hashable, owners: tuple[object, ...], value: V) -> None:
        with self._lock:
            self._entries[key] = (owners, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def flags_key(args: ServingArgs) -> str | None:
    """The flags the engine reads from ``args`` itself, as text (``repr`` tells 1, 1.0, True, inf and None
    apart); None when a value cannot be written (an integer past Python's digit limit): not cached then."""
    try:
        return repr([value for name, value in args.__dict__.items() if name not in _THROUGH_RESOLVED])
    except ValueError:
        return None


class EngineCache:
    """Engine stages by model, GPU, release, version, coefficients and flags (without corrections or a drafter
    model, as :func:`planner.plan.build.limited_stage` asks): the same ``engine`` call as ``EngineMemo``'s."""

    def __init__(self, *, max_bases: int = MAX_BASES, max_engines: int = MAX_ENGINES) -> None:
        self.bases: _Lru[EngineBase] = _Lru(max_bases)
        self.engines: _Lru[EngineLayout] = _Lru(max_engines)

    def engine(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        args: ServingArgs,
        release: Release,
        resolved: ResolvedArgs,
        *,
        coefficients: MemoryCoefficients,
        version: Version | None,
    ) -> EngineLayout:
        flags = flags_key(args)
        if flags is None:
            return compute_engine(model, gpu, args, release, resolved, coefficients=coefficients, version=version)
        owners = (model, gpu, release, coefficients)
        number = None if version is None else version.key()
        base_key = (id(model), id(gpu), id(release), id(coefficients), number, flags, base_fields(resolved))
        base = self.bases.get(base_key, owners)
        if base is None:
            base = engine_base(model, gpu, args, release, resolved, coefficients=coefficients, version=version)
            self.bases.put(base_key, owners, base)
        key = (base_key, *batch_fields(base, resolved))
        found = self.engines.get(key, owners)
        if found is None:
            found = engine_with_batch(base, gpu, args, release, resolved, coefficients=coefficients)
            self.engines.put(key, owners, found)
        return found
