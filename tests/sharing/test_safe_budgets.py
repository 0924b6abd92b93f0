"""KV budgets kv-planner pins or sizes hold when the prediction is off by its measured error.

F5: a pinned ``--kv-cache-memory-bytes`` turns vLLM's profiling off, so the error of the other terms
(weights, activations, CUDA graphs) is no longer taken from the KV cache: it lands on the pod's footprint.
A shared-GPU fill pins the blocks at the low end of the band, so the pod stays within its share when the
other terms take their whole error; ``--target-seqs`` pins exactly the target's blocks and counts that
error in the pod's size. F6: before 0.10.2 (no flag) ``--target-seqs`` picks the utilization whose plan
holds the target at the low end of its band, since vLLM profiles.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from planner.gpus.catalog import lookup_gpu
from planner.hub.resolve import resolve_model
from planner.plan import make_plan
from planner.plan.inverse import smallest_budget
from planner.plan.margin import fits_at_low_end, low_end_blocks
from planner.plan.models import Plan
from planner.plan.recommend import worst_case_seqs
from planner.plan.shared import CONTEXT_RESERVE_BYTES
from planner.policy.decide import decide
from planner.policy.model import Policy
from planner.policy.planning import CoreBackend
from planner.vllm.args import ServingArgs
from tests.policy.conftest import deployment

BACKEND = CoreBackend()
GiB = 1 << 30


def _terms(plan: Plan) -> int:
    memory = plan.memory
    return memory.weights_bytes + memory.non_torch_bytes + memory.activation_peak_bytes + memory.cuda_graph_bytes


def _shared(model: str, product: str, replicas: int, release: str, extra: list[str]) -> dict[str, Any]:
    obj = deployment(["--model", model, *extra], gpu_product=f"{product}-SHARED", image=f"vllm/vllm-openai:v{release}")
    obj["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.replicas"] = str(replicas)
    return obj


def _filled_share(obj: dict[str, Any], headroom: float = 0.1) -> tuple[Any, dict[str, str]]:
    policy = Policy(validation_action="Enforce", mutation="fill", headroom=headroom).for_namespace("ml")
    result = decide(obj, policy=policy, backend=BACKEND)
    entry = next(e for e in result.entries if e.vllm)
    words = [str(op["value"]) for op in entry.patch if str(op["path"]).endswith("/args/-")]
    return entry, dict(zip(words[::2], words[1::2], strict=True))


def _profiled(entry: Any, util: float, length: int) -> Plan:
    """The plan vLLM would profile with the filled utilization and no pinned size."""
    model = resolve_model(entry.model, offline=True).spec
    gpu = lookup_gpu(entry.plan.gpu.name)
    args = ServingArgs(gpu_memory_utilization=util, max_model_len=length)
    return make_plan(model, gpu, args, vllm_version=entry.vllm_version, with_alternatives=False)


# --- F5: a shared GPU ----------------------------------------------------------------------------------


def test_time_sliced_pin_is_the_low_end_and_the_second_pod_still_starts() -> None:
    """The review's ts.yaml: Llama-3.1-8B, 32K, an H100 time-sliced two ways, 0.33.0. The pin was the
    nominal 20.51 GiB: with the other terms 1.99 GiB larger the pod took 41.29 GiB and the second pod found
    37.40 GiB free, less than the 38.80 GiB it asks for. Pinned at the low end (18.52 GiB) it fits."""
    llama = "meta-llama/Llama-3.1-8B-Instruct"
    obj = _shared(llama, "NVIDIA-H100-80GB-HBM3", 2, "0.33.0", ["--max-model-len", "32768"])
    entry, flags = _filled_share(obj)
    util, pinned = float(flags["--gpu-memory-utilization"]), int(flags["--kv-cache-memory-bytes"])
    profiled = _profiled(entry, util, 32768)
    assert profiled.margin is not None
    assert pinned == low_end_blocks(profiled) * profiled.kv_cache.bytes_per_block
    assert pinned < profiled.kv_cache.num_gpu_blocks * profiled.kv_cache.bytes_per_block
    share = entry.plan.sharing
    worst = _terms(profiled) + profiled.margin.down_bytes + pinned + CONTEXT_RESERVE_BYTES
    assert worst <= share.budget_bytes
    assert share.demand_bytes == worst  # the report counts the terms' error on a pinned size
    second_request = math.ceil(share.card_bytes * util)
    assert share.card_bytes - worst - CONTEXT_RESERVE_BYTES >= second_request
    assert entry.plan.fits  # the pinned size holds one 32K sequence: the limits hold with it


@pytest.mark.slow
def test_every_pinned_share_holds_with_the_error() -> None:
    """A grid of shared-GPU fills: the pod with the other terms at their whole error stays in its share,
    and the pinned cache holds the context and the worst case the webhook allows."""
    checked = 0
    models = ["Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-14B-Instruct"]
    cards = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S"]
    for model, card, replicas, release, length in itertools.product(
        models, cards, [2, 3, 4], ["0.11.0", "0.19.0", "0.33.0"], [8192, 32768]
    ):
        obj = _shared(model, card, replicas, release, ["--max-model-len", str(length)])
        entry, flags = _filled_share(obj)
        if "--kv-cache-memory-bytes" not in flags:
            continue
        where = f"{model} on {card}/{replicas}, {release}, {length}"
        util, pinned = float(flags["--gpu-memory-utilization"]), int(flags["--kv-cache-memory-bytes"])
        profiled = _profiled(entry, util, length)
        assert profiled.margin is not None and fits_at_low_end(profiled), where
        worst = _terms(profiled) + profiled.margin.down_bytes + pinned + CONTEXT_RESERVE_BYTES
        assert worst <= entry.plan.sharing.budget_bytes, where
        assert pinned <= low_end_blocks(profiled) * profiled.kv_cache.bytes_per_block, where
        assert entry.plan.fits, where
        checked += 1
    assert checked > 20


# --- F5: --target-seqs ---------------------------------------------------------------------------------


def test_target_seqs_pod_counts_the_error_of_the_other_terms() -> None:
    """Llama-3.1-8B on an H100, 0.33.0, 32K, 8 sequences: the pod was reported at 54.35 GiB (all terms as
    predicted), leaving 24.84 GiB; with the pinned size the other terms' error is the pod's."""
    model = resolve_model("meta-llama/Llama-3.1-8B-Instruct", offline=True).spec
    gpu = lookup_gpu("H100-80GB")

    def plan_fn(args: ServingArgs) -> Plan:
        return make_plan(model, gpu, args, vllm_version="0.33.0", with_alternatives=False)

    base_args = ServingArgs(max_model_len=32768)
    advice, chosen = smallest_budget(plan_fn, base_args, target_seqs=8, headroom=0.1, kv_bytes_flag=True)
    base = plan_fn(base_args)
    assert base.margin is not None and advice.kv_cache_memory_bytes is not None
    assert advice.gpu_memory_utilization is not None
    worst = _terms(chosen) + base.margin.down_bytes + advice.kv_cache_memory_bytes + CONTEXT_RESERVE_BYTES
    assert advice.pod_bytes >= worst
    assert advice.left_for_co_tenants_bytes == base.memory.total_bytes - advice.pod_bytes
    # vLLM's startup check claims what the pod may take: the utilization's own low end holds the blocks
    at_util = plan_fn(base_args.model_copy(update={"gpu_memory_utilization": advice.gpu_memory_utilization}))
    assert low_end_blocks(at_util) >= advice.num_gpu_blocks
    assert advice.pod_bytes > 55 * GiB  # was 54.35 GiB


# --- F6: --target-seqs before 0.10.2 ------------------------------------------------------------------------


def test_target_seqs_without_the_flag_holds_at_the_low_end() -> None:
    """Llama-3.1-70B, TP 4 on A100-80GB, 0.10.1, 16K, 10 sequences, headroom 0: utilization 0.6 was picked
    (10,299 blocks predicted, 8,957 at the low end: 8 sequences there)."""
    model = resolve_model("meta-llama/Llama-3.1-70B-Instruct", offline=True).spec
    gpu = lookup_gpu("A100-80GB")

    def plan_fn(args: ServingArgs) -> Plan:
        return make_plan(model, gpu, args, vllm_version="0.10.1", with_alternatives=False)

    args = ServingArgs(max_model_len=16384, tensor_parallel_size=4)
    advice, _ = smallest_budget(plan_fn, args, target_seqs=10, headroom=0.0, kv_bytes_flag=False)
    assert advice.gpu_memory_utilization is not None and advice.gpu_memory_utilization > 0.6
    at = plan_fn(args.model_copy(update={"gpu_memory_utilization": advice.gpu_memory_utilization}))
    per = at.kv_cache.blocks_for_sequence(16384)
    assert worst_case_seqs(low_end_blocks(at), per, 0.0) >= 10


@pytest.mark.parametrize("target", range(1, 8))
def test_target_seqs_on_v0_holds_at_the_low_end(target: int) -> None:
    """Qwen2.5-7B on an L4 with 0.9.2: targets 1-7 were all short at the low end."""
    model = resolve_model("Qwen/Qwen2.5-7B-Instruct", offline=True).spec
    gpu = lookup_gpu("L4")

    def plan_fn(args: ServingArgs) -> Plan:
        return make_plan(model, gpu, args, vllm_version="0.9.2", with_alternatives=False)

    args = ServingArgs(max_model_len=8192)
    advice, _ = smallest_budget(plan_fn, args, target_seqs=target, headroom=0.1, kv_bytes_flag=False)
    if advice.gpu_memory_utilization is None:
        return  # reported as not fitting (KVP208), not hidden
    at = plan_fn(args.model_copy(update={"gpu_memory_utilization": advice.gpu_memory_utilization}))
    per = at.kv_cache.blocks_for_sequence(8192)
    assert fits_at_low_end(at)
    assert worst_case_seqs(low_end_blocks(at), per, 0.1) >= target


@pytest.mark.slow
@pytest.mark.parametrize("headroom", [0.0, 0.1])
@pytest.mark.parametrize("release", ["0.9.2", "0.10.1", "0.11.0", "0.33.0"])
def test_every_target_budget_holds_at_the_low_end(release: str, headroom: float) -> None:
    """--target-seqs over models x GPUs x targets: re-planned with its own flags, the target holds (at the
    low end of the band where vLLM profiles), and the pod's size counts the other terms' error."""
    checked = 0
    models = ["Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-14B-Instruct"]
    for name, card, target in itertools.product(models, ["L4", "A100-40GB", "H100-80GB"], [1, 4, 16]):
        model = resolve_model(name, offline=True).spec
        gpu = lookup_gpu(card)

        def plan_fn(args: ServingArgs) -> Plan:
            return make_plan(model, gpu, args, vllm_version=release, with_alternatives=False)  # noqa: B023

        args = ServingArgs(max_model_len=8192)
        flag = release not in ("0.9.2", "0.10.1")
        advice, _ = smallest_budget(plan_fn, args, target_seqs=target, headroom=headroom, kv_bytes_flag=flag)
        if advice.gpu_memory_utilization is None:
            continue
        where = f"{name} on {card}, {release}, {target} x 8192, headroom {headroom}"
        util = advice.gpu_memory_utilization
        own = args.model_copy(
            update={"gpu_memory_utilization": util, "kv_cache_memory_bytes": advice.kv_cache_memory_bytes}
        )
        plan = plan_fn(own)
        per = plan.kv_cache.blocks_for_sequence(8192)
        assert fits_at_low_end(plan), where
        assert worst_case_seqs(low_end_blocks(plan), per, headroom) >= target, where
        profiled = plan_fn(args.model_copy(update={"gpu_memory_utilization": util}))
        assert worst_case_seqs(low_end_blocks(profiled), per, headroom) >= target, where  # the claim holds it
        if flag:
            assert profiled.margin is not None
            worst = _terms(plan) + profiled.margin.down_bytes + plan.memory.kv_cache_bytes + CONTEXT_RESERVE_BYTES
            assert advice.pod_bytes >= worst, where
        checked += 1
    assert checked > 5
