"""MXFP4 MoE expert weights as vLLM allocates them: padded to the kernel's tile sizes.

vLLM creates the expert tensors with the hidden and intermediate sizes rounded up for the MoE kernel
it selects (vllm 0.10.1.1 ``model_executor/layers/quantization/mxfp4.py: Mxfp4MoEMethod.create_weights``;
0.19.0/0.33.0 ``model_executor/layers/fused_moe/oracle/mxfp4.py:
mxfp4_round_up_hidden_size_and_intermediate_size``), so a checkpoint's size understates what is loaded:

* Ampere/Ada (Marlin; the OAI Triton kernels need SM90): intermediate to 128, hidden to 256;
* Blackwell (FlashInfer TRT-LLM): hidden to 256, intermediate to the release's alignment (256 up to
  0.19, 128 in 0.33);
* Hopper (OAI Triton ``matmul_ogs``): vLLM pads the intermediate size to 64 only; the Triton kernels'
  own swizzled layout pads further, which vLLM's source does not state, so it is not modelled (the
  safety margin's quantized-weights bound carries it, see planner/plan/margin.py).

Each element is 4 bits plus one uint8 scale per 32 (``mxfp4_block``).
"""

from __future__ import annotations

from planner.models.spec import ModelSpec
from planner.units import cdiv

_BYTES_PER_ELEMENT = 0.5 + 1 / 32


def _round_up(value: int, multiple: int) -> int:
    return cdiv(value, multiple) * multiple


def padded_sizes(
    hidden: int, intermediate: int, *, architecture: str, blackwell_intermediate_align: int
) -> tuple[int, int]:
    """(hidden, intermediate per rank) as vLLM allocates MXFP4 experts on this GPU architecture."""
    if architecture in ("ampere", "ada"):
        return _round_up(hidden, 256), _round_up(intermediate, 128)
    if architecture == "blackwell":
        return _round_up(hidden, 256), _round_up(intermediate, blackwell_intermediate_align)
    if architecture == "hopper":
        return hidden, _round_up(intermediate, 64)
    return hidden, intermediate


def padding_bytes_per_moe_layer(
    model: ModelSpec, *, tp: int, expert_shards: int, architecture: str, blackwell_intermediate_align: int
) -> int:
    """Extra bytes one MoE layer's MXFP4 experts take on one rank beyond the checkpoint's shapes."""
    moe, quant = model.moe, model.quantization
    if moe is None or quant is None or quant.method != "mxfp4":
        return 0
    # Experts are sliced by TP (each rank has every expert, I / tp wide) or, with expert parallel,
    # distributed whole.
    sliced = expert_shards == tp
    inter = moe.moe_intermediate_size // tp if sliced else moe.moe_intermediate_size
    experts = moe.num_experts if sliced else cdiv(moe.num_experts, expert_shards)
    hidden = model.hidden_size
    h_pad, i_pad = padded_sizes(
        hidden, inter, architecture=architecture, blackwell_intermediate_align=blackwell_intermediate_align
    )
    # w13: (2I, H), w2: (H, I)
    extra_elements = 3 * (h_pad * i_pad - hidden * inter)
    return int(experts * extra_elements * _BYTES_PER_ELEMENT)
