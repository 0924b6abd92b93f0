"""DeepSeek-V3.2: the sparse-attention indexer's K cache counted as vLLM 0.33 counts it.

vLLM 0.33 (``model_executor/models/deepseek_v2.py``, ``models/deepseek_v32/attention.py``):

* ``is_v32 = hasattr(config, "index_topk")``; every layer (``index_topk_freq`` 1) builds an ``Indexer`` whose
  ``k_cache`` is a ``DeepseekV32IndexerCache(head_dim = index_head_dim + index_head_dim // 128 * 4,
  dtype=torch.uint8)``: 128 fp8 values + one float32 scale = 132 bytes per token, whatever the KV dtype;
* its ``get_kv_cache_spec`` is an ``MLAAttentionSpec(num_kv_heads=1, max_tp_shards=1, head_size=132)``
  (``cache_role=INDEXER``); MLA keeps ``head_size_v = 0`` (``v1/kv_cache_interface.py``), so the page is
  block_size x 132 bytes, beside the latent cache's block_size x 576 x 2 bytes (bf16);
* ``v1/core/kv_cache_planning.py: get_kv_cache_groups``: both are full-attention specs with one block size,
  so ``UniformTypeKVCacheSpecs.from_specs`` puts all 122 caches (61 latent + 61 indexer) in one group whose
  page is their sum; ``_get_kv_cache_bytes_per_block`` (layer-outer ``LBNHC`` layout): the summed pages;
* block size: ``DeepseekV32IndexerBackend.get_supported_kernel_block_sizes`` is ``[64]`` on CUDA and
  ``platforms/interface.py: _preferred_block_size_for_backends`` picks the size all backends accept: 64;
* one request at max_model_len: ``UniformTypeKVCacheSpecs.max_memory_usage_bytes`` = cdiv(len, 64) pages.
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.errors import UnsupportedArchitectureError
from planner.models.catalog import lookup_model
from planner.models.config import parse_config
from planner.plan.build import kv_report, predict
from planner.vllm.args import ServingArgs
from tests.conftest import load_shared_config

GiB = 1 << 30


def _v32_config() -> dict[str, Any]:
    config = load_shared_config("deepseek-ai--DeepSeek-V3")
    # DeepSeek-V3.2 = V3's architecture plus the indexer fields (deepseek-ai/DeepSeek-V3.2-Exp config.json).
    return {
        **config,
        "architectures": ["DeepseekV32ForCausalLM"],
        "model_type": "deepseek_v32",
        "index_head_dim": 128,
        "index_n_heads": 64,
        "index_topk": 2048,
    }


def test_parse_and_catalog() -> None:
    spec = parse_config(_v32_config(), model_id="deepseek-ai/DeepSeek-V3.2")
    assert spec.mla is not None
    assert spec.mla.indexer_head_dim == 128
    assert spec.mla.indexer_bytes_per_token == 132  # 128 + 128 // 128 x 4
    entry = lookup_model("deepseek-v3.2")
    assert entry.model_dump(exclude={"source", "aliases", "notes"}) == spec.model_dump(
        exclude={"source", "aliases", "notes"}
    )


def test_indexer_cache_counted_0_33(h100) -> None:  # type: ignore[no-untyped-def]
    # Per layer per token: latent 576 x 2 B = 1,152 + indexer 132 = 1,284. Block 64: page 82,176 per layer.
    # One group of 61 layers: 61 x 82,176 = 5,012,736 bytes per block (TP 8: MLA and indexer are never split).
    # 40 GiB = 42,949,672,960 // 5,012,736 = 8,568 blocks. Per request at 163,840: cdiv(163840, 64) = 2,560.
    # Concurrency 8,568 / 2,560 = 3.346875; tokens int(3.346875 x 163,840) = 548,352.
    spec = parse_config(_v32_config(), model_id="deepseek-ai/DeepSeek-V3.2")
    prediction = predict(
        spec, h100, ServingArgs(tensor_parallel_size=8), vllm_version="0.33.0", available_override=[40 * GiB]
    )
    kv = kv_report(spec, prediction)
    assert [(g.kind, g.num_layers, g.page_bytes, g.block_size) for g in kv.groups] == [("full", 61, 82_176, 64)]
    assert kv.bytes_per_block == 5_012_736
    assert kv.num_gpu_blocks == 8_568
    assert kv.blocks_per_request == 2_560
    assert kv.tokens == 548_352
    assert kv.max_concurrency == pytest.approx(3.346875)
    assert kv.bytes_per_token == 61 * 1_284


def test_indexer_stays_uint8_with_fp8_ds_mla(h100) -> None:  # type: ignore[no-untyped-def]
    # fp8_ds_mla latent: 656 B/token (512 fp8 + 4 x float32 scales + 64 x bf16 RoPE); the indexer keeps 132.
    # Per block: 61 x 64 x (656 + 132) = 3,076,352; 40 GiB // that = 13,961 blocks.
    spec = parse_config(_v32_config(), model_id="deepseek-ai/DeepSeek-V3.2")
    prediction = predict(
        spec,
        h100,
        ServingArgs(tensor_parallel_size=8, kv_cache_dtype="fp8_ds_mla"),
        vllm_version="0.33.0",
        available_override=[40 * GiB],
    )
    kv = kv_report(spec, prediction)
    assert kv.bytes_per_block == 3_076_352
    assert kv.num_gpu_blocks == 13_961


def test_plain_v3_is_unchanged() -> None:
    config = load_shared_config("deepseek-ai--DeepSeek-V3")
    spec = parse_config(config, model_id="deepseek-ai/DeepSeek-V3")
    assert spec.mla is not None and spec.mla.indexer_head_dim is None and spec.mla.indexer_bytes_per_token == 0


def test_indexer_on_some_layers_is_refused() -> None:
    with pytest.raises(UnsupportedArchitectureError, match="index_topk_freq"):
        parse_config({**_v32_config(), "index_topk_freq": 2}, model_id="x")
