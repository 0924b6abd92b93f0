"""Safetensors header arithmetic: exact bytes per dtype, packed 4-bit formats, corrupt files."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
import safetensors
from hub_builders import header_only, real_safetensors, tensor_bytes
from safetensors.numpy import load_file, save_file

from planner.errors import ModelNotFoundError, ModelResolutionError
from planner.models.checkpoint import (
    DTYPE_BITS,
    SafetensorsHeader,
    TensorMeta,
    read_local_checkpoint,
    read_safetensors_header,
    select_weight_files,
    summarize_checkpoint,
)


def _header(name: str, tensors: dict[str, tuple[str, tuple[int, ...]]]) -> SafetensorsHeader:
    metas: dict[str, TensorMeta] = {}
    offset = 0
    for key, (dtype, shape) in tensors.items():
        nbytes = math.prod(shape) * DTYPE_BITS[dtype] // 8
        metas[key] = TensorMeta(dtype, shape, offset, offset + nbytes)
        offset += nbytes
    return SafetensorsHeader(name, metas)


def test_numpy_files_bytes_match_the_arrays(tmp_path: Path) -> None:
    arrays = {
        "a": np.zeros((3, 5), np.float32),
        "b": np.zeros((7,), np.float16),
        "c": np.zeros((2, 2, 2), np.int32),
        "d": np.zeros((9,), np.uint8),
        "e": np.zeros((4,), np.int8),
        "f": np.zeros((3,), np.int64),
        "g": np.zeros((), np.float64),
    }
    save_file(arrays, tmp_path / "model.safetensors")
    header = read_safetensors_header(tmp_path / "model.safetensors")
    info = summarize_checkpoint([header])
    assert info.exact and info.format == "safetensors"
    assert info.total_bytes == sum(a.nbytes for a in arrays.values())
    assert info.parameters == sum(a.size for a in arrays.values())
    assert info.dtypes["F32"].bytes == 60 and info.dtypes["I64"].parameters == 3
    # The file is exactly 8 + header + tensor data.
    size = (tmp_path / "model.safetensors").stat().st_size
    assert header.header_bytes is not None and size == 8 + header.header_bytes + info.total_bytes


def test_dtype_table_matches_the_library_for_sub_byte_and_fp8_types(tmp_path: Path) -> None:
    raw16 = np.zeros((4, 8), np.uint16)
    raw8 = np.zeros((4, 8), np.uint8)
    specs = {
        "bf16": safetensors.TensorSpec(dtype="bfloat16", shape=[4, 8], data_ptr=raw16.ctypes.data, data_len=64),
        "f8": safetensors.TensorSpec(dtype="float8_e4m3fn", shape=[4, 8], data_ptr=raw8.ctypes.data, data_len=32),
        "e8": safetensors.TensorSpec(dtype="float8_e8m0fnu", shape=[4, 8], data_ptr=raw8.ctypes.data, data_len=32),
        "f4": safetensors.TensorSpec(dtype="float4_e2m1fn_x2", shape=[4, 8], data_ptr=raw8.ctypes.data, data_len=32),
    }
    safetensors.serialize_file(specs, tmp_path / "model.safetensors")
    info = summarize_checkpoint([read_safetensors_header(tmp_path / "model.safetensors")])
    assert {k: (v.parameters, v.bytes) for k, v in info.dtypes.items()} == {
        "BF16": (32, 64),
        "F8_E4M3": (32, 32),
        "F8_E8M0": (32, 32),
        "F4": (64, 32),
    }


def test_virtual_header_builder_writes_the_library_format(tmp_path: Path) -> None:
    layout = {"w": ("F32", (2, 3)), "i": ("I32", (5,)), "u": ("U8", (3,))}
    header, size = header_only(layout)
    path = tmp_path / "model.safetensors"
    path.write_bytes(header + b"\0" * (size - len(header)))
    loaded = load_file(path)  # the real library accepts it
    assert {k: v.shape for k, v in loaded.items()} == {"w": (2, 3), "i": (5,), "u": (3,)}
    assert summarize_checkpoint([read_safetensors_header(path)]).total_bytes == tensor_bytes(layout)


def test_awq_packed_int32_unpacks_eight_weights_per_element() -> None:
    # AWQ GEMM layout: qweight [in, out/8] int32, qzeros [in/g, out/8] int32, scales [in/g, out] fp16.
    i, o, g = 4096, 11008, 128
    layer = {
        "model.layers.0.mlp.up_proj.qweight": ("I32", (i, o // 8)),
        "model.layers.0.mlp.up_proj.qzeros": ("I32", (i // g, o // 8)),
        "model.layers.0.mlp.up_proj.scales": ("F16", (i // g, o)),
        "model.layers.0.input_layernorm.weight": ("F16", (i,)),
    }
    info = summarize_checkpoint(
        [_header("model.safetensors", layer)],
        config={"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": g}},
    )
    assert info.logical_parameters == i * o + i
    assert info.quantization_bytes == (i // g) * (o // 8) * 4 + (i // g) * o * 2
    assert info.dtypes["I32"].bytes == i * o // 2 + (i // g) * (o // 8) * 4
    assert info.total_bytes == tensor_bytes(layer)


def test_gptq_act_order_indices_and_3_bit_packing() -> None:
    i, o, g = 1024, 512, 64
    layer = {
        "m.layers.0.self_attn.o_proj.qweight": ("I32", (i * 3 // 32, o)),  # 32 weights per 3 int32
        "m.layers.0.self_attn.o_proj.qzeros": ("I32", (i // g, o * 3 // 32)),
        "m.layers.0.self_attn.o_proj.scales": ("F16", (i // g, o)),
        "m.layers.0.self_attn.o_proj.g_idx": ("I32", (i,)),
    }
    info = summarize_checkpoint(
        [_header("model.safetensors", layer)],
        config={"quantization_config": {"quant_method": "gptq", "bits": 3}},
    )
    assert info.logical_parameters == i * o
    assert info.quantization_bytes == info.total_bytes - i * 3 // 32 * o * 4


def test_compressed_tensors_packed_and_nvfp4_and_bitsandbytes() -> None:
    w4a16 = {
        "l.weight_packed": ("I32", (256, 64)),
        "l.weight_scale": ("BF16", (256, 4)),
        "l.weight_shape": ("I64", (2,)),
    }
    ct = {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}}},
        }
    }
    info = summarize_checkpoint([_header("a.safetensors", w4a16)], config=ct)
    assert info.logical_parameters == 256 * 64 * 8
    assert info.quantization_bytes == 256 * 4 * 2 + 16

    nvfp4 = {
        "l.weight": ("U8", (256, 64)),
        "l.weight_scale": ("F8_E4M3", (256, 8)),
        "l.weight_scale_2": ("F32", ()),
        "l.input_scale": ("F32", ()),
    }
    info = summarize_checkpoint(
        [_header("a.safetensors", nvfp4)],
        config={"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}},
    )
    assert info.logical_parameters == 256 * 128
    assert info.quantization_bytes == 256 * 8 + 4 + 4

    bnb = {
        "l.weight": ("U8", (4096 * 4096 // 2, 1)),
        "l.weight.absmax": ("F32", (4096 * 4096 // 64,)),
        "l.weight.quant_map": ("F32", (16,)),
        "l.weight.quant_state.bitsandbytes__nf4": ("U8", (100,)),
    }
    info = summarize_checkpoint(
        [_header("a.safetensors", bnb)],
        config={"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}},
    )
    assert info.logical_parameters == 4096 * 4096
    int8 = {"l.weight": ("I8", (64, 64)), "l.SCB": ("F32", (64,))}
    info = summarize_checkpoint(
        [_header("a.safetensors", int8)],
        config={"quantization_config": {"quant_method": "bitsandbytes", "load_in_8bit": True}},
    )
    assert info.dtypes["I8"].parameters == 64 * 64


def test_mxfp4_blocks_hold_two_weights_per_byte() -> None:
    experts, rows, hidden = 32, 5760, 2880
    tensors = {
        "model.layers.0.mlp.experts.gate_up_proj_blocks": ("U8", (experts, rows, hidden // 32, 16)),
        "model.layers.0.mlp.experts.gate_up_proj_scales": ("U8", (experts, rows, hidden // 32)),
        "model.layers.0.mlp.experts.gate_up_proj_bias": ("BF16", (experts, rows)),
    }
    info = summarize_checkpoint(
        [_header("model-00001-of-00002.safetensors", tensors)],
        config={"quantization_config": {"quant_method": "mxfp4"}},
    )
    assert info.logical_parameters == experts * rows * hidden + experts * rows
    assert info.quantization_bytes == experts * rows * hidden // 32
    # 4.25 bits per expert weight: the shared 8-bit exponent per 32 weights.
    per_weight_bits = 8 * (info.dtypes["U8"].bytes) / (experts * rows * hidden)
    assert per_weight_bits == pytest.approx(4.25)


def test_fp8_weights_with_block_scales_and_mtp_layers() -> None:
    # DeepSeek-V3 layout: 61 decoder layers, layer 61 is the multi-token-prediction module.
    tensors = {
        "model.layers.60.mlp.down_proj.weight": ("F8_E4M3", (7168, 18432)),
        "model.layers.60.mlp.down_proj.weight_scale_inv": ("F32", (56, 144)),
        "model.layers.61.mlp.down_proj.weight": ("F8_E4M3", (7168, 18432)),
        "model.layers.61.mlp.down_proj.weight_scale_inv": ("F32", (56, 144)),
        "model.layers.61.eh_proj.weight": ("BF16", (7168, 14336)),
    }
    info = summarize_checkpoint(
        [_header("model.safetensors", tensors)],
        config={"quantization_config": {"quant_method": "fp8"}},
        num_layers=61,
    )
    layer_bytes = 7168 * 18432 + 56 * 144 * 4
    assert info.mtp_bytes == layer_bytes + 7168 * 14336 * 2
    assert info.total_bytes == 2 * layer_bytes + 7168 * 14336 * 2
    assert info.logical_parameters == 2 * 7168 * 18432 + 7168 * 14336
    # Qwen3-Next names its MTP module "mtp.*"; vision towers with more layers are not MTP.
    other = {
        "mtp.layers.0.mlp.weight": ("BF16", (8, 8)),
        "vision_tower.layers.40.w.weight": ("BF16", (8, 8)),
        "model.language_model.layers.3.w.weight": ("BF16", (8, 8)),
    }
    info = summarize_checkpoint([_header("m.safetensors", other)], num_layers=4)
    assert info.mtp_bytes == 128


def test_file_selection_follows_vllm() -> None:
    files = [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "sub/extra.safetensors",
        ".hidden.safetensors",
    ]
    assert select_weight_files(files) == (files[1:3], "model.safetensors.index.json")
    mistral = [*files, "consolidated.safetensors", "params.json"]
    assert select_weight_files(mistral) == (["consolidated.safetensors"], None)
    assert select_weight_files(["pytorch_model.bin", "config.json"]) == ([], None)


def test_local_sharded_directory_uses_the_index(tmp_path: Path) -> None:
    a = {"x.weight": np.zeros((10, 10), np.float16)}
    b = {"y.weight": np.zeros((5,), np.float32)}
    save_file(a, tmp_path / "model-00001-of-00002.safetensors")
    save_file(b, tmp_path / "model-00002-of-00002.safetensors")
    save_file({"old": np.zeros((1000,), np.float32)}, tmp_path / "model-old.safetensors")  # not in the index
    index = {
        "metadata": {"total_size": 220},
        "weight_map": {
            "x.weight": "model-00001-of-00002.safetensors",
            "y.weight": "model-00002-of-00002.safetensors",
        },
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    info = read_local_checkpoint(tmp_path)
    assert info is not None
    assert info.total_bytes == 220 and [f.name for f in info.files] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]

    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ModelNotFoundError, match=r"model-00002-of-00002\.safetensors"):
        read_local_checkpoint(tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x01\x02", "only 2 bytes"),
        (struct.pack("<Q", 10**12) + b"{}", "header length"),
        (struct.pack("<Q", 4) + b"nope", "not JSON"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
        (struct.pack("<Q", 34) + b'{"t":{"dtype":"F32","shape":[2]}}  ', "malformed"),
    ],
)
def test_corrupt_headers_are_clear_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(ModelResolutionError, match=message):
        read_safetensors_header(path)


def test_truncated_file_and_inconsistent_offsets(tmp_path: Path) -> None:
    data = real_safetensors({"w": np.zeros((64, 64), np.float32)})
    path = tmp_path / "model.safetensors"
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(ModelResolutionError, match="truncated"):
        read_safetensors_header(path)
    bad = SafetensorsHeader("m.safetensors", {"w": TensorMeta("F32", (64, 64), 0, 100)})
    with pytest.raises(ModelResolutionError, match="do not match its shape"):
        summarize_checkpoint([bad])
