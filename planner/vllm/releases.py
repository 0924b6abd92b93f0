"""vLLM release -> behaviour: the one table that says how each release sizes its KV cache.

Each row starts at a release and holds until the next row. Every field was read in that release's
source (``pip download vllm==X.Y.Z --no-deps``; files cited in ``docs/vllm-releases.md``, which is the
same table for humans). ``planner --vllm-version X.Y.Z`` picks the row with the largest start <= X.Y.Z.
"""

from __future__ import annotations

import re
from functools import total_ordering
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import UnknownVllmVersionError

TokensFormula = Literal["blocks_x_block_size", "blocks_div_groups", "concurrency_x_len"]
InFlight = Literal["mnbt", "concurrent_batches"]


@total_ordering
class Version(BaseModel):
    model_config = ConfigDict(frozen=True)

    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> Version:
        """``X.Y.Z`` with an optional leading ``v`` and an optional fourth part (``0.8.5.post1``,
        ``0.10.1.1``) or local/dev suffix, which are ignored for behaviour."""
        match = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+\-][0-9A-Za-z.+\-]*)?\s*$", text or "")
        if not match:
            raise UnknownVllmVersionError(
                f"vLLM version {text!r} is not X.Y.Z (a leading 'v' and a fourth part are accepted)"
            )
        return cls(major=int(match.group(1)), minor=int(match.group(2)), patch=int(match.group(3) or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    def key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.key() < other.key()


class BatchDefaults(BaseModel):
    """``vllm serve`` defaults for one device class (``EngineArgs.get_batch_defaults``)."""

    model_config = ConfigDict(frozen=True)

    min_memory_gib: float
    max_num_batched_tokens: int
    max_num_seqs: int
    excludes_a100: bool = False


class Release(BaseModel):
    """How one range of vLLM releases sizes the KV cache."""

    model_config = ConfigDict(frozen=True)

    since: str
    engine: Literal["v0", "v1"] = "v1"
    default_gpu_memory_utilization: float
    cuda_graphs_counted: bool = Field(description="CUDA-graph memory estimate subtracted from the KV budget")
    tokens_formula: TokensFormula
    sliding_in_flight: InFlight = Field(
        description="tokens in flight added to sliding/chunked windows: max_num_batched_tokens, or "
                    "max_concurrent_batches x max_num_batched_tokens"
    )
    async_scheduling_default: bool = False
    group_size_threshold: float | None = Field(description="use the largest bucket when max < t x min")
    strided_groups: bool
    null_block_in_fit_check: bool = Field(description="fit check plans against available - one block")
    fit_error_style: Literal["v0", "models's", "model's"]
    max_model_len_auto: bool
    human_readable_ints: bool
    chunked_local_hybrid_default: bool = Field(
        description="Llama-4 chunked layers keep their own groups (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE)"
    )
    mla_block_size_hopper: int
    mla_block_size_ampere: int
    mla_block_size_blackwell: int
    mamba_blocks_per_request: int = Field(description="blocks a Mamba group holds per request")
    batch_defaults: tuple[BatchDefaults, ...]
    cudagraph_max_capture: int = 512
    swap_space_flag: bool
    kv_cache_dtypes: tuple[str, ...]
    evidence: str = Field(description="source files read for this row")


_DTYPES_0_8 = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
_DTYPES_0_10 = (*_DTYPES_0_8, "fp8_inc")
_DTYPES_0_12 = (*_DTYPES_0_10, "bfloat16", "fp8_ds_mla")
_DTYPES_0_21 = (*_DTYPES_0_12, "float16", "nvfp4", "int8_per_token_head", "fp8_per_token_head",
                "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc")
_DTYPES_0_33 = (*_DTYPES_0_21, "nvfp4_ds_mla", "octave_k3v4", "octave_k3v3", "octave_k3v3_compact",
                "ultraquant_4bit", "int4_per_token_head", "nvfp4_4over6")

_BATCH_OLD = (
    BatchDefaults(min_memory_gib=70, max_num_batched_tokens=8192, max_num_seqs=1024),
    BatchDefaults(min_memory_gib=0, max_num_batched_tokens=2048, max_num_seqs=256),
)
_BATCH_A100_EXCEPTION = (
    BatchDefaults(min_memory_gib=70, max_num_batched_tokens=8192, max_num_seqs=1024, excludes_a100=True),
    BatchDefaults(min_memory_gib=0, max_num_batched_tokens=2048, max_num_seqs=256),
)
_BATCH_B200 = (
    BatchDefaults(min_memory_gib=160, max_num_batched_tokens=16384, max_num_seqs=1024),
    *_BATCH_A100_EXCEPTION,
)

RELEASES: tuple[Release, ...] = (
    Release(
        since="0.8.0", default_gpu_memory_utilization=0.9, cuda_graphs_counted=False,
        tokens_formula="blocks_x_block_size", sliding_in_flight="mnbt", group_size_threshold=None,
        strided_groups=False, null_block_in_fit_check=False, fit_error_style="models's",
        max_model_len_auto=False, human_readable_ints=False, chunked_local_hybrid_default=False,
        mla_block_size_hopper=64, mla_block_size_ampere=16, mla_block_size_blackwell=64,
        mamba_blocks_per_request=1, batch_defaults=_BATCH_OLD, swap_space_flag=True,
        kv_cache_dtypes=_DTYPES_0_8, evidence="0.8.5.post1: v1/core/kv_cache_utils.py, v1/worker/gpu_worker.py",
    ),
    Release(
        since="0.10.0", default_gpu_memory_utilization=0.9, cuda_graphs_counted=False,
        tokens_formula="blocks_div_groups", sliding_in_flight="mnbt", group_size_threshold=None,
        strided_groups=False, null_block_in_fit_check=False, fit_error_style="models's",
        max_model_len_auto=False, human_readable_ints=True, chunked_local_hybrid_default=False,
        mla_block_size_hopper=64, mla_block_size_ampere=16, mla_block_size_blackwell=64,
        mamba_blocks_per_request=1, batch_defaults=_BATCH_OLD, swap_space_flag=True,
        kv_cache_dtypes=_DTYPES_0_10, evidence="0.10.1.1, 0.10.2: v1/core/kv_cache_utils.py",
    ),
    Release(
        since="0.11.0", default_gpu_memory_utilization=0.9, cuda_graphs_counted=False,
        tokens_formula="blocks_div_groups", sliding_in_flight="mnbt", group_size_threshold=None,
        strided_groups=True, null_block_in_fit_check=False, fit_error_style="models's",
        max_model_len_auto=False, human_readable_ints=True, chunked_local_hybrid_default=False,
        mla_block_size_hopper=64, mla_block_size_ampere=16, mla_block_size_blackwell=128,
        mamba_blocks_per_request=1, batch_defaults=_BATCH_OLD, swap_space_flag=True,
        kv_cache_dtypes=_DTYPES_0_10, evidence="0.11.0: v1/core/kv_cache_utils.py",
    ),
    Release(
        since="0.12.0", default_gpu_memory_utilization=0.9, cuda_graphs_counted=False,
        tokens_formula="blocks_div_groups", sliding_in_flight="mnbt", group_size_threshold=1.25,
        strided_groups=True, null_block_in_fit_check=False, fit_error_style="models's",
        max_model_len_auto=False, human_readable_ints=True, chunked_local_hybrid_default=False,
        mla_block_size_hopper=64, mla_block_size_ampere=16, mla_block_size_blackwell=128,
        mamba_blocks_per_request=1, batch_defaults=_BATCH_A100_EXCEPTION, swap_space_flag=True,
        kv_cache_dtypes=_DTYPES_0_12, evidence="0.12.0: v1/core/kv_cache_utils.py, platforms/cuda.py",
    ),
    Release(
        since="0.14.0", default_gpu_memory_utilization=0.9, cuda_graphs_counted=False,
        tokens_formula="blocks_div_groups", sliding_in_flight="mnbt", group_size_threshold=1.25,
        strided_groups=True, null_block_in_fit_check=False, fit_error_style="models's",
        max_model_len_auto=False, human_readable_ints=True, chunked_local_hybrid_default=True,
        mla_block_size_hopper=64, mla_block_size_ampere=16, mla_block_size_blackwell=128,
        mamba_blocks_per_request=1, batch_defaults=_BATCH_A100_EXCEPTION, swap_space_flag=True,
        kv_cache_dtypes=_DTYPES_0_12, evidence="0.14.0: envs.py, v1/core/kv_cache_utils.py",
    ),
    Release(
        since="0.16.0", default_gpu_memory_utilization=0.9, cuda_graphs_counted=False,
        tokens_formula="blocks_div_groups", sliding_in_flight="mnbt", group_size_threshold=1.25,
        strided_groups=True, null_block_in_fit_check=False, fit_error_style="models's",
        max_model_len_auto=True, human_readable_ints=True, chunked_local_hybrid_default=True,
        mla_block_size_hopper=64, mla_block_size_ampere=16, mla_block_size_blackwell=128,
        mamba_blocks_per_request=1, batch_defaults=_BATCH_A100_EXCEPTION, swap_space_flag=True,
        kv_cache_dtypes=_DTYPES_0_12, evidence="0.16.0: v1/core/kv_cache_utils.py",
    ),
    Release(
        since="0.18.0", default_gpu_memory_utilization=0.9, cuda_graphs_counted=False,
        tokens_formula="blocks_div_groups", sliding_in_flight="mnbt", group_size_threshold=1.5,
        strided_groups=True, null_block_in_fit_check=False, fit_error_style="models's",
        max_model_len_auto=True, human_readable_ints=True, chunked_local_hybrid_default=True,
        mla_block_size_hopper=16, mla_block_size_ampere=16, mla_block_size_blackwell=128,
        mamba_blocks_per_request=1, batch_defaults=_BATCH_B200, swap_space_flag=False,
        kv_cache_dtypes=_DTYPES_0_12, evidence="0.18.0, 0.19.0: v1/core/kv_cache_utils.py, config/cache.py",
    ),
    Release(
        since="0.20.0", default_gpu_memory_utilization=0.92, cuda_graphs_counted=True,
        tokens_formula="concurrency_x_len", sliding_in_flight="mnbt", group_size_threshold=1.5,
        strided_groups=True, null_block_in_fit_check=False, fit_error_style="models's",
        max_model_len_auto=True, human_readable_ints=True, chunked_local_hybrid_default=True,
        mla_block_size_hopper=16, mla_block_size_ampere=16, mla_block_size_blackwell=128,
        mamba_blocks_per_request=1, batch_defaults=_BATCH_B200, swap_space_flag=False,
        kv_cache_dtypes=_DTYPES_0_12, evidence="0.20.2: v1/core/kv_cache_utils.py, v1/worker/gpu_worker.py",
    ),
    Release(
        since="0.21.0", default_gpu_memory_utilization=0.92, cuda_graphs_counted=True,
        tokens_formula="concurrency_x_len", sliding_in_flight="concurrent_batches",
        async_scheduling_default=True, group_size_threshold=1.5, strided_groups=True,
        null_block_in_fit_check=True, fit_error_style="model's", max_model_len_auto=True,
        human_readable_ints=True, chunked_local_hybrid_default=True,
        mla_block_size_hopper=16, mla_block_size_ampere=16, mla_block_size_blackwell=128,
        mamba_blocks_per_request=2, batch_defaults=_BATCH_B200, swap_space_flag=False,
        kv_cache_dtypes=_DTYPES_0_21, evidence="0.21.0, 0.26.0: v1/core/kv_cache_utils.py, config/vllm.py",
    ),
    Release(
        since="0.33.0", default_gpu_memory_utilization=0.92, cuda_graphs_counted=True,
        tokens_formula="concurrency_x_len", sliding_in_flight="concurrent_batches",
        async_scheduling_default=True, group_size_threshold=1.5, strided_groups=True,
        null_block_in_fit_check=True, fit_error_style="model's", max_model_len_auto=True,
        human_readable_ints=True, chunked_local_hybrid_default=True,
        mla_block_size_hopper=16, mla_block_size_ampere=16, mla_block_size_blackwell=128,
        mamba_blocks_per_request=2, batch_defaults=_BATCH_B200, swap_space_flag=False,
        kv_cache_dtypes=_DTYPES_0_33, evidence="0.33.0: v1/core/kv_cache_planning.py, v1/core/kv_cache_utils.py",
    ),
)

OLDEST = Version.parse(RELEASES[0].since)
LATEST_KNOWN = "0.33.0"


def resolve_release(version: str | None) -> tuple[Version, Release, list[str]]:
    """The behaviour row for ``version`` (default: the newest release kv-planner knows).

    Returns the parsed version, its row and warnings (a version newer than any known release is
    planned with the newest behaviour, and says so).
    """
    warnings: list[str] = []
    parsed = Version.parse(version or LATEST_KNOWN)
    if parsed < OLDEST:
        raise UnknownVllmVersionError(
            f"vLLM {parsed} is older than the oldest release kv-planner models ({OLDEST}); "
            "its V0-only engine sizes the cache differently"
        )
    if parsed > Version.parse(LATEST_KNOWN):
        warnings.append(
            f"KVP104 vLLM {parsed} is newer than the newest release checked ({LATEST_KNOWN}); "
            "planned with that release's behaviour"
        )
    row = RELEASES[0]
    for candidate in RELEASES:
        if Version.parse(candidate.since) <= parsed:
            row = candidate
    return parsed, row, warnings
