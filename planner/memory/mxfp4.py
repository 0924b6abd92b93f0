"""MXFP4 MoE expert weights as vLLM allocates them: the kernel vLLM picks, and what that kernel holds.

vLLM creates the expert tensors with the hidden and intermediate sizes rounded up for the MoE kernel
it selects (0.10.1.1-0.18.0 ``model_executor/layers/quantization/mxfp4.py: Mxfp4MoEMethod.create_weights``;
0.19.0-0.33.0 ``model_executor/layers/fused_moe/oracle/mxfp4.py:
mxfp4_round_up_hidden_size_and_intermediate_size``), so a checkpoint's size understates what is loaded:

* Marlin: hidden to 256, intermediate (per rank) to 128 ("n % 256 == 0 and k % 128 == 0");
* FlashInfer TRT-LLM (SM100): hidden to 256, intermediate to the release's alignment (256 up to 0.26,
  128 from 0.27); FlashInfer CUTLASS (SM90 opt-in, SM100 MXFP8 opt-in): both to 128;
* OAI Triton (``matmul_ogs``): intermediate to 64, then ``_swizzle_mxfp4``
  (``quantization/utils/mxfp4_utils.py``) converts the weights and scales to the kernel's layout
  (``triton_kernels/tensor_details/layout_details``, vendored in the wheel from 0.12 as
  ``vllm/third_party/triton_kernels``). The converted weights replace the loaded ones, but the loaded
  scales stay registered on the layer (only ``w13_weight``/``w2_weight`` are deleted), the biases become
  float32, and the layouts pad: Hopper values to the MMA tile packs (rows to 16, bytes of a row to 32;
  0.17-0.21's triton_kernels first pads both to 64), Hopper scales to 32 x num_warps (8: 256) rows and
  an even number of groups (a multiple of 4 from 0.26); Blackwell values to 128 bytes a row, scales
  to 128 rows and 8 groups. With torch < 2.8.1 on Hopper (0.10.x-0.11.0) the layout is strided: the
  kernel reads the loaded tensors in place.

Which kernel runs depends on the GPU, the release, environment variables, ``--moe-backend`` and on
what the install has (:func:`choose_backend`). Each element is 4 bits plus one uint8 scale per 32.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.models.spec import ModelSpec
from planner.units import cdiv

_BYTES_PER_ELEMENT = 0.5 + 1 / 32
_BLOCK = 32  # MXFP4 elements per scale

# The kernels kv-planner sizes (``ServingArgs.mxfp4_backend`` takes the same names). "exact": kernels
# that take the model's own dimensions (b12x, FlashInfer's expert-parallel megakernel).
BACKENDS = ("marlin", "triton", "flashinfer_trtllm", "flashinfer_cutlass", "exact")

# vLLM's --moe-backend values (config/kernel.py MoEBackend; oracle/mxfp4.py map_mxfp4_backend) -> kernel.
_MOE_BACKEND_FLAG = {
    "marlin": "marlin",
    "triton": "triton",
    "triton_unfused": "triton",
    "flashinfer_trtllm": "flashinfer_trtllm",
    "flashinfer_trtllm_afp8": "flashinfer_trtllm",
    "flashinfer_cutlass": "flashinfer_cutlass",
    "flashinfer_cutlass_afp8": "flashinfer_cutlass",
    "cutlass": "flashinfer_cutlass",  # CUTLASS W4A4: 128 x 128 scale tiles, as FlashInfer CUTLASS
    "deep_gemm": "flashinfer_cutlass",  # DeepGEMM MXFP4: M/N/K to 128
    "b12x": "exact",
    "flashinfer_moe_ep": "exact",
}


@dataclass(frozen=True)
class BackendChoice:
    """The kernel planned, and every kernel the install may run instead (the plan's band covers the
    heaviest). ``backend`` None: not an MXFP4 model, or a GPU kv-planner does not size MXFP4 for."""

    backend: str | None
    candidates: tuple[str, ...] = ()
    reason: str = ""


def _env_int(env: Mapping[str, str], name: str) -> bool | None:
    """vLLM reads these as ``bool(int(value))``: None when unset (or not an integer, which vLLM rejects)."""
    raw = env.get(name)
    if raw is None:
        return None
    try:
        return int(raw.strip()) != 0
    except ValueError:
        return None


def parse_capability(text: str | None) -> tuple[int, int] | None:
    """``"9.0"`` -> (9, 0); None for a GPU without a CUDA compute capability (AMD) or an unparsable one."""
    if not text:
        return None
    major, _, minor = text.partition(".")
    try:
        return int(major), int(minor or 0)
    except ValueError:
        return None


def choose_backend(
    rule: str,
    capability: tuple[int, int] | None,
    env: Mapping[str, str],
    *,
    moe_backend: str | None = None,
    given: str | None = None,
) -> BackendChoice:
    """The MXFP4 MoE kernel vLLM picks (``Release.mxfp4_rule``), as in each release's source:

    * v0_10_1 (0.10.1-0.10.1.1, ``Mxfp4MoEMethod._should_use_marlin``): ``VLLM_MXFP4_USE_MARLIN`` when set
      decides; otherwise Marlin on every GPU but SM100, because the wheel pins torch 2.7.1 and the Triton
      path needs torch >= 2.8. SM100 runs FlashInfer TRT-LLM when FlashInfer is installed (an optional
      extra then), else Triton.
    * v0_10_2 (0.10.2-0.11.0, ``get_mxfp4_backend``): FlashInfer opt-ins first (SM90 with
      ``VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1``: CUTLASS; SM100: ``..._MXFP8_CUTLASS`` CUTLASS, else
      TRT-LLM), then Triton on SM >= 9 when the optional ``triton_kernels`` package is installed, else
      Marlin. Neither ``pip install vllm`` (METADATA declares no triton_kernels) nor the official image
      installs it, so Marlin is planned on Hopper and Triton stays a candidate.
    * v0_11_1 (0.11.1-0.11.2): as v0_10_2, FlashInfer now a dependency, and ``VLLM_MXFP4_USE_MARLIN``
      (truthy) forces Marlin where no FlashInfer kernel was chosen.
    * v0_12 (0.12-0.18): triton_kernels ships in the wheel (``has_triton_kernels`` falls back to
      ``vllm.third_party.triton_kernels``), Triton only on 9.0 <= SM < 11.0: SM12x runs Marlin.
    * v0_19 (0.19-0.23, ``oracle/mxfp4.py``): ``--moe-backend`` first, then the FlashInfer variables
      (``..._BF16=0`` drops the FlashInfer BF16 kernels), ``VLLM_MXFP4_USE_MARLIN``, then the priority
      list: TRT-LLM (SM10x), Triton (9.0 <= SM < 11.0), FlashInfer CUTLASS (SM90), Marlin.
    * v0_24 (0.24-0.33): the variables are gone (``envs.py``); ``--moe-backend``, then the same priority
      list (0.32+ admits SM12x to Triton but orders it after Marlin).
    """
    if capability is None or capability < (8, 0):
        # AMD (ROCm kernels, not sized here) and GPUs vLLM's Mxfp4Config refuses (min capability 80).
        return BackendChoice(None, (), "no CUDA MXFP4 kernel sized for this GPU")
    if given is not None:
        return BackendChoice(given, (given,), "the install's kernel as given")
    sm90, sm100 = capability == (9, 0), capability[0] == 10
    if rule in ("v0_19", "v0_24") and moe_backend and moe_backend.strip().lower().replace("-", "_") != "auto":
        flag = moe_backend.strip().lower().replace("-", "_")
        mapped = _MOE_BACKEND_FLAG.get(flag)
        if mapped is not None:
            return BackendChoice(mapped, (mapped,), f"--moe-backend {flag}")
    marlin_env = _env_int(env, "VLLM_MXFP4_USE_MARLIN")
    bf16 = _env_int(env, "VLLM_USE_FLASHINFER_MOE_MXFP4_BF16")
    mxfp8 = _env_int(env, "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8")
    mxfp8_cutlass = _env_int(env, "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8_CUTLASS")
    if rule == "v0_10_1":
        use_marlin = marlin_env if marlin_env is not None else not sm100
        if use_marlin:
            why = "VLLM_MXFP4_USE_MARLIN=1" if marlin_env else "torch 2.7.1 (< 2.8): no Triton path"
            return BackendChoice("marlin", ("marlin",), why)
        if mxfp8 or bf16:
            return BackendChoice("flashinfer_trtllm", ("flashinfer_trtllm",), "FlashInfer MXFP4 variable")
        if sm100 and bf16 is None and mxfp8 is None:
            # FlashInfer is the optional extra vllm[flashinfer]; without it the Triton path runs.
            return BackendChoice(
                "flashinfer_trtllm", ("flashinfer_trtllm", "triton"), "FlashInfer TRT-LLM if installed"
            )
        return BackendChoice("triton", ("triton",), "VLLM_MXFP4_USE_MARLIN=0")
    if rule in ("v0_10_2", "v0_11_1", "v0_12"):
        if sm90 and bf16:
            return BackendChoice("flashinfer_cutlass", ("flashinfer_cutlass",), "VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1")
        if sm100:
            kernel = "flashinfer_cutlass" if mxfp8_cutlass else "flashinfer_trtllm"
            if rule != "v0_10_2":
                return BackendChoice(kernel, (kernel,), "FlashInfer (a dependency of the wheel)")
            # FlashInfer is an optional extra: a plain pip install falls back to Triton/Marlin.
            return BackendChoice(kernel, (kernel, "triton", "marlin"), "FlashInfer if installed (optional extra)")
        if rule != "v0_10_2" and marlin_env:
            return BackendChoice("marlin", ("marlin",), "VLLM_MXFP4_USE_MARLIN=1")
        if rule == "v0_12":
            if (9, 0) <= capability < (11, 0):
                return BackendChoice("triton", ("triton",), "triton_kernels ships in the wheel")
            return BackendChoice("marlin", ("marlin",), "Marlin (Triton only on SM 9.0-10.x)")
        if capability >= (9, 0):
            return BackendChoice(
                "marlin", ("marlin", "triton"), "no triton_kernels in pip or the official image (Triton if installed)"
            )
        return BackendChoice("marlin", ("marlin",), "Marlin below SM90")
    # v0_19, v0_24: the modular-kernel oracle.
    if rule == "v0_19":
        if bf16 and sm90:
            return BackendChoice("flashinfer_cutlass", ("flashinfer_cutlass",), "VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1")
        if bf16 and sm100:
            return BackendChoice("flashinfer_trtllm", ("flashinfer_trtllm",), "VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1")
        if mxfp8:
            return BackendChoice("flashinfer_trtllm", ("flashinfer_trtllm",), "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1")
        if mxfp8_cutlass:
            return BackendChoice(
                "flashinfer_cutlass", ("flashinfer_cutlass",), "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8_CUTLASS=1"
            )
        if marlin_env:
            return BackendChoice("marlin", ("marlin",), "VLLM_MXFP4_USE_MARLIN=1")
    if sm100 and not (rule == "v0_19" and bf16 is False):
        return BackendChoice("flashinfer_trtllm", ("flashinfer_trtllm",), "FlashInfer TRT-LLM (SM10x)")
    if (9, 0) <= capability < (11, 0):
        return BackendChoice("triton", ("triton",), "OAI Triton kernels (SM 9.0-10.x)")
    return BackendChoice("marlin", ("marlin",), "Marlin")


def _round_up(value: int, multiple: int) -> int:
    return cdiv(value, multiple) * multiple


def padded_sizes(
    hidden: int, intermediate: int, *, backend: str | None, trtllm_intermediate_align: int
) -> tuple[int, int]:
    """(hidden, intermediate per rank) as vLLM allocates MXFP4 experts for ``backend``."""
    if backend == "marlin":
        return _round_up(hidden, 256), _round_up(intermediate, 128)
    if backend == "flashinfer_trtllm":
        return _round_up(hidden, 256), _round_up(intermediate, trtllm_intermediate_align)
    if backend == "flashinfer_cutlass":
        return _round_up(hidden, 128), _round_up(intermediate, 128)
    if backend == "triton":
        return hidden, _round_up(intermediate, 64)
    return hidden, intermediate


def _triton_bytes(experts: int, hidden: int, inter: int, *, layout: str, blackwell: bool) -> int:
    """Bytes the Triton path holds for one layer's experts (``inter``: already rounded to 64): the
    converted weights and scales, the loaded scales it keeps, and the float32 biases."""
    w13_rows, w13_row_bytes, w13_groups = 2 * inter, hidden // 2, hidden // _BLOCK
    w2_rows, w2_row_bytes, w2_groups = hidden, inter // 2, inter // _BLOCK
    loaded_scales = w13_rows * w13_groups + w2_rows * w2_groups
    if blackwell:
        # BlackwellMXValueLayout: the contiguous dim (a row's bytes) to 128; BlackwellMXScaleLayout: rows
        # (N) to 128, groups (K) to 8.
        values = w13_rows * _round_up(w13_row_bytes, 128) + w2_rows * _round_up(w2_row_bytes, 128)
        scales = _round_up(w13_rows, 128) * _round_up(w13_groups, 8) + _round_up(w2_rows, 128) * _round_up(w2_groups, 8)
    elif layout == "strided":
        values, scales = w13_rows * w13_row_bytes + w2_rows * w2_row_bytes, 0  # views of the loaded tensors
    else:
        pre = 64 if layout == "mma_pad64" else 1
        groups = 4 if layout == "mma_groups4" else 2

        def value(rows: int, row_bytes: int) -> int:
            # HopperMXValueLayout.swizzle_data (mma v3): rows packed by 16, a row's bytes by 32.
            return _round_up(_round_up(rows, pre), 16) * _round_up(_round_up(row_bytes, pre), 32)

        values = value(w13_rows, w13_row_bytes) + value(w2_rows, w2_row_bytes)
        # HopperMXScaleLayout: rows to 2 x num_warps x 2 x 8 (num_warps 8), groups to 2 (4 from 0.26).
        scales = _round_up(w13_rows, 256) * _round_up(w13_groups, groups) + _round_up(w2_rows, 256) * _round_up(
            w2_groups, groups
        )
    float32_biases = 2 * (w13_rows + w2_rows)  # bf16 -> float32 (the bf16 tensors are replaced)
    return experts * (values + scales + loaded_scales + float32_biases)


def padding_bytes_per_moe_layer(
    model: ModelSpec,
    *,
    tp: int,
    expert_shards: int,
    backend: str | None,
    trtllm_intermediate_align: int,
    triton_layout: str,
    capability: tuple[int, int] | None,
) -> int:
    """Extra bytes one MoE layer's MXFP4 experts take on one rank beyond the checkpoint's shapes."""
    moe, quant = model.moe, model.quantization
    if moe is None or quant is None or quant.method != "mxfp4" or backend is None:
        return 0
    # Experts are sliced by TP (each rank has every expert, I / tp wide) or, with expert parallel,
    # distributed whole.
    sliced = expert_shards == tp
    inter = moe.moe_intermediate_size // tp if sliced else moe.moe_intermediate_size
    experts = moe.num_experts if sliced else cdiv(moe.num_experts, expert_shards)
    hidden = model.hidden_size
    h_pad, i_pad = padded_sizes(hidden, inter, backend=backend, trtllm_intermediate_align=trtllm_intermediate_align)
    if backend == "triton" and hidden % _BLOCK == 0:
        blackwell = capability is not None and capability >= (10, 0)
        held = _triton_bytes(experts, hidden, i_pad, layout=triton_layout, blackwell=blackwell)
        return held - int(experts * 3 * hidden * inter * _BYTES_PER_ELEMENT)
    # w13: (2I, H), w2: (H, I)
    extra_elements = 3 * (h_pad * i_pad - hidden * inter)
    return int(experts * extra_elements * _BYTES_PER_ELEMENT)
