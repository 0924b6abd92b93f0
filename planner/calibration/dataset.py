"""kv-planner's own calibration data: real vLLM startups, in the project's schema, shipped with the package.

Each line of ``planner/data/calibration/*.jsonl`` is one :class:`Startup`: the deployment as it was
started (``deployment``), what vLLM printed (``measured``, numbers only), and where the log is
(``source.url``, the exact log or comment). Nothing here is copied text: the numbers were read from the
public logs named by the URLs. ``planner validate`` with no file and the accuracy tests read these
files, so every figure in docs/accuracy.md can be reproduced from a clone alone.

:meth:`Startup.to_record` turns a line into the :class:`~planner.calibration.records.StartupRecord` the
validator and the fit consume (the schema of the shared calibration files, which ``planner validate
FILE`` also reads).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.calibration.records import StartupRecord
from planner.errors import PlannerInputError
from planner.untrusted import load_json, read_text
from planner.vllm.args import Mxfp4Backend


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    url: str = Field(description="the exact log (file at a commit, issue comment or PR) the numbers come from")
    note: str | None = Field(default=None, description="our remark: how a figure was read or derived")


class Deployment(_Strict):
    """How vLLM was started (null: the release's default was in force)."""

    model: str = Field(description="Hugging Face id of the served checkpoint")
    base_model: str | None = Field(default=None, description="unquantized model, for quantized variants")
    weight_scheme: str | None = Field(default=None, description="fp8 | w8a8 | w4a16 | mxfp4 | ...")
    gpu: str = Field(description="canonical kv-planner GPU name")
    gpus: int = 1
    nodes: int = Field(default=1, description="nodes the engine's ranks span (multi-node TP/PP over Ray or LWS)")
    vllm: str = Field(description="release X.Y.Z")
    engine: str = "v1"
    tp: int = 1
    pp: int = 1
    dtype: str | None = None
    kv_dtype: str | None = None
    utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    block_size: int | None = None
    eager: bool | None = None
    flashinfer_sampler: bool | None = Field(
        default=None,
        description="false: FlashInfer's top-k/top-p sampler was not used (the log warns 'FlashInfer is not "
        "available', or VLLM_USE_FLASHINFER_SAMPLER=0); null: the release's default",
    )
    gpu_p2p: bool | None = Field(
        default=None,
        description="false: the TP ranks' GPUs could not reach each other by P2P (vLLM warns 'Custom allreduce "
        "is disabled because your platform lacks GPU P2P capability'), so NCCL ran its shared-memory transport, "
        "as NCCL_P2P_DISABLE=1 makes it; null: P2P as the GPU allows",
    )
    model_runner_v2: bool | None = Field(
        default=None,
        description="false: the classic GPU model runner ran although the release defaults this model to Model "
        "Runner V2 (VLLM_USE_V2_MODEL_RUNNER=0; the log names gpu_model_runner.py), true: V2 forced; null: the "
        "release's default",
    )
    prefix_caching: bool | None = Field(
        default=None,
        description="--enable-prefix-caching / --no-enable-prefix-caching as given; null: the release's default "
        "(on a hybrid Mamba model it decides how many state blocks a request keeps)",
    )
    async_scheduling: bool | None = Field(
        default=None,
        description="false: --no-async-scheduling (the log's non-default args say 'async_scheduling': False), "
        "which halves the tokens in flight a sliding window keeps from 0.26; null: the release's default",
    )
    max_cudagraph_capture_size: int | None = Field(
        default=None,
        ge=1,
        description="--max-cudagraph-capture-size as given (0.11.1+; the log's non-default args or "
        "compilation_config 'max_cudagraph_capture_size'); null: the default, min(2 x max_num_seqs, 512)",
    )
    speculative_config: str | None = Field(
        default=None, description="--speculative-config as given (JSON); its drafter is part of the weights"
    )
    language_model_only: bool | None = Field(
        default=None,
        description="--language-model-only as given: a multimodal model served as text only (no vision tower "
        "weights, no encoder profile); null: off",
    )
    mxfp4_backend: Mxfp4Backend | None = Field(
        default=None,
        description="the MXFP4 MoE kernel the log names ('Using Marlin backend', \"Using 'TRITON' Mxfp4 MoE "
        "backend\"): marlin | triton | flashinfer_trtllm | flashinfer_cutlass; null: the release's choice",
    )


class Measured(_Strict):
    """What vLLM printed, per GPU (GiB as printed, rounded to 0.01 unless the log had more digits)."""

    total_gib: float | None = None
    weights_gib: float | None = None
    non_torch_gib: float | None = None
    activation_gib: float | None = None
    cuda_graph_gib: float | None = Field(default=None, description="graph pool actually captured")
    cuda_graph_estimate_gib: float | None = Field(default=None, description="vLLM's own estimate, where printed")
    kv_gib: float | None = Field(default=None, description='"Available KV cache memory"')
    kv_tokens: int | None = Field(default=None, description='"GPU KV cache size: N tokens"')
    blocks: int | None = Field(default=None, description="num_gpu_blocks")
    concurrency_len: int | None = None
    concurrency: float | None = Field(default=None, description='"Maximum concurrency for L tokens ...: Xx"')


class Startup(_Strict):
    id: str
    deployment: Deployment
    measured: Measured
    source: Source

    def to_record(self) -> StartupRecord:
        d, m = self.deployment, self.measured
        return StartupRecord(
            id=self.id,
            model=d.model,
            base_model=d.base_model,
            quantization=d.weight_scheme,
            gpu=d.gpu,
            gpu_count=d.gpus,
            nodes=d.nodes,
            vllm_version=d.vllm,
            engine=d.engine,
            tensor_parallel_size=d.tp,
            pipeline_parallel_size=d.pp,
            dtype=d.dtype,
            kv_cache_dtype=d.kv_dtype,
            gpu_memory_utilization=d.utilization,
            max_model_len=d.max_model_len,
            max_num_seqs=d.max_num_seqs,
            max_num_batched_tokens=d.max_batched_tokens,
            block_size=d.block_size,
            enforce_eager=d.eager,
            flashinfer_sampler=d.flashinfer_sampler,
            gpu_p2p=d.gpu_p2p,
            model_runner_v2=d.model_runner_v2,
            enable_prefix_caching=d.prefix_caching,
            language_model_only=d.language_model_only,
            mxfp4_backend=d.mxfp4_backend,
            async_scheduling=d.async_scheduling,
            max_cudagraph_capture_size=d.max_cudagraph_capture_size,
            total_gpu_memory_gib=m.total_gib,
            weights_gib=m.weights_gib,
            non_torch_gib=m.non_torch_gib,
            activation_peak_gib=m.activation_gib,
            cuda_graph_gib=m.cuda_graph_gib,
            cuda_graph_estimated_gib=m.cuda_graph_estimate_gib,
            kv_cache_memory_gib=m.kv_gib,
            kv_cache_tokens=m.kv_tokens,
            gpu_blocks=m.blocks,
            max_concurrency_len=m.concurrency_len,
            max_concurrency_x=m.concurrency,
            source_url=self.source.url,
            notes=self.source.note,
        )


def parse_lines(text: str, where: str) -> list[Startup]:
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(Startup.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError) as error:
            raise PlannerInputError(f"{where}:{number}: not a calibration startup ({error})") from None
    return out


def dataset_files() -> list[Path]:
    """The packaged calibration files, in a stable order."""
    folder = resources.files("planner") / "data" / "calibration"
    return sorted(Path(str(item)) for item in folder.iterdir() if item.name.endswith(".jsonl"))


def load_dataset() -> list[Startup]:
    """Every packaged startup; ids are unique across files."""
    startups: list[Startup] = []
    for path in dataset_files():
        startups += parse_lines(path.read_text(), path.name)
    seen: set[str] = set()
    for startup in startups:
        if startup.id in seen:
            raise PlannerInputError(f"calibration data: duplicate id {startup.id}")
        seen.add(startup.id)
    return startups


def dataset_records() -> list[StartupRecord]:
    return [startup.to_record() for startup in load_dataset()]


def load_record_file(path: Path) -> list[StartupRecord | str]:
    """A JSONL file in either schema: kv-planner's (lines with ``deployment``) or the shared calibration
    schema. A line that is neither becomes its error message."""
    text = read_text(path, what="records file")
    out: list[StartupRecord | str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = load_json(line, source=f"line {number}")
            if isinstance(data, dict) and "deployment" in data:
                out.append(Startup.model_validate(data).to_record())
            else:
                out.append(StartupRecord.model_validate(data))
        except PlannerInputError as error:
            out.append(str(error))
        except ValidationError as error:
            first = error.errors()[0]
            out.append(f"line {number}: field {'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
    return out
