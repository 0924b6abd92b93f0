"""One real vLLM startup: the schema of ``../shared/calibration/vllm-startup.jsonl``.

Numbers are as vLLM printed them (GiB rounded to 0.01, sometimes 4 decimals); a field vLLM did not
print is null. ``planner calibrate`` writes the same schema from raw logs.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from planner.errors import PlannerInputError
from planner.untrusted import load_json, read_text
from planner.vllm.args import Mxfp4Backend

_POOL_LINE = re.compile(r"CUDA graph pool memory: [\d.]+ GiB \(actual\), ([\d.]+) GiB \(estimated\)")
_ESTIMATE_LINE = re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB")


class StartupRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    model: str
    base_model: str | None = None
    quantization: str | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    nodes: int | None = 1
    vllm_version: str | None = None
    engine: str | None = None
    tensor_parallel_size: int | None = 1
    pipeline_parallel_size: int | None = 1
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    enforce_eager: bool | None = None
    # False: the startup ran without FlashInfer's sampler (not installed: the log warns "FlashInfer is not
    # available", or VLLM_USE_FLASHINFER_SAMPLER=0); None: the release's default.
    flashinfer_sampler: bool | None = None
    # False: no P2P between the TP ranks' GPUs (vLLM: "lacks GPU P2P capability"): NCCL's shared-memory
    # transport, as with NCCL_P2P_DISABLE=1; None: P2P as the GPU allows.
    gpu_p2p: bool | None = None
    # Model Runner V2 forced on (True) or off (False) with VLLM_USE_V2_MODEL_RUNNER; None: the release's default.
    model_runner_v2: bool | None = None
    # As given on the command line (non-default args); None: the release's default. On a hybrid Mamba model it
    # decides how many state blocks vLLM counts per request (the "Maximum concurrency" figure).
    enable_prefix_caching: bool | None = None
    # --language-model-only as given (the log's non-default args): vLLM builds no vision tower and profiles no
    # encoder; None: off.
    language_model_only: bool | None = None
    # The MXFP4 MoE kernel the log names ("Using Marlin backend"); None: the release's choice for the GPU.
    mxfp4_backend: Mxfp4Backend | None = None
    # False: --no-async-scheduling; None: the release's default.
    async_scheduling: bool | None = None
    # --max-cudagraph-capture-size as given; None: the default.
    max_cudagraph_capture_size: int | None = None
    total_gpu_memory_gib: float | None = None
    weights_gib: float | None = None
    non_torch_gib: float | None = None
    activation_peak_gib: float | None = None
    cuda_graph_gib: float | None = None
    kv_cache_memory_gib: float | None = None
    kv_cache_tokens: int | None = None
    gpu_blocks: int | None = None
    max_concurrency_len: int | None = None
    max_concurrency_x: float | None = None
    cuda_graph_estimated_gib: float | None = None
    source_url: str | None = None
    notes: str | None = None
    log_excerpt: str | None = None

    @property
    def graph_estimate_gib(self) -> float | None:
        """vLLM's own CUDA-graph estimate (what 0.20+ subtracts), from the field or from vLLM's log lines
        "CUDA graph pool memory: A GiB (actual), E GiB (estimated)" / "Estimated CUDA graph memory: E GiB"."""
        if self.cuda_graph_estimated_gib is not None:
            return self.cuda_graph_estimated_gib
        for text in (self.log_excerpt, self.notes):
            if not text:
                continue
            match = _POOL_LINE.search(text) or _ESTIMATE_LINE.search(text)
            if match:
                return float(match.group(1))
        return None


def load_records(path: Path) -> list[StartupRecord | str]:
    """Records of a JSONL file; a line that is not a valid record becomes its error message."""
    text = read_text(path, what="records file")
    out: list[StartupRecord | str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(StartupRecord.model_validate(load_json(line, source=f"line {number}")))
        except PlannerInputError as error:
            out.append(str(error))
        except ValidationError as error:
            first = error.errors()[0]
            out.append(f"line {number}: field {'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
    return out
