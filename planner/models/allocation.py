"""What PyTorch's caching allocator adds to the weights vLLM measures ("Model loading took X GiB").

vLLM measures the weights as the growth of ``torch.cuda.max_memory_allocated()`` over ``load_model``
(``utils/mem_utils.py DeviceMemoryProfiler``; ``platforms/cuda.py get_current_memory_usage`` empties the
cache and resets the peak first, so it is the bytes allocated once loading ends). The allocator counts
the size of the *block* a tensor occupies, not the tensor's bytes (``c10/cuda/CUDACachingAllocator.cpp``):

* a request is rounded up to 512 bytes; up to 1 MiB it comes from 2 MiB segments of the small pool, up to
  10 MiB from 20 MiB segments of the large pool, above that from a segment of its own rounded up to 2 MiB;
* a large block is split only when more than 1 MiB would remain (``should_split``), so a tensor that ends
  at most 1 MiB short of a 2 MiB boundary keeps the whole rounded segment;
* with ``max_split_size_mb`` set, a request of at least that size is never split: it keeps its whole
  segment. vLLM 0.21+ loads the model under ``max_split_size_mb:20`` (``v1/worker/gpu_worker.py
  load_model``, ``_scoped_allocator_max_split``), so every tensor of 20 MiB or more is held rounded up to
  2 MiB (``Release.weights_max_split_mb``).

Each weight tensor is created on the device when the model is built (``initialize_model`` under the target
device) and filled in place, so the blocks follow from the tensors' shapes in creation order. A 7B model
with tensors off the 2 MiB grid (Qwen2.5-7B: 31.5 MiB fused QKV, 259 MiB gate/up) carries 56 MiB of
rounding up to 0.20 and 99 MiB from 0.21 (logged 14.25 and 14.29 GiB against 14.19 GiB of parameters);
a model whose tensors are 2 MiB multiples (Llama-3.1-8B) carries none.

Only layouts whose tensors are created once, at their final size, are simulated: unquantized checkpoints
and serialized fp8 checkpoints of dense models (the fp8 weights are used in place). Online quantization
(``--quantization fp8`` of a 16-bit checkpoint), repacked low-bit kernels (Marlin, MXFP4), MLA, Mamba,
vision towers and the other special layouts re-allocate or are not enumerated here: no rounding is added
for them (:func:`weight_blocks_overhead` returns 0), as before.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from planner.models.spec import ModelSpec
from planner.units import DTYPE_BYTES, cdiv

_MIN_BLOCK = 512
_SMALL_SIZE = 1 << 20  # largest request served from the small pool; also the split threshold of large blocks
_MIN_LARGE_ALLOC = 10 << 20  # requests below this share 20 MiB segments
_LARGE_BUFFER = 20 << 20
_ROUND_LARGE = 2 << 20
MiB = 1 << 20

# Serialized 8-bit checkpoints whose weights vLLM keeps where they were loaded on GPUs with fp8 kernels
# (compressed-tensors W8A8 FP8 process_fp8_weight_channel_strategy / _tensor_strategy: a transposed view;
# Fp8LinearMethod.process_weights_after_loading: replace_parameter with the same data): one byte a weight.
# Below SM 8.9 both repack the weights for Marlin (new tensors), which is not simulated.
_FP8_IN_PLACE = ("fp8", "compressed-tensors")


def allocated_bytes(requests: Iterable[int], *, max_split_bytes: int | None = None) -> int:
    """Bytes the caching allocator counts as allocated after ``requests`` (bytes, in order, none freed).

    Mirrors ``DeviceCachingAllocator::malloc``: round_size, the pool by size, the best-fitting cached
    block (``get_free_block``, with the ``max_split_size`` rules), a new segment of ``get_allocation_size``
    otherwise, and ``should_split``."""
    free: list[int] = []  # large-pool blocks left over by splits
    total = 0
    for request in requests:
        size = max(_MIN_BLOCK, cdiv(request, _MIN_BLOCK) * _MIN_BLOCK)
        if size <= _SMALL_SIZE:
            total += size  # small blocks split down to 512 bytes
            continue
        oversize = max_split_bytes is not None and size >= max_split_bytes
        index = bisect.bisect_left(free, size)
        block = None
        if index < len(free):
            candidate = free[index]
            usable = (
                max_split_bytes is None
                or (not oversize and candidate < max_split_bytes)
                or (oversize and candidate < size + _LARGE_BUFFER)
            )
            if usable:
                block = free.pop(index)
        if block is None:
            block = _LARGE_BUFFER if size < _MIN_LARGE_ALLOC else cdiv(size, _ROUND_LARGE) * _ROUND_LARGE
        remaining = block - size
        if not oversize and remaining > _SMALL_SIZE:
            total += size
            bisect.insort(free, remaining)
        else:
            total += block
    return total


def simulated(model: ModelSpec, *, quantized_in_place: bool) -> bool:
    """Whether :func:`weight_tensors` enumerates this model's tensors (see the module docstring)."""
    plain_attention = (
        model.mla is None
        and model.compressed_attention is None
        and model.mamba is None
        and model.vision is None
        and model.full_attention_head_dim is None
        and model.full_attention_kv_heads is None
        and model.kv_shared_layers == 0
        and not model.single_block_layers
        and model.model_type not in ("gpt_oss", "qwen3_next")
        and set(model.layer_pattern) <= set("FSC")
    )
    if not plain_attention:
        return False
    if model.quantization is None:
        return True
    return quantized_in_place and model.moe is None


def _layer_tensors(
    model: ModelSpec, index: int, tp: int, expert_ranks: int | None, wbytes: int, dbytes: int
) -> list[int]:
    """One decoder layer's tensors as vLLM creates them (``QKVParallelLinear``, ``RowParallelLinear``,
    ``MergedColumnParallelLinear``, ``FusedMoE`` w13/w2, the router, norms), bytes on one TP rank."""
    hidden = model.hidden_size
    heads = model.num_attention_heads // tp
    kv = max(1, model.num_kv_heads // tp)  # fewer KV heads than ranks: one replicated head per rank
    qkv_out = heads * model.head_dim + kv * (model.head_dim + model.head_size_v)
    out = [qkv_out * hidden * wbytes]
    if model.attention_bias:
        out.append(qkv_out * dbytes)
    out.append(hidden * heads * model.head_size_v * wbytes)
    matrices = 2 if model.mlp_gated else 1
    if model.is_moe_layer(index):
        moe = model.moe
        assert moe is not None
        # Expert parallelism: whole experts spread over the ranks; otherwise every expert, its width split.
        experts = moe.num_experts // expert_ranks if expert_ranks else moe.num_experts
        inter = moe.moe_intermediate_size if expert_ranks else moe.moe_intermediate_size // tp
        out.append(moe.num_experts * hidden * dbytes)  # router (ReplicatedLinear)
        out.append(experts * matrices * inter * hidden * wbytes)  # w13
        out.append(experts * hidden * inter * wbytes)  # w2
        if moe.num_shared_experts:
            # The shared experts are one MLP as wide as all of them together.
            shared = (moe.shared_expert_intermediate_size or moe.moe_intermediate_size) * moe.num_shared_experts
            out.append(matrices * shared // tp * hidden * wbytes)
            out.append(hidden * shared // tp * wbytes)
    elif model.intermediate_size:
        out.append(matrices * model.intermediate_size // tp * hidden * wbytes)
        out.append(hidden * model.intermediate_size // tp * wbytes)
    out.extend([hidden * dbytes, hidden * dbytes])  # input and post-attention norms
    return out


def weight_tensors(
    model: ModelSpec, *, dtype: str, tp: int, partition: list[int], stage: int, expert_ranks: int | None = None
) -> Iterator[int]:
    """Bytes of each weight tensor one TP rank of PP ``stage`` (``partition``: layers per stage) creates,
    in creation order: the embedding
    (first stage), each layer (with the RoPE cache after the first layer's projections, ``get_rope``
    caches one per model), the final norm and the LM head (last stage; tied embeddings reuse the
    embedding at PP = 1). ``expert_ranks``: the ranks whole experts are spread over with
    ``--enable-expert-parallel`` (None: each expert's width is split over TP)."""
    dbytes = DTYPE_BYTES[dtype]
    wbytes = 1 if model.quantization is not None else dbytes
    vocab = cdiv(model.vocab_size, 64) * 64 // tp  # VocabParallelEmbedding pads to 64, then shards
    pp = len(partition)
    first = sum(partition[:stage])
    if stage == 0:
        yield vocab * model.hidden_size * dbytes
    for offset, index in enumerate(range(first, first + partition[stage])):
        tensors = _layer_tensors(model, index, tp, expert_ranks, wbytes, dbytes)
        yield from tensors[:3] if model.attention_bias else tensors[:2]
        if offset == 0 and model.max_position_embeddings:
            rotary = model.rotary_dim or model.head_dim
            yield model.max_position_embeddings * rotary * dbytes
        yield from tensors[3:] if model.attention_bias else tensors[2:]
    if stage == pp - 1:
        yield model.hidden_size * dbytes
        if not (model.tie_word_embeddings and pp == 1):
            yield vocab * model.hidden_size * dbytes


def weight_blocks_overhead(
    model: ModelSpec,
    *,
    dtype: str,
    tp: int,
    partition: list[int],
    stage: int,
    max_split_mb: int | None,
    online_quantization: bool = False,
    native_fp8: bool = False,
    expert_ranks: int | None = None,
) -> int:
    """Bytes the allocator's blocks add to one rank's weights of ``stage`` (0 where not simulated).
    ``native_fp8``: the GPU runs fp8 GEMMs (SM 8.9+), so an fp8 checkpoint is not repacked for Marlin."""
    if online_quantization:
        return 0  # the 16-bit tensors are replaced after loading; their freed blocks take the new ones
    quant = model.quantization
    in_place = native_fp8 and quant is not None and quant.method in _FP8_IN_PLACE and quant.weight_bits == 8
    if not simulated(model, quantized_in_place=in_place):
        return 0
    sizes = list(weight_tensors(model, dtype=dtype, tp=tp, partition=partition, stage=stage, expert_ranks=expert_ranks))
    split = max_split_mb * MiB if max_split_mb is not None else None
    return allocated_bytes(sizes, max_split_bytes=split) - sum(sizes)
