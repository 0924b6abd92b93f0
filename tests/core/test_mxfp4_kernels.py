"""Issue 12 cause c: MXFP4 MoE experts take what the kernel vLLM picks makes of them.

Every expectation cites the file of vLLM's source it was read in (``pip download vllm==X.Y.Z --no-deps``;
the wheel's METADATA for its declared dependencies). The kernel depends on the GPU, the release, the
environment, ``--moe-backend`` and on what the install has; the memory on the kernel's padding and, for
the OAI Triton kernels, on the layout ``_swizzle_mxfp4`` converts the weights to.
"""

from __future__ import annotations

from typing import get_args

import pytest

from planner.calibration.dataset import dataset_records
from planner.calibration.records import StartupRecord
from planner.calibration.validate import resolve_record_model, serving_args
from planner.gpus.catalog import lookup_gpu
from planner.memory.coefficients import GiB
from planner.memory.mxfp4 import BACKENDS, choose_backend, padded_sizes, padding_bytes_per_moe_layer
from planner.models.catalog import lookup_model
from planner.plan import make_plan
from planner.plan.build import predict
from planner.vllm.args import Mxfp4Backend, ServingArgs
from planner.vllm.argv import parse_args
from planner.vllm.argv_values import to_serving_args
from planner.vllm.releases import resolve_release

H100, B200, RTX5090, A100, L40S = (9, 0), (10, 0), (12, 0), (8, 0), (8, 9)


def _record(record_id: str) -> StartupRecord:
    return next(r for r in dataset_records() if r.id == record_id)


def _rule(version: str) -> str:
    return resolve_release(version)[1].mxfp4_rule


def _kernel(version: str, capability: tuple[int, int], env: dict[str, str] | None = None, **kw: str) -> str | None:
    return choose_backend(_rule(version), capability, env or {}, **kw).backend


def _weights(model: str, gpu: str, version: str, **args: object) -> int:
    update = {"max_model_len": 8192, **args}
    prediction = predict(lookup_model(model), lookup_gpu(gpu), ServingArgs.model_validate(update), vllm_version=version)
    return prediction.engine.memory[0].weights_bytes


def test_the_backend_names_are_one_list() -> None:
    assert get_args(Mxfp4Backend) == BACKENDS


def test_the_kernel_choice_rule_of_each_release() -> None:
    # 0.10.1/0.10.1.1 quantization/mxfp4.py Mxfp4MoEMethod._should_use_marlin; 0.10.2 and 0.11.0
    # get_mxfp4_backend (no VLLM_MXFP4_USE_MARLIN); 0.11.1 = 0.11.2 get_mxfp4_backend (with it); 0.12.0
    # (triton_kernels in vllm/third_party, Triton on 9.0 <= SM < 11.0) to 0.18.0; 0.19.0-0.23.0
    # fused_moe/oracle/mxfp4.py with the env variables; 0.24.0 envs.py has none of them.
    assert _rule("0.10.1") == _rule("0.10.1.1") == "v0_10_1"
    assert _rule("0.10.2") == _rule("0.11.0") == "v0_10_2"
    assert _rule("0.11.1") == _rule("0.11.2") == "v0_11_1"
    assert _rule("0.12.0") == _rule("0.16.0") == _rule("0.18.0") == "v0_12"
    assert _rule("0.19.0") == _rule("0.23.0") == "v0_19"
    assert _rule("0.24.0") == _rule("0.33.0") == "v0_24"


def test_default_kernel_per_gpu_architecture() -> None:
    # Marlin below SM90 in every release (capability[0] < 9 / Marlin last in the priority list).
    for version in ("0.10.1.1", "0.10.2", "0.11.2", "0.12.0", "0.19.0", "0.33.0"):
        assert _kernel(version, A100) == _kernel(version, L40S) == "marlin"
    # Hopper: the 0.10.1 wheel pins torch==2.7.1 and the Triton path needs >= 2.8.0; 0.10.2-0.11.2 need the
    # optional triton_kernels, which no wheel declares (METADATA Requires-Dist, 0.10.1-0.33.0) and the
    # official image does not add (vllm-project/recipes OpenAI/GPT-OSS.md, 0.10.1-0.11.2 updates: "Hopper
    # ... Marlin MXFP4 MoE" by default); 0.12.0 on ship it in the wheel.
    assert _kernel("0.10.1.1", H100) == _kernel("0.10.2", H100) == _kernel("0.11.2", H100) == "marlin"
    assert _kernel("0.12.0", H100) == _kernel("0.19.0", H100) == _kernel("0.33.0", H100) == "triton"
    # SM100: FlashInfer TRT-LLM (a dependency from 0.11.1: METADATA flashinfer-python without an extra).
    for version in ("0.10.1.1", "0.10.2", "0.11.2", "0.12.0", "0.19.0", "0.33.0"):
        assert _kernel(version, B200) == "flashinfer_trtllm"
    # SM120: Triton only on 9.0 <= SM < 11.0 (0.12.0 get_mxfp4_backend; 0.19.0 BaseOAITritonExperts);
    # 0.32/0.33 _get_priority_backends_for_gpt_oss moves Triton after Marlin on family 120.
    for version in ("0.10.1.1", "0.11.2", "0.12.0", "0.19.0", "0.33.0"):
        assert _kernel(version, RTX5090) == "marlin"


def test_what_the_install_decides_is_a_candidate() -> None:
    # triton_kernels (optional up to 0.11.x) on Hopper and SM12x; FlashInfer (optional extra up to 0.11.0)
    # on SM100. Known everywhere else.
    assert choose_backend("v0_10_2", H100, {}).candidates == ("marlin", "triton")
    assert choose_backend("v0_11_1", RTX5090, {}).candidates == ("marlin", "triton")
    assert choose_backend("v0_10_2", B200, {}).candidates == ("flashinfer_trtllm", "triton", "marlin")
    assert choose_backend("v0_11_1", B200, {}).candidates == ("flashinfer_trtllm",)
    assert choose_backend("v0_10_1", H100, {}).candidates == ("marlin",)  # torch 2.7.1: no Triton path
    assert choose_backend("v0_12", H100, {}).candidates == ("triton",)
    assert choose_backend("v0_11_1", H100, {}, given="triton").candidates == ("triton",)
    # No CUDA capability (AMD) or below SM80 (Mxfp4Config.get_min_capability 80): not sized.
    assert choose_backend("v0_24", None, {}).backend is None
    assert choose_backend("v0_24", (7, 5), {}).backend is None


def test_environment_variables_where_the_release_reads_them() -> None:
    marlin = {"VLLM_MXFP4_USE_MARLIN": "1"}
    # 0.10.1.1 _should_use_marlin: the variable decides either way; 0.10.2/0.11.0 do not read it.
    assert _kernel("0.10.1.1", B200, marlin) == "marlin"
    assert _kernel("0.10.1.1", H100, {"VLLM_MXFP4_USE_MARLIN": "0"}) == "triton"
    assert _kernel("0.10.2", H100, {"VLLM_MXFP4_USE_MARLIN": "0"}) == "marlin"
    # 0.11.2-0.18.0: it forces Marlin only where no FlashInfer kernel was chosen; 0.19-0.23 before the list.
    assert _kernel("0.16.0", H100, marlin) == "marlin"
    assert _kernel("0.16.0", B200, marlin) == "flashinfer_trtllm"
    assert _kernel("0.19.0", B200, marlin) == "marlin"
    assert _kernel("0.24.0", H100, marlin) == "triton"  # 0.24.0 envs.py: gone
    # SM90 FlashInfer CUTLASS with VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1 (0.10.2-0.23); 0.19 "=0" drops the
    # FlashInfer BF16 kernels, so SM100 falls to Triton; MXFP8 CUTLASS on SM100.
    bf16 = {"VLLM_USE_FLASHINFER_MOE_MXFP4_BF16": "1"}
    assert _kernel("0.12.0", H100, bf16) == _kernel("0.19.0", H100, bf16) == "flashinfer_cutlass"
    assert _kernel("0.24.0", H100, bf16) == "triton"
    assert _kernel("0.19.0", B200, {"VLLM_USE_FLASHINFER_MOE_MXFP4_BF16": "0"}) == "triton"
    assert _kernel("0.12.0", B200, {"VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8_CUTLASS": "1"}) == "flashinfer_cutlass"
    # envs.py parses them with int(): anything else is not a setting kv-planner can follow.
    assert _kernel("0.19.0", H100, {"VLLM_MXFP4_USE_MARLIN": "yes"}) == "triton"


def test_the_moe_backend_flag_from_019() -> None:
    # vLLM 0.17.1 engine/arg_utils.py adds --moe-backend; quantization/mxfp4.py of 0.17.1/0.18.0 does not
    # read it; 0.19.0 oracle/mxfp4.py map_mxfp4_backend does (lower-cased, '-' -> '_').
    assert _kernel("0.18.0", H100, moe_backend="marlin") == "triton"
    assert _kernel("0.19.0", H100, moe_backend="Marlin") == "marlin"
    assert _kernel("0.33.0", B200, moe_backend="flashinfer-cutlass") == "flashinfer_cutlass"
    assert _kernel("0.33.0", H100, moe_backend="auto") == "triton"
    command = parse_args(["--model", "openai/gpt-oss-20b", "--moe-backend", "marlin"], version="0.19.0")
    assert command.serving_args().moe_backend == "marlin"
    h100 = _weights("openai/gpt-oss-20b", "H100-80GB", "0.19.0")
    assert _weights("openai/gpt-oss-20b", "H100-80GB", "0.19.0", moe_backend="marlin") > h100


def test_padding_of_each_kernel() -> None:
    # Marlin (0.10.1.1 quantization/mxfp4.py create_weights; 0.19.0/0.33.0 oracle/mxfp4.py): "n % 256 == 0
    # and k % 128 == 0" -> hidden to 256, intermediate to 128; TRT-LLM hidden 256 and intermediate 256
    # (128 from 0.27.1); FlashInfer CUTLASS both 128; Triton intermediate to 64.
    assert padded_sizes(2880, 2880, backend="marlin", trtllm_intermediate_align=256) == (3072, 2944)
    assert padded_sizes(2880, 2880, backend="flashinfer_trtllm", trtllm_intermediate_align=256) == (3072, 3072)
    assert padded_sizes(2880, 2880, backend="flashinfer_cutlass", trtllm_intermediate_align=256) == (2944, 2944)
    assert padded_sizes(2880, 1440, backend="triton", trtllm_intermediate_align=256) == (2880, 1472)
    spec = lookup_model("openai/gpt-oss-20b")
    extra = padding_bytes_per_moe_layer(
        spec,
        tp=1,
        expert_shards=1,
        backend="marlin",
        trtllm_intermediate_align=256,
        triton_layout="mma",
        capability=A100,
    )
    assert extra == int(32 * 3 * (3072 * 2944 - 2880 * 2880) * (0.5 + 1 / 32))
    # 24 MoE layers, and the A100 and the H100 (forced to Marlin) hold the same.
    assert _weights("openai/gpt-oss-20b", "A100-80GB", "0.19.0") == _weights(
        "openai/gpt-oss-20b", "H100-80GB", "0.19.0", env={"VLLM_MXFP4_USE_MARLIN": "1"}
    )


def test_the_triton_layout_of_hopper() -> None:
    """gpt-oss-20b (32 experts, hidden 2880, intermediate 2880) on one H100, one layer, vLLM 0.19.0.
    quantization/utils/mxfp4_utils.py _swizzle_mxfp4 transposes each weight to (E, row bytes, rows) and
    converts it with the vendored triton_kernels' HopperMXValueLayout (0.19.0 hopper_value.py pads both
    dims to 64, then packs rows by 16 and a row's bytes by 32) and HopperMXScaleLayout (rows to
    2 x num_warps x 2 x 8 = 256, groups to 2); quantization/mxfp4.py _setup_kernel keeps the loaded
    w13/w2_weight_scale on the layer and replaces the biases with float32 copies."""
    spec = lookup_model("openai/gpt-oss-20b")
    experts, hidden, inter = 32, 2880, 2880
    values = experts * (5760 * 1472 + 2880 * 1472)  # row bytes 1440 -> 1472
    swizzled_scales = experts * (5888 * 90 + 3072 * 90)  # rows 5760 -> 5888, 2880 -> 3072
    loaded_scales = experts * (5760 * 90 + 2880 * 90)
    float32_biases = experts * 2 * (5760 + 2880)
    checkpoint = int(experts * 3 * hidden * inter * (0.5 + 1 / 32))
    held = values + swizzled_scales + loaded_scales + float32_biases

    def layer(layout: str) -> int:
        return padding_bytes_per_moe_layer(
            spec,
            tp=1,
            expert_shards=1,
            backend="triton",
            trtllm_intermediate_align=256,
            triton_layout=layout,
            capability=H100,
        )

    assert layer("mma_pad64") == held - checkpoint
    # 0.12-0.16 and 0.22+: no pre-pad (1440 bytes are already a multiple of 32); 0.26+: groups to 4 (92).
    no_pad = experts * (5760 * 1440 + 2880 * 1440) + swizzled_scales + loaded_scales + float32_biases
    assert layer("mma") == no_pad - checkpoint
    groups4 = no_pad - swizzled_scales + experts * (5888 * 92 + 3072 * 92)
    assert layer("mma_groups4") == groups4 - checkpoint
    # torch < 2.8.1 (0.10.2/0.11.0 pin 2.8.0): StridedLayout, the kernel reads the loaded tensors in place.
    assert layer("strided") == float32_biases
    assert resolve_release("0.11.0")[1].mxfp4_triton_layout == "strided"
    assert resolve_release("0.11.2")[1].mxfp4_triton_layout == "mma"
    assert resolve_release("0.19.0")[1].mxfp4_triton_layout == "mma_pad64"
    assert resolve_release("0.22.0")[1].mxfp4_triton_layout == "mma"
    assert resolve_release("0.26.0")[1].mxfp4_triton_layout == "mma_groups4"


def test_the_triton_layout_reproduces_a_logged_h100_load() -> None:
    """r039: gpt-oss-20b on an H100, vLLM 0.19.0, "Using 'TRITON' Mxfp4 MoE backend." — "Peak GPU memory
    after loading weights: 12.92 GiB", then "Model loading took 13.64 GiB" once the layout is converted.
    The checkpoint's shapes (12.83 GiB) were 0.81 GiB short; the layout brings it within 0.2%."""
    record = _record("r039")
    spec, online = resolve_record_model(record, lookup_model)
    args = serving_args(record, online_quantization=online)
    prediction = predict(spec, lookup_gpu("H100-80GB"), args, vllm_version="0.19.0")
    assert prediction.engine.mxfp4 is not None and prediction.engine.mxfp4.backend == "triton"
    weights = prediction.engine.memory[0].weights_bytes
    assert record.weights_gib is not None
    assert abs(weights / GiB - record.weights_gib) < 0.002 * record.weights_gib
    assert weights / GiB - 12.83 > 0.75


def test_marlin_on_hopper_reproduces_a_logged_0112_load() -> None:
    """w001: gpt-oss-120b on an H100 with vLLM 0.11.2, "Using Marlin backend" (quantization/mxfp4.py
    get_mxfp4_backend: no triton_kernels), "Model loading took 65.9651 GiB". Planned as the Triton path
    (unpadded) it was 60.78 GiB, and the plan over-predicted the KV memory by 54%."""
    record = _record("w001")
    assert record.mxfp4_backend == "marlin"
    spec, online = resolve_record_model(record, lookup_model)
    args = serving_args(record, online_quantization=online)
    gpu = lookup_gpu("H100-80GB")
    pinned = predict(spec, gpu, args, vllm_version="0.11.2").engine.memory[0].weights_bytes
    default = predict(spec, gpu, args.model_copy(update={"mxfp4_backend": None}), vllm_version="0.11.2")
    assert default.engine.memory[0].weights_bytes == pinned  # Marlin is the release's default on Hopper
    assert record.weights_gib is not None
    assert abs(pinned / GiB - record.weights_gib) < 0.002 * record.weights_gib


def test_marlin_reproduces_a_logged_a100_load() -> None:
    """d103: gpt-oss-120b, TP=4 on A100-80GB with vLLM 0.10.1.1 (Marlin): every rank logged "Model loading
    took 17.2217 GiB"; the padded allocation is within 0.5% of it, the checkpoint's shapes alone are
    1.6 GiB short."""
    record = _record("d103")
    spec, online = resolve_record_model(record, lookup_model)
    args = serving_args(record, online_quantization=online)
    weights = predict(spec, lookup_gpu("A100-80GB"), args, vllm_version="0.10.1.1").engine.memory[0].weights_bytes
    unpadded = (
        predict(
            spec, lookup_gpu("A100-80GB"), args.model_copy(update={"mxfp4_backend": "exact"}), vllm_version="0.10.1.1"
        )
        .engine.memory[0]
        .weights_bytes
    )
    assert record.weights_gib is not None
    assert abs(weights / GiB - record.weights_gib) < 0.005 * record.weights_gib
    assert record.weights_gib - unpadded / GiB > 1.0


def _band_term(plan_args: ServingArgs, gpu: str, version: str) -> int:
    plan = make_plan(lookup_model("openai/gpt-oss-20b"), lookup_gpu(gpu), plan_args, vllm_version=version)
    assert plan.margin is not None
    return sum(t.low_bytes for t in plan.margin.terms if t.name == "mxfp4_kernel")


@pytest.mark.parametrize("version", ["0.11.2", "0.19.0"])
def test_the_band_keeps_the_heaviest_kernel_the_install_may_run(version: str) -> None:
    """Where the install decides, the plan takes the default install's kernel and the band keeps the
    difference to the heaviest candidate: an RTX 5090 with 0.11.2 runs Marlin, or the Triton kernels
    (Blackwell layout: a row's bytes to 128, a second copy of the scales) where triton_kernels was
    installed. Where the kernel is known (0.19, or given) there is no such term."""
    args = ServingArgs(max_model_len=8192)
    term = _band_term(args, "RTX-5090", version)
    marlin = _weights("openai/gpt-oss-20b", "RTX-5090", version)
    triton = _weights("openai/gpt-oss-20b", "RTX-5090", version, mxfp4_backend="triton")
    if version == "0.11.2":
        assert term == triton - marlin > 0
    else:
        assert term == 0
    assert _band_term(args.model_copy(update={"mxfp4_backend": "marlin"}), "RTX-5090", version) == 0
    # Hopper 0.11.2: Marlin pads more than the Triton alternative, so nothing is added.
    assert _band_term(args, "H100-80GB", "0.11.2") == 0


def test_a_manifest_carries_the_kernel_settings_to_the_plan() -> None:
    """The webhook and ``planner check`` build ServingArgs from the container's args and environment
    (VLLM_* kept): ``--moe-backend`` and VLLM_MXFP4_USE_MARLIN reach the kernel choice as vLLM reads them."""
    args = to_serving_args({"moe_backend": "marlin"}, env={"VLLM_MXFP4_USE_MARLIN": "1", "HOME": "/root"})
    assert args.moe_backend == "marlin"
    assert args.env == {"VLLM_MXFP4_USE_MARLIN": "1"}
    env_only = to_serving_args({}, env={"VLLM_MXFP4_USE_MARLIN": "1"})
    triton = _weights("openai/gpt-oss-20b", "H100-80GB", "0.16.0")
    assert _weights("openai/gpt-oss-20b", "H100-80GB", "0.16.0", env=env_only.env) > triton
    # 0.24.0 no longer reads the variable (envs.py).
    assert _weights("openai/gpt-oss-20b", "H100-80GB", "0.24.0", env=env_only.env) == _weights(
        "openai/gpt-oss-20b", "H100-80GB", "0.24.0"
    )


def test_the_recommended_flags_keep_the_moe_backend() -> None:
    """The kernel sizes the experts, so the pasted flags keep --moe-backend (--mxfp4-backend is not vLLM's)."""
    args = ServingArgs(max_model_len=8192, moe_backend="marlin", mxfp4_backend="marlin")
    plan = make_plan(lookup_model("openai/gpt-oss-20b"), lookup_gpu("H100-80GB"), args, vllm_version="0.19.0")
    assert plan.recommendation is not None
    flags = plan.recommendation.vllm_args
    assert flags[flags.index("--moe-backend") + 1] == "marlin"
    assert not any("mxfp4" in flag for flag in flags)
