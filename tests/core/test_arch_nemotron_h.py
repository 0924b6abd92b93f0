"""Nemotron-H (Mamba-2 + attention + MLP blocks) planned as vLLM plans it, numbers derived by hand.

Facts: nvidia/NVIDIA-Nemotron-Nano-9B-v2's config.json fields (https://huggingface.co/nvidia/NVIDIA-Nemotron-Nano-9B-v2);
the catalog entry is the same parse.

vLLM 0.33:

* ``model_executor/models/nemotron_h.py``: one block per layer from ``hybrid_override_pattern``
  (``M`` Mamba-2, ``*`` attention, ``-`` MLP, ``E`` MoE; transformers 5 reads ``layers_block_type`` and gives the
  pattern back as a property): 27 Mamba, 4 attention, 25 MLP layers here;
* ``get_mamba_state_shape_from_config`` -> ``mamba_utils.py: mamba2_state_shape``: conv
  (128 x 80 + 2 x 8 x 128) = 12,288 x 3, temporal 128 heads x 80 x 128;
* ``model_executor/models/config.py: NemotronHForCausalLMConfig``: SSM state float32 unless the config says
  (``DEFAULT_MAMBA_SSM_CACHE_DTYPE``, 0.20+; float16 in 0.18/0.19): 12,288 x 3 x 2 + 128 x 80 x 128 x 4 =
  73,728 + 5,242,880 = 5,316,608 bytes per layer;
* ``platforms/interface.py: _align_hybrid_block_size``: 16 x cdiv(5,316,608, 16 x 4,096) = 16 x 82 = 1,312 tokens
  (8 KV heads x (128 + 128) x 2 bytes = 4,096 per token); Mamba page padded to 1,312 x 4,096 = 5,373,952;
* prefix caching on, ``mamba_cache_mode`` "align": ``MambaSpec`` keeps 2 blocks per request, and
  ``MambaMixer2.get_kv_cache_spec`` adds one prefill-checkpoint block: 3;
* groups: 27 Mamba vs 4 attention (27 >= 1.5 x 4): groups of 4, the Mamba bucket cut into 7 (one padding slot).
"""

from __future__ import annotations

from typing import Any

from planner.models.catalog import lookup_model
from planner.models.config import parse_config
from planner.plan.build import kv_report, predict
from planner.vllm.args import ServingArgs

GiB = 1 << 30

NEMOTRON_NANO_9B_V2: dict[str, Any] = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "torch_dtype": "bfloat16",
    "vocab_size": 131072,
    "hidden_size": 4480,
    "intermediate_size": 15680,
    "num_hidden_layers": 56,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 131072,
    "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
    "mamba_num_heads": 128,
    "mamba_head_dim": 80,
    "n_groups": 8,
    "ssm_state_size": 128,
    "conv_kernel": 4,
    "tie_word_embeddings": False,
}


def _kv(gpu, version: str, config: dict[str, Any] = NEMOTRON_NANO_9B_V2):  # type: ignore[no-untyped-def]
    spec = parse_config(config, model_id="nvidia/NVIDIA-Nemotron-Nano-9B-v2")
    prediction = predict(spec, gpu, ServingArgs(), vllm_version=version, available_override=[40 * GiB])
    return kv_report(spec, prediction)


def test_parse_and_catalog() -> None:
    spec = parse_config(NEMOTRON_NANO_9B_V2, model_id="nvidia/NVIDIA-Nemotron-Nano-9B-v2")
    assert (spec.count("M"), spec.count("F"), spec.count("N")) == (27, 4, 25)
    assert spec.single_block_layers
    entry = lookup_model("nemotron-nano-9b-v2")
    assert entry.model_dump(exclude={"source", "aliases", "notes"}) == spec.model_dump(
        exclude={"source", "aliases", "notes"}
    )


def test_layers_block_type_spelling_parses_the_same() -> None:
    # transformers 5 NemotronHConfig saves layers_block_type (linear_attention / full_attention / mlp / moe).
    names = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    config = {k: v for k, v in NEMOTRON_NANO_9B_V2.items() if k != "hybrid_override_pattern"}
    config["layers_block_type"] = [names[c] for c in str(NEMOTRON_NANO_9B_V2["hybrid_override_pattern"])]
    a = parse_config(config, model_id="x")
    b = parse_config(NEMOTRON_NANO_9B_V2, model_id="x")
    assert a.layer_pattern == b.layer_pattern and a.single_block_layers


def test_a100_layout_0_33(a100) -> None:  # type: ignore[no-untyped-def]
    # Bytes per block 4 x 5,373,952 = 21,495,808; 40 GiB // that = 1,998 blocks.
    # Per request at 131,072: attention cdiv(131072, 1312) = 100; 7 Mamba groups x 3 = 21; total 121.
    # 1,998 / 121 = 16.5123...; x 131,072 -> 2,164,312 tokens.
    kv = _kv(a100, "0.33.0")
    assert kv.block_size == 1_312
    assert [(g.kind, g.page_bytes, g.blocks_per_sequence_const) for g in kv.groups] == [("mamba", 5_373_952, 3)] * 7 + [
        ("full", 5_373_952, None)
    ]
    assert kv.bytes_per_block == 21_495_808
    assert kv.num_gpu_blocks == 1_998
    assert kv.blocks_per_request == 121
    assert kv.tokens == 2_164_312
    assert kv.state_bytes_per_sequence == 27 * 5_316_608


def test_ssm_dtype_default_follows_the_release(a100) -> None:  # type: ignore[no-untyped-def]
    # 0.19 NemotronHForCausalLMConfig: float16 by default: 73,728 + 128 x 80 x 128 x 2 = 2,695,168;
    # block 16 x cdiv(2,695,168, 65,536) = 16 x 42 = 672.
    assert _kv(a100, "0.19.0").block_size == 672
    # 0.10.0 has no such class: the model dtype (bf16), the same 672 here, and the config's own field wins
    # over every default.
    assert _kv(a100, "0.10.0").block_size == 672
    asks_float32 = {**NEMOTRON_NANO_9B_V2, "mamba_ssm_cache_dtype": "float32"}
    assert _kv(a100, "0.19.0", asks_float32).block_size == 1_312
