"""CUDA-graph memory: what vLLM's estimate subtracts from the KV budget (by default from 0.20).

vLLM captures one graph per capture size (see :func:`capture_sizes`). Piecewise graphs keep per-layer
buffers for every size, so graph memory grows with the layers on the rank and the number of sizes; MoE
layers keep larger fused-MoE buffers. ``--enforce-eager`` captures nothing.
"""

from __future__ import annotations

from functools import lru_cache

from planner.memory.coefficients import MemoryCoefficients


def capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int | None = None,
    rule: str = "v0_20",
    limit: int = 512,
    *,
    explicit_max: int | None = None,
    interactivity: bool = False,
) -> list[int]:
    """vLLM's default CUDA-graph capture sizes (``VllmConfig._set_cudagraph_sizes``), by release rule:

    * ``v0_8`` (0.8): ``[1, 2, 4] + range(8, 513, 8)``, at most max_num_batched_tokens;
    * ``v0_10`` (0.10-0.11.0): ``[1, 2, 4] + range(8, N + 1, 8)`` with ``N = min(2 x max_num_seqs, 512)``;
    * ``v0_12`` (0.11.1-0.19): ``[1, 2, 4] + range(8, 256, 8) + range(256, N + 1, 16)``;
    * ``v0_20`` (0.20-0.30): the same, plus max_num_batched_tokens when it is at most N;
    * ``v0_31`` (0.31+): also max_num_seqs (a uniform decode batch) when it is at most the default
      ceiling and at most max_num_batched_tokens.

    ``limit``: the default ceiling (512; 1024 on SM10x from 0.28, ``Release.capture_limit_sm100``).
    ``explicit_max``: ``--max-cudagraph-capture-size`` (0.11.1+), which replaces ``min(2 x max_num_seqs,
    limit)`` and drops 0.31's appended max_num_seqs (config/vllm.py computes the decode sizes only for the
    default). ``interactivity``: ``--performance-mode interactivity`` (0.17+) captures every size from 1 to
    ``min(N, 32)`` instead of ``[1, 2, 4]``.
    """
    tokens = max_num_batched_tokens if max_num_batched_tokens is not None else 1 << 30
    if rule == "v0_8":
        return [s for s in [1, 2, 4, *range(8, 513, 8)] if s <= tokens]
    largest = min(2 * max_num_seqs, limit)
    if rule == "v0_10":
        return [s for s in [1, 2, 4, *range(8, largest + 1, 8)] if s <= min(largest, tokens)]
    if explicit_max is not None:
        largest = explicit_max
    largest = min(largest, tokens)
    small = range(1, min(largest, 32) + 1) if interactivity else [1, 2, 4]
    sizes = sorted(
        {s for s in [*small, *range(8, min(largest + 1, 256), 8), *range(256, largest + 1, 16)] if s <= largest}
    )
    if (
        rule in ("v0_20", "v0_31")
        and max_num_batched_tokens is not None
        and max_num_batched_tokens <= largest
        and max_num_batched_tokens not in sizes
    ):
        sizes.append(max_num_batched_tokens)
    if (
        rule == "v0_31"
        and explicit_max is None
        and max_num_seqs <= limit
        and max_num_seqs <= tokens
        and max_num_seqs not in sizes
    ):
        sizes.append(max_num_seqs)
    return sorted(sizes)


def cuda_graph_bytes(
    *,
    layers_on_rank: int,
    moe_layers_on_rank: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    tp: int,
    enforce_eager: bool,
    coefficients: MemoryCoefficients,
    rule: str = "v0_20",
    limit: int = 512,
    explicit_max: int | None = None,
    interactivity: bool = False,
) -> int:
    if enforce_eager or layers_on_rank == 0:
        return 0
    count = _capture_count(max_num_seqs, max_num_batched_tokens, rule, limit, explicit_max, interactivity)
    scale = count / coefficients.cudagraph_reference_sizes
    per_rank_base = coefficients.cudagraph_base_bytes / max(1.0, tp**0.5)
    depth = coefficients.cudagraph_bytes_per_layer * layers_on_rank
    moe = coefficients.cudagraph_bytes_per_moe_layer * moe_layers_on_rank
    return int(per_rank_base + scale * (depth + moe))


@lru_cache(maxsize=1024)
def _capture_count(
    max_num_seqs: int,
    max_num_batched_tokens: int | None,
    rule: str,
    limit: int,
    explicit_max: int | None,
    interactivity: bool,
) -> int:
    # A few (max_num_seqs, max_num_batched_tokens) pairs per release recur in every plan and every release
    # of an unknown release's spread: the list is built once per set of inputs.
    return len(
        capture_sizes(
            max_num_seqs, max_num_batched_tokens, rule, limit, explicit_max=explicit_max, interactivity=interactivity
        )
    )
