"""How many KV blocks one sequence needs at its peak, and how many such sequences the cache holds.

Two measurements, both read from what vLLM reports directly:

* **lengths**: the mean prompt and generation lengths of finished requests, exact, from the ``_sum`` and
  ``_count`` of ``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens`` (the buckets are
  coarse -- a 1,024-token request counts as "up to 2,000" -- but the sums are not). A request holds
  ``prompt + generated - 1`` tokens of KV when it finishes (vLLM never computes the KV of the token it
  samples last), rounded up to whole blocks;
* **occupancy**: blocks in use per running sequence, ``usage x (num_gpu_blocks - 1) / running``
  (vllm 0.19.0 ``vllm/v1/core/block_pool.py: BlockPool.get_usage`` counts the null block out). Running
  sequences are at every stage of their life, so occupancy is a *lower* bound of the peak footprint; it
  catches a footprint the lengths miss (e.g. lengths missing from the page).

With prefix caching, shared blocks are counted once in occupancy but once per request in the lengths,
so the length estimate errs on the safe side. The capacity keeps the policy's headroom free:
``floor(usable_blocks x (1 - headroom) / footprint)``.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field


class LengthMeans(BaseModel):
    """Mean lengths of finished requests and how many requests they rest on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: float = Field(ge=0)
    generation: float = Field(ge=0)
    requests: float = Field(ge=0)


def length_means(
    prompt_sum: float | None, generation_sum: float | None, prompt_count: float, generation_count: float
) -> LengthMeans | None:
    """Exact means from the histograms' ``_sum``/``_count``; None without finished requests or sums."""
    if prompt_sum is None or generation_sum is None or prompt_count <= 0 or generation_count <= 0:
        return None
    if not all(math.isfinite(v) and v >= 0 for v in (prompt_sum, generation_sum, prompt_count, generation_count)):
        return None  # not counts (a pod's page is untrusted): no means rather than wrong ones
    return LengthMeans(
        prompt=prompt_sum / prompt_count,
        generation=generation_sum / generation_count,
        requests=min(prompt_count, generation_count),
    )


def bucket_mean(buckets: list[tuple[float, float]]) -> float | None:
    """Mean length from cumulative buckets alone, taking each bucket's upper bound (an over-estimate:
    used only where an engine reports buckets without their ``_sum``)."""
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return None
    weighted, previous_count, previous_bound = 0.0, 0.0, 0.0
    for bound, count in buckets:
        upper = bound if math.isfinite(bound) else previous_bound
        weighted += (count - previous_count) * upper
        previous_count, previous_bound = count, (bound if math.isfinite(bound) else previous_bound)
    return weighted / total


def peak_blocks(means: LengthMeans, block_size: int, max_model_len: int | None) -> int:
    """Blocks one mean request holds when it finishes."""
    tokens = max(1.0, means.prompt + means.generation - 1)
    if max_model_len is not None:
        tokens = min(tokens, float(max_model_len))
    return max(1, math.ceil(tokens / block_size))


def occupancy_blocks(usage: float | None, usable_blocks: int | None, running: float | None) -> float | None:
    """Blocks in use per running sequence right now (None when nothing runs or a signal is missing)."""
    if usage is None or usable_blocks is None or not running or running <= 0:
        return None
    return usage * usable_blocks / running


def capacity(usable_blocks: int, footprint_blocks: float, headroom: float) -> int:
    """Sequences at their peak footprint that fit with ``headroom`` of the blocks kept free."""
    return max(0, math.floor(usable_blocks * (1 - headroom) / footprint_blocks + 1e-9))
