"""Corrections files: what real startups measured, applied to later plans of the same deployment.

``planner calibrate LOG...`` writes one entry per startup log: the measured budget terms (weights,
non-torch, activation peak, CUDA graphs) next to what the planner predicted. ``planner recommend
--calibration FILE`` then uses the measured terms for a plan of the same model on the same GPU with
the same parallelism — as the difference measured minus predicted, so a change of another setting
still moves the plan the way the model says. Activation is corrected only when the batch limits
match (it scales with them), CUDA graphs only when ``--enforce-eager`` matches.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.errors import PlannerInputError
from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, MemoryCoefficients
from planner.models.spec import ModelSpec
from planner.plan.engine import TermDeltas
from planner.untrusted import load_yaml, read_text
from planner.vllm.args import ServingArgs


class Terms(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weights_bytes: int | None = None
    non_torch_bytes: int | None = None
    activation_peak_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    kv_cache_bytes: int | None = None


class CorrectionEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    gpu: str
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    vllm_version: str | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    measured: Terms
    predicted: Terms
    source: str | None = Field(default=None, description="the log file this entry came from")


class Corrections(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    entries: list[CorrectionEntry] = Field(default_factory=list)
    coefficients: MemoryCoefficients | None = Field(
        default=None, description="a refitted memory model (optional); default: the built-in one"
    )

    def memory_coefficients(self) -> MemoryCoefficients:
        return self.coefficients or DEFAULT_COEFFICIENTS

    def _match(self, model: ModelSpec, gpu: GpuSpec, args: ServingArgs) -> CorrectionEntry | None:
        for entry in reversed(self.entries):  # the newest measurement wins
            if (
                entry.model.lower() == model.id.lower()
                and entry.gpu.lower() == gpu.name.lower()
                and entry.tensor_parallel_size == args.tensor_parallel_size
                and entry.pipeline_parallel_size == args.pipeline_parallel_size
            ):
                return entry
        return None

    def deltas_for(
        self, model: ModelSpec, gpu: GpuSpec, args: ServingArgs, *, max_num_batched_tokens: int, max_num_seqs: int
    ) -> TermDeltas | None:
        """Measured-minus-predicted terms for this deployment (batch limits as resolved for the release)."""
        entry = self._match(model, gpu, args)
        if entry is None:
            return None
        m, p = entry.measured, entry.predicted

        def diff(a: int | None, b: int | None) -> int:
            return a - b if a is not None and b is not None else 0

        same_batch = entry.max_num_batched_tokens in (None, max_num_batched_tokens) and entry.max_num_seqs in (
            None,
            max_num_seqs,
        )
        return TermDeltas(
            weights_bytes=diff(m.weights_bytes, p.weights_bytes),
            non_torch_bytes=diff(m.non_torch_bytes, p.non_torch_bytes),
            activation_peak_bytes=diff(m.activation_peak_bytes, p.activation_peak_bytes) if same_batch else 0,
            cuda_graph_bytes=diff(m.cuda_graph_bytes, p.cuda_graph_bytes)
            if entry.enforce_eager == args.enforce_eager
            else 0,
        )


def load_corrections(path: Path) -> Corrections:
    data = load_yaml(read_text(path, what="calibration file"), source=str(path))
    try:
        return Corrections.model_validate(data or {})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PlannerInputError(f"{path}: {where}: {first['msg']}") from None


def save_corrections(corrections: Corrections, path: Path) -> None:
    """Write atomically, so an interrupted run never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(corrections.model_dump(mode="json", exclude_none=True), sort_keys=False))
    tmp.replace(path)
