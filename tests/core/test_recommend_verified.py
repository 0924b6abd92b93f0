"""A recommended --max-model-len is checked by planning it: a shorter context can leave less KV memory.

V0 (vllm/engine/arg_utils.py _set_default_args_v0, 0.6-0.10) turns chunked prefill on only past 32K tokens,
so lowering the context to 32K or below makes the profile batch the whole context: vLLM #10517 (Llama-3.1-8B,
RTX 3090, 0.6.4.post1) starts at 20K and 35K but refuses 29K. Before this check the planner recommended
--max-model-len 31744 for that GPU, a context its own plan of 31744 says vLLM refuses.
"""

from __future__ import annotations

import pytest

from planner.gpus.catalog import lookup_gpu
from planner.models.catalog import lookup_model
from planner.plan import make_plan
from planner.plan.build import predict
from planner.vllm.args import ServingArgs


@pytest.mark.parametrize("version", ["0.6.3.post1", "0.6.4.post1", "0.6.5", "0.7.3", "0.10.1.1", "0.19.0"])
@pytest.mark.parametrize("max_model_len", [None, 40000, 33000])
def test_the_recommended_limits_fit_when_planned(version: str, max_model_len: int | None) -> None:
    spec, gpu = lookup_model("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("RTX-3090")
    args = ServingArgs(max_model_len=max_model_len, gpu_memory_utilization=0.9)
    rec = make_plan(spec, gpu, args, vllm_version=version).recommendation
    assert rec is not None
    replayed = predict(
        spec,
        gpu,
        args.model_copy(update={"max_model_len": rec.max_model_len, "max_num_seqs": rec.max_num_seqs}),
        vllm_version=version,
    )
    assert replayed.fit_error is None, (rec.max_model_len, replayed.fit_error)


def test_10517_recommendation_stays_clear_of_the_32k_switch() -> None:
    spec, gpu = lookup_model("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("RTX-3090")
    plan = make_plan(spec, gpu, ServingArgs(gpu_memory_utilization=0.9), vllm_version="0.6.4.post1")
    assert plan.recommendation is not None
    length = plan.recommendation.max_model_len
    # 29,000 is what the user saw refused (23,648 tokens of KV cache); the recommendation is either
    # past the 32K switch (chunked prefill, 2,048-token batch) or short enough for its own batch.
    assert length > 32768 or length < 23648
    shorter = next(a for a in plan.alternatives if a.change.startswith("shorter context"))
    assert shorter.fits and f"--max-model-len {length}" in shorter.change
