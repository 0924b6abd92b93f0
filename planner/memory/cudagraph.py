"""CUDA-graph memory: what vLLM's estimate subtracts from the KV budget (from 0.20 by default).

vLLM captures one graph per capture size (``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)``
with ``max = min(2 x max_num_seqs, 512)``). Piecewise graphs keep per-layer buffers for every size, so
graph memory grows with the layers on the rank and the number of sizes; MoE layers keep larger
fused-MoE buffers. ``--enforce-eager`` captures nothing.
"""

from __future__ import annotations

from planner.memory.coefficients import MemoryCoefficients


def capture_sizes(max_num_seqs: int, limit: int = 512) -> list[int]:
    """vLLM's default CUDA-graph capture sizes for decode (``VllmConfig._set_cudagraph_sizes``)."""
    largest = min(2 * max_num_seqs, limit)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    return [s for s in sizes if s <= largest]


def cuda_graph_bytes(
    *,
    layers_on_rank: int,
    moe_layers_on_rank: int,
    max_num_seqs: int,
    tp: int,
    enforce_eager: bool,
    coefficients: MemoryCoefficients,
    capture_limit: int = 512,
) -> int:
    if enforce_eager or layers_on_rank == 0:
        return 0
    scale = len(capture_sizes(max_num_seqs, capture_limit)) / coefficients.cudagraph_reference_sizes
    per_rank_base = coefficients.cudagraph_base_bytes / max(1.0, tp ** 0.5)
    depth = coefficients.cudagraph_bytes_per_layer * layers_on_rank
    moe = coefficients.cudagraph_bytes_per_moe_layer * moe_layers_on_rank
    return int(per_rank_base + scale * (depth + moe))
