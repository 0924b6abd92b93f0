"""Limits the webhook and ``planner check`` fill, clamp or suggest hold at the low end of the KV band.

"Safe" must be safe: a limit kv-planner writes (or proposes as a fix) must hold when the prediction is
off by its measured error (planner/plan/margin.py), with the policy's headroom. These run the real
planner core. The first tests are the review's repros (F3: a default context filled because it fits as
predicted; F4: the --max-num-seqs worst case counted on the nominal blocks); the last one re-plans every
filled limit of a grid with its own flags and checks it at the low end of that plan's band.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import jsonpatch
import pytest

from planner.plan.models import Plan
from planner.plan.recommend import safe_cache, worst_case_seqs
from planner.policy.decide import ObjectDecision, WorkloadEntry, decide
from planner.policy.limits import fits_low
from planner.policy.model import Policy
from planner.policy.planning import CoreBackend
from planner.policy.versions import candidate_releases
from planner.vllm.args import ServingArgs
from planner.vllm.argv import parse_args
from tests.policy.conftest import deployment

BACKEND = CoreBackend()
QWEN14 = "Qwen/Qwen2.5-14B-Instruct"
LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
A100_40 = "NVIDIA-A100-SXM4-40GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def _decide(obj: dict[str, Any], *, mutation: str = "fill", headroom: float = 0.1) -> ObjectDecision:
    policy = Policy(validation_action="Enforce", mutation=mutation, headroom=headroom).for_namespace("ml")
    return decide(obj, policy=policy, backend=BACKEND)


def _entry(decision: ObjectDecision) -> WorkloadEntry:
    return next(e for e in decision.entries if e.vllm)


def _patched_args(obj: dict[str, Any], decision: ObjectDecision) -> list[str]:
    patched = jsonpatch.apply_patch(copy.deepcopy(obj), decision.patch)
    args: list[str] = patched["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def _replan(entry: WorkloadEntry, words: list[str], headroom: float) -> tuple[ServingArgs, Plan]:
    """The plan of the admitted flags, as the webhook makes it (its model and GPU, the release in force)."""
    assert entry.plan is not None and entry.vllm_version is not None
    args = parse_args(words, version=entry.vllm_version).serving_args()
    assert entry.model is not None
    model = BACKEND.resolve_model(entry.model, timeout=None, offline=True, allow_local=False)
    gpu = BACKEND.catalog.lookup(entry.plan.gpu.name)
    assert gpu is not None
    plan = BACKEND.plan(model, gpu, args, vllm_version=entry.vllm_version, headroom=headroom, workload=None)
    return args, plan


def _low_worst(plan: Plan, headroom: float) -> int:
    return worst_case_seqs(safe_cache(plan).num_gpu_blocks, plan.kv_cache.blocks_per_request, headroom)


# --- F3: the context --------------------------------------------------------------------------------------


def test_default_context_that_fits_only_as_predicted_is_not_filled() -> None:
    """Qwen2.5-14B on an A100-40GB, 0.19.0: 32,768 tokens need 2,048 usable blocks; 2,129 predicted, 1,951 at
    the low end. It was filled "(the model's default; it fits)"; now the safe context is."""
    obj = deployment(["--model", QWEN14], gpu_product=A100_40)
    result = _decide(obj)
    entry = _entry(result)
    assert entry.decision == "mutate"
    words = _patched_args(obj, result)
    length = int(words[words.index("--max-model-len") + 1])
    assert length == 30720
    assert any(m.startswith("KVP020") and "fits only as predicted" in m for m in entry.messages)
    _, plan = _replan(entry, words, 0.1)
    assert fits_low(plan)


def test_given_context_that_fits_only_as_predicted_warns_and_clamp_lowers_it() -> None:
    obj = deployment(["--model", QWEN14, "--max-model-len", "32768"], gpu_product=A100_40)
    filled = _entry(_decide(obj))
    assert "KVP016" in filled.codes
    assert "--max-model-len 30720" in next(m for m in filled.messages if m.startswith("KVP016"))
    assert filled.effective_args["max_model_len"] == 32768  # fill never changes a given value
    clamped = _decide(obj, mutation="clamp")
    words = _patched_args(obj, clamped)
    assert words[words.index("--max-model-len") + 1] == "30720"
    assert "KVP024" in _entry(clamped).codes and "KVP016" not in _entry(clamped).codes
    off = _entry(_decide(obj, mutation="off"))
    assert "KVP016" in off.codes and off.decision == "warn"


def test_context_that_fits_at_the_low_end_is_still_filled_as_the_default() -> None:
    obj = deployment(["--model", LLAMA8], gpu_product=H100, image="vllm/vllm-openai:v0.33.0")
    entry = _entry(_decide(obj))
    assert "KVP016" not in entry.codes
    assert "KVP020 vllm: added --max-model-len 131072 (the model's default; it fits)" in entry.messages


# --- F4: the --max-num-seqs worst case --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "headroom", "safe"),
    [
        (432, 0.0, 996),  # filled 1024 (vLLM's default) before: 1024 x 27 = 27,648 > 26,918 usable at the low end
        (448, 0.0, 961),  # suggested 997 before: 997 x 28 = 27,916 > 26,918
        (384, 0.1, 1009),  # filled 1024 before: only 1009 keep 10% free at the low end
    ],
)
def test_worst_case_counts_the_blocks_at_the_low_end(length: int, headroom: float, safe: int) -> None:
    obj = deployment(
        ["--model", LLAMA8, "--max-model-len", str(length)], gpu_product=H100, image="vllm/vllm-openai:v0.33.0"
    )
    result = _decide(obj, headroom=headroom)
    entry = _entry(result)
    assert "KVP021" not in entry.codes  # vLLM's default is not "safe" here
    warning = next(f for f in entry.findings if f.code.value == "KVP011")
    assert warning.fix is not None and warning.fix.args == ["--max-num-seqs", str(safe)]
    assert "low end of the KV band" in warning.fix.text
    _, plan = _replan(entry, [*_patched_args(obj, result), "--max-num-seqs", str(safe)], headroom)
    assert _low_worst(plan, headroom) >= safe


# --- the class: every filled or suggested limit, re-planned with its own flags --------------------------------

GRID_MODELS = ["Qwen/Qwen2.5-7B-Instruct", LLAMA8, QWEN14, "mistralai/Mistral-7B-Instruct-v0.3"]
GRID_GPUS = ["NVIDIA-L4", A100_40, "NVIDIA-L40S", H100]
GRID_RELEASES = ["0.6.4", "0.11.0", "0.19.0", "0.33.0"]
GRID_ARGS: list[list[str]] = [
    [],
    ["--gpu-memory-utilization", "0.79"],
    ["--gpu-memory-utilization", "0.82"],
    ["--max-model-len", "432"],
    ["--max-model-len", "8192", "--gpu-memory-utilization", "0.6"],
]


@pytest.mark.slow
@pytest.mark.parametrize("headroom", [0.0, 0.1])
@pytest.mark.parametrize("release", GRID_RELEASES)
def test_every_filled_limit_holds_at_the_low_end_of_its_own_plan(release: str, headroom: float) -> None:
    checked = 0
    for model, gpu, extra in itertools.product(GRID_MODELS, GRID_GPUS, GRID_ARGS):
        obj = deployment(["--model", model, *extra], gpu_product=gpu, image=f"vllm/vllm-openai:v{release}")
        for mutation in ("fill", "clamp"):
            result = _decide(obj, mutation=mutation, headroom=headroom)
            entry = _entry(result)
            if entry.plan is None or entry.decision == "deny":
                continue
            where = f"{model} on {gpu}, {release}, {extra}, {mutation}, headroom {headroom}"
            words = _patched_args(obj, result)
            args, plan = _replan(entry, words, headroom)
            codes = set(entry.codes)
            if codes & {"KVP020", "KVP024"}:
                assert fits_low(plan), f"filled --max-model-len {args.max_model_len} fits only as predicted: {where}"
                checked += 1
            if "KVP021" in codes:
                assert args.max_num_seqs is not None
                assert _low_worst(plan, headroom) >= args.max_num_seqs, f"filled {args.max_num_seqs}: {where}"
                checked += 1
            for item in entry.findings:
                if item.code.value == "KVP011" and item.fix is not None and item.fix.args:
                    value = int(item.fix.args[1])
                    _, fixed = _replan(entry, [*words, *item.fix.args], headroom)
                    assert _low_worst(fixed, headroom) >= value, f"suggested --max-num-seqs {value}: {where}"
                    checked += 1
                if item.code.value == "KVP016":
                    assert not fits_low(plan), where
    assert checked > 0


# --- release unknown: limits hold at the low end of every candidate release ------------------------------


def test_unknown_release_context_holds_at_the_low_end_of_every_release() -> None:
    """Qwen2.5-7B on an L4, image without a release: the release leaving the least KV cache at the low end
    of its band decides (0.7.0 at 32K, where it leaves nothing; 0.33.0 at 16K), and the context one
    release allows caps the next decision, so the fill does not swing back to 32,768 (which 0.7.0 cannot
    start) and a second review changes nothing."""
    obj = deployment(["--model", "Qwen/Qwen2.5-7B-Instruct"], image="registry.example.com/team/vllm-server:2024-11")
    result = _decide(obj)
    words = _patched_args(obj, result)
    length = int(words[words.index("--max-model-len") + 1])
    assert length == 16384
    model = BACKEND.resolve_model("Qwen/Qwen2.5-7B-Instruct", timeout=None, offline=True, allow_local=False)
    gpu = BACKEND.catalog.lookup("L4")
    assert gpu is not None
    for release in candidate_releases():
        plan = BACKEND.plan(
            model, gpu, ServingArgs(max_model_len=length), vllm_version=release, headroom=0.1, workload=None
        )
        assert fits_low(plan), release
    patched = jsonpatch.apply_patch(copy.deepcopy(obj), result.patch)
    assert _decide(patched).patch == []


@pytest.mark.slow
@pytest.mark.parametrize("model", ["Qwen/Qwen2.5-7B-Instruct", LLAMA8, QWEN14])
def test_unknown_release_fills_and_fixes_hold_on_every_release(model: str) -> None:
    checked = 0
    for gpu, extra in itertools.product(["NVIDIA-L4", A100_40, H100], [[], ["--max-model-len", "8192"]]):
        obj = deployment(["--model", model, *extra], gpu_product=gpu, image="registry.example.com/vllm:custom")
        result = _decide(obj)
        entry = _entry(result)
        if entry.plan is None:
            continue
        args = parse_args(_patched_args(obj, result)).serving_args()
        fixes = [int(f.fix.args[1]) for f in entry.findings if f.code.value == "KVP011" and f.fix and f.fix.args]
        spec = BACKEND.resolve_model(model, timeout=None, offline=True, allow_local=False)
        card = BACKEND.catalog.lookup(entry.plan.gpu.name)
        assert card is not None
        for release in candidate_releases():
            plan = BACKEND.plan(spec, card, args, vllm_version=release, headroom=0.1, workload=None)
            where = f"{model} on {gpu} {extra}: {args.max_model_len} under {release}"
            if "KVP020" in entry.codes:
                assert fits_low(plan), where
            for value in fixes:
                fixed = BACKEND.plan(
                    spec,
                    card,
                    args.model_copy(update={"max_num_seqs": value}),
                    vllm_version=release,
                    headroom=0.1,
                    workload=None,
                )
                assert _low_worst(fixed, 0.1) >= value, f"--max-num-seqs {value}: {where}"
            checked += 1
    assert checked > 0
