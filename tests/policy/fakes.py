"""A small, fully predictable planning backend for decision tests.

Memory: budget = util x GPU memory; KV = budget - checkpoint/TP/PP - 1 GiB; 16-token blocks of
``2 x layers x kv_heads x head_dim x 2`` bytes per token (divided by TP). It follows the Plan contract
(fits, fit_error, recommendation, alternatives) so the decision code sees what it sees from the core,
with numbers a test can work out by hand.
"""

from __future__ import annotations

from typing import Any

from planner.errors import InvalidArgumentError, UnknownModelError
from planner.gpus.spec import GpuSpec
from planner.k8s.gpus import GpuCatalog
from planner.models.catalog import lookup_model
from planner.models.spec import ModelSpec
from planner.plan.models import (
    Alternative,
    GpuReport,
    KvCacheReport,
    KvGroupReport,
    MemoryReport,
    ModelReport,
    Plan,
    Recommendation,
)
from planner.policy.planning import CoreGpuCatalog
from planner.units import GiB, cdiv
from planner.vllm.args import ServingArgs
from planner.vllm.hf_overrides import apply_hf_overrides
from planner.workload import parse_workload

DEFAULT_MAX_NUM_SEQS = 256


class FakeBackend:
    def __init__(self, *, models: dict[str, ModelSpec] | None = None) -> None:
        self._catalog = CoreGpuCatalog()
        self.models = models
        self.calls = 0

    @property
    def catalog(self) -> GpuCatalog:
        return self._catalog

    def resolve_model(
        self, name: str, *, timeout: float | None, offline: bool, allow_local: bool, allow_repos: Any = None
    ) -> ModelSpec:
        if self.models is not None:
            if name not in self.models:
                raise UnknownModelError(name)
            return self.models[name]
        return lookup_model(name)

    def parse_workload(self, data: Any) -> Any:
        return parse_workload(data)

    def apply_overrides(self, model: ModelSpec, overrides: Any, *, vllm_version: str | None) -> Any:
        return apply_hf_overrides(model, None, overrides, version=vllm_version)  # catalog specs: no config.json

    def plan(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        args: ServingArgs,
        *,
        vllm_version: str | None,
        headroom: float,
        workload: Any | None,
    ) -> Plan:
        self.calls += 1
        if args.max_model_len is not None and args.max_model_len > model.derived_max_model_len:
            raise InvalidArgumentError(f"max_model_len {args.max_model_len} > derived {model.derived_max_model_len}")
        util = args.gpu_memory_utilization or 0.9
        budget = int(gpu.memory_bytes * util)
        parallel = args.tensor_parallel_size * args.pipeline_parallel_size
        weights = (model.checkpoint_bytes or 16 * GiB) // parallel
        kv_bytes = budget - weights - GiB
        element = 1 if args.kv_cache_dtype.startswith("fp8") else 2
        per_token = 2 * model.num_layers * model.num_kv_heads * model.head_dim * element // args.tensor_parallel_size
        block_bytes = per_token * 16
        blocks = max(0, kv_bytes // block_bytes) if kv_bytes > 0 else 0
        length = args.max_model_len if args.max_model_len not in (None, -1) else model.derived_max_model_len
        need = cdiv(length, 16)
        longest = max(0, blocks - 1) * 16
        fits = kv_bytes > 0 and need <= blocks - 1
        fit_error = None if fits else ("weights do not fit" if kv_bytes <= 0 else "max_model_len does not fit")
        rec = None
        if kv_bytes > 0 and blocks > 1:
            rec_len = length if fits else longest // 1024 * 1024 or longest
            worst = int((blocks - 1) * (1 - headroom) // cdiv(rec_len, 16))
            default = args.max_num_seqs or DEFAULT_MAX_NUM_SEQS
            if workload is not None:
                average = cdiv(2000, 16)  # every fake request holds 2,000 tokens
                seqs = max(1, min(int((blocks - 1) * (1 - headroom) // average), DEFAULT_MAX_NUM_SEQS))
                basis = "workload"
            else:
                seqs, basis = max(1, min(worst, DEFAULT_MAX_NUM_SEQS)), "worst-case"
            rec = Recommendation(
                max_model_len=rec_len,
                max_num_seqs=seqs if workload else min(seqs, default),
                gpu_memory_utilization=util,
                kv_cache_dtype=args.kv_cache_dtype,
                vllm_args=[],
                basis=basis,
            )
        alternatives = (
            []
            if fits
            else [
                Alternative(change="fp8 KV cache: --kv-cache-dtype fp8", vllm_args=[], fits=True),
                Alternative(change="more GPUs: --tensor-parallel-size 2 (2 GPUs)", vllm_args=[], fits=True),
            ]
        )
        return Plan(
            model=ModelReport(
                id=model.id,
                architecture=model.architecture,
                dtype=model.dtype,
                attention="gqa",
                num_layers=model.num_layers,
                derived_max_model_len=model.derived_max_model_len,
            ),
            gpu=GpuReport(name=gpu.name, memory_bytes=gpu.memory_bytes, count=parallel),
            vllm_version=vllm_version or "0.19.0",
            memory=MemoryReport(
                total_bytes=gpu.memory_bytes,
                gpu_memory_utilization=util,
                budget_bytes=budget,
                weights_bytes=weights,
                weights_estimated=False,
                activation_peak_bytes=GiB,
                non_torch_bytes=0,
                cuda_graph_bytes=0,
                cuda_graph_counted=False,
                kv_cache_bytes=max(kv_bytes, 0),
            ),
            kv_cache=KvCacheReport(
                bytes_per_token=per_token,
                state_bytes_per_sequence=0,
                kv_cache_dtype="fp8" if element == 1 else "bfloat16",
                block_size=16,
                bytes_per_block=block_bytes,
                num_gpu_blocks=blocks,
                tokens=blocks * 16,
                max_concurrency=blocks / need if need else 0.0,
                max_model_len=length,
                blocks_per_request=need,
                estimated_max_model_len=longest,
                groups=[KvGroupReport(kind="full", num_layers=model.num_layers, page_bytes=block_bytes, block_size=16)],
            ),
            fits=fits,
            fit_error=fit_error,
            recommendation=rec,
            alternatives=alternatives,
        )

    def effective_args(
        self, model: ModelSpec, gpu: GpuSpec, args: ServingArgs, *, vllm_version: str | None, max_model_len: int
    ) -> dict[str, Any]:
        return {
            "max_num_seqs": args.max_num_seqs or DEFAULT_MAX_NUM_SEQS,
            "max_num_batched_tokens": 2048,
            "gpu_memory_utilization": args.gpu_memory_utilization or 0.9,
            "block_size": 16,
            "dtype": "bfloat16",
        }
