"""Turn startup records in the shared calibration schema into kv-planner's own calibration data.

Run: python scripts/import_startup_records.py ../shared/calibration/vllm-startup.jsonl \
        > planner/data/calibration/benchmark-logs.jsonl

Only the numbers vLLM printed, the deployment settings and the source URL are kept (see
planner/calibration/dataset.py for the schema); log excerpts and free-text notes are not carried over.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from planner.calibration.dataset import Deployment, Measured, Source, Startup
from planner.calibration.records import StartupRecord, load_records


def convert(record: StartupRecord) -> Startup:
    if not record.source_url or not record.gpu or not record.vllm_version:
        raise SystemExit(f"{record.id}: a record needs a source URL, a GPU and a vLLM version")
    estimate = record.graph_estimate_gib
    return Startup(
        id=record.id,
        deployment=Deployment(
            model=record.model,
            base_model=record.base_model,
            weight_scheme=record.quantization,
            gpu=record.gpu,
            gpus=record.gpu_count or 1,
            vllm=record.vllm_version,
            engine=record.engine or "v1",
            tp=record.tensor_parallel_size or 1,
            pp=record.pipeline_parallel_size or 1,
            dtype=record.dtype,
            kv_dtype=record.kv_cache_dtype,
            utilization=record.gpu_memory_utilization,
            max_model_len=record.max_model_len,
            max_num_seqs=record.max_num_seqs,
            max_batched_tokens=record.max_num_batched_tokens,
            block_size=record.block_size,
            eager=record.enforce_eager,
        ),
        measured=Measured(
            total_gib=record.total_gpu_memory_gib,
            weights_gib=record.weights_gib,
            non_torch_gib=record.non_torch_gib,
            activation_gib=record.activation_peak_gib,
            cuda_graph_gib=record.cuda_graph_gib,
            cuda_graph_estimate_gib=estimate,
            kv_gib=record.kv_cache_memory_gib,
            kv_tokens=record.kv_cache_tokens,
            blocks=record.gpu_blocks,
            concurrency_len=record.max_concurrency_len,
            concurrency=record.max_concurrency_x,
        ),
        source=Source(url=record.source_url),
    )


def main(path: str) -> None:
    for record in load_records(Path(path)):
        if isinstance(record, str):
            raise SystemExit(record)
        print(json.dumps(convert(record).model_dump(mode="json", exclude_none=True), sort_keys=False))


if __name__ == "__main__":
    main(sys.argv[1])
