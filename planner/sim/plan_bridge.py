"""``planner simulate serve --model M --gpu G``: size the simulated cache with the planner core.

The simulator takes only ``num_gpu_blocks``, ``block_size`` and ``max_model_len`` from the plan (plus
the GPU's bandwidth and the weight/KV byte figures for the speed model) and never the planner's
concurrency formulas, so tests that compare the simulator with the planner are not circular.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from planner.errors import CapacityError
from planner.models.spec import ModelSpec
from planner.sim.engine import SpeedModel
from planner.vllm.args import ServingArgs


class PlannedCache(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model_id: str
    gpu_name: str
    num_gpu_blocks: int
    block_size: int
    max_model_len: int
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    speed: SpeedModel
    warnings: list[str] = []


def plan_cache(model: str, gpu: str, args: ServingArgs, *, vllm_version: str | None) -> PlannedCache:
    """Run ``make_plan`` for catalog (or resolvable) model ``model`` on catalog GPU ``gpu``."""
    from planner.gpus.catalog import lookup_gpu
    from planner.plan import make_plan

    gpu_spec = lookup_gpu(gpu)
    model_spec = _model_spec(model)
    plan = make_plan(model_spec, gpu_spec, args, vllm_version=vllm_version, with_alternatives=False)
    if not plan.fits:
        raise CapacityError(plan.fit_error or f"{model} does not fit on {gpu_spec.name} with these settings")
    kv = plan.kv_cache
    gpus = max(1, plan.gpu.count)
    bandwidth = float(gpu_spec.bandwidth_bytes_per_s)
    # Decode is memory bound: a step reads the (per-GPU) weights once, and every scheduled request's
    # KV cache; prefill adds compute per token (kept at the default).
    speed = SpeedModel(
        base_s=plan.memory.weights_bytes / bandwidth,
        per_context_token_s=kv.bytes_per_token / gpus / bandwidth,
    )
    # vLLM's own batch defaults for this device class (what `vllm serve` would run with), never the
    # planner's recommendation: the simulator must not inherit the planner's concurrency formulas.
    from planner.vllm.defaults import batch_defaults
    from planner.vllm.releases import resolve_release

    _, release, _ = resolve_release(vllm_version)
    mnbt_default, seqs_default = batch_defaults(gpu_spec, release)
    return PlannedCache(
        model_id=plan.model.id,
        gpu_name=gpu_spec.name,
        num_gpu_blocks=kv.num_gpu_blocks,
        block_size=kv.block_size,
        max_model_len=kv.max_model_len,
        max_num_seqs=args.max_num_seqs or seqs_default,
        max_num_batched_tokens=args.max_num_batched_tokens or mnbt_default,
        speed=speed,
        warnings=list(plan.warnings),
    )


def _model_spec(name: str) -> ModelSpec:
    """Catalog first; a local directory or Hub id through the resolver when the catalog misses."""
    from planner.errors import UnknownModelError
    from planner.models.catalog import lookup_model

    try:
        return lookup_model(name)
    except UnknownModelError:
        from planner.hub.resolve import resolve_model

        return resolve_model(name).spec
