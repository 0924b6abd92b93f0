"""'Safe' must be safe: every limit kv-planner emits holds at the low end of its own plan's KV band.

The oracle (tests/core/safe_oracle.py) takes the flags a recommendation, an alternative or a catalog row
emits, plans exactly those flags (a changed ``--max-num-seqs`` or context changes what vLLM profiles) and
checks them where the known error leaves the least KV memory, with the user's headroom, and against what
vLLM refuses at startup (``max_num_batched_tokens < max_num_seqs``). One test per fault the review
(2026-12-07) found in the recommendation paths, then a grid of models x GPUs x releases.
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.errors import KvPlannerError
from planner.gpus.catalog import lookup_gpu
from planner.models.catalog import lookup_model
from planner.plan import make_plan
from planner.plan.build import plan_without_recommendation
from planner.vllm.args import ServingArgs
from tests.core.safe_oracle import bigger_gpus, emitted_limits, holds, problems

LLAMA_8B, LLAMA_70B = "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"
QWEN_05B, QWEN_7B, QWEN_14B = "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-14B-Instruct"


def _plan(model: str, gpu: str, version: str | None, headroom: float = 0.1, **flags: Any) -> Any:
    spec, card = lookup_model(model), lookup_gpu(gpu)
    args = ServingArgs(**flags)
    plan = make_plan(spec, card, args, vllm_version=version, headroom=headroom, bigger_gpus=bigger_gpus(card))
    return spec, card, args, plan


def _assert_every_limit_holds(model: str, gpu: str, version: str | None, headroom: float = 0.1, **flags: Any) -> Any:
    spec, card, args, plan = _plan(model, gpu, version, headroom, **flags)
    found = problems(spec, card, args, plan, version, headroom)
    assert not found, found
    return plan


# F1: an option taken from the alternatives kept the nominal context when nothing held at the low end.
@pytest.mark.parametrize(
    ("model", "gpu", "version", "flags"),
    [
        (LLAMA_70B, "A100-40GB", "0.10.1", {"max_model_len": 32768}),
        ("google/gemma-3-27b-it", "L4", "0.10.1", {"max_model_len": 131072, "gpu_memory_utilization": 0.5}),
        ("mistralai/Mistral-7B-Instruct-v0.3", "RTX-3090", "0.19.0", {"gpu_memory_utilization": 0.6}),
    ],
)
def test_f1_every_fitting_alternative_holds_at_the_low_end(
    model: str, gpu: str, version: str, flags: dict[str, Any]
) -> None:
    plan = _assert_every_limit_holds(model, gpu, version, **flags)
    assert plan.recommendation is not None
    assert any(alt.fits for alt in plan.alternatives)


def test_f1_the_tp4_8k_option_whose_low_end_is_empty_is_not_offered_as_fitting() -> None:
    *_, plan = _plan(LLAMA_70B, "A100-40GB", "0.10.1", max_model_len=32768)
    assert plan.recommendation is not None
    assert plan.recommendation.vllm_args != [
        "--max-model-len",
        "8192",
        "--max-num-seqs",
        "1",
        "--gpu-memory-utilization",
        "0.9",
        "--tensor-parallel-size",
        "4",
    ]
    for alt in plan.alternatives:
        if alt.change.startswith("more GPUs: --tensor-parallel-size 4"):
            assert not alt.fits, alt


def test_f1_a_non_fitting_option_emits_no_max_num_seqs() -> None:
    *_, plan = _plan(LLAMA_70B, "A100-40GB", "0.10.1", max_model_len=32768)
    for alt in plan.alternatives:
        assert ("--max-num-seqs" in alt.vllm_args) == alt.fits, alt


# F2: the count of an option used no headroom, no cap and no replan with the count itself.
@pytest.mark.parametrize(
    ("model", "gpu", "version", "flags", "at_most"),
    [
        (QWEN_05B, "H100-80GB", "0.33.0", {"max_model_len": 2048, "gpu_memory_utilization": 0.03}, 1024),
        ("ai21labs/Jamba-v0.1", "L4", "0.19.0", {"max_model_len": 8192, "kv_cache_dtype": "fp8"}, 636),
        (QWEN_05B, "L4", "0.19.0", {"max_model_len": 512, "gpu_memory_utilization": 0.05}, 2048),
    ],
)
def test_f2_the_count_of_an_option_is_capped_and_holds_with_its_own_flags(
    model: str, gpu: str, version: str, flags: dict[str, Any], at_most: int
) -> None:
    plan = _assert_every_limit_holds(model, gpu, version, **flags)
    rec = plan.recommendation
    assert rec is not None and rec.basis.startswith("alternative")
    assert rec.max_num_seqs <= at_most


def test_f2_the_count_is_never_above_max_num_batched_tokens() -> None:
    """vLLM refuses max_num_batched_tokens < max_num_seqs at startup (every checked release)."""
    spec, card = lookup_model(QWEN_05B), lookup_gpu("H100-80GB")
    for version in ("0.6.4", "0.10.1", "0.19.0", "0.33.0"):
        args = ServingArgs(max_model_len=512, max_num_seqs=4096, max_num_batched_tokens=600)
        rec = make_plan(spec, card, args, vllm_version=version).recommendation
        assert rec is not None and rec.max_num_seqs <= 600, (version, rec)


# F7: --vllm-version unknown skipped the V0 rows.
def test_f7_an_unknown_release_recommends_limits_that_start_on_every_checked_release() -> None:
    from planner.vllm.releases import RELEASES

    spec, card = lookup_model(QWEN_7B), lookup_gpu("L4")
    plan = make_plan(spec, card, ServingArgs(), vllm_version=None)
    rec = plan.recommendation
    assert rec is not None and not rec.basis.startswith("alternative")
    flags = ServingArgs(max_model_len=rec.max_model_len, max_num_seqs=rec.max_num_seqs, gpu_memory_utilization=0.92)
    started = 0
    for row in RELEASES:
        other, _ = plan_without_recommendation(spec, card, flags, vllm_version=row.since)
        per = other.kv_cache.blocks_for_sequence(rec.max_model_len)
        assert other.fits, row.since
        assert rec.max_num_seqs * per <= other.kv_cache.num_gpu_blocks - 1, row.since
        started += 1
    assert started == len(RELEASES)
    band = plan.margin
    assert band is not None
    assert any(t.name == "unknown_release" and t.low_bytes > 0 for t in band.terms)


# F8: the catalog table had no margin.
def test_f8_the_catalog_table_holds_at_the_low_end_and_matches_recommend() -> None:
    from planner.plan.fleet import fleet_rows

    card = lookup_gpu("H100-80GB")
    specs = [lookup_model(LLAMA_8B), lookup_model("Qwen/Qwen3-32B")]
    rows = {row.id: row for row in fleet_rows(specs, card, ServingArgs(), vllm_version="0.33.0")}
    for spec in specs:
        row = rows[spec.id]
        full = make_plan(spec, card, ServingArgs(), vllm_version="0.33.0", with_alternatives=False).recommendation
        assert full is not None
        assert (row.max_model_len, row.max_num_seqs_max) == (full.max_model_len, full.max_num_seqs)
        for length, value in ((4096, row.max_num_seqs_4096), (32768, row.max_num_seqs_32768)):
            rec = make_plan(
                spec, card, ServingArgs(max_model_len=length), vllm_version="0.33.0", with_alternatives=False
            ).recommendation
            want = rec.max_num_seqs if rec is not None and rec.max_model_len == length else None
            assert value == want, (spec.id, length)
        emitted = [(4096, row.max_num_seqs_4096), (32768, row.max_num_seqs_32768)]
        for length, seqs in [*emitted, (row.max_model_len, row.max_num_seqs_max)]:
            if seqs is not None and length is not None:
                assert seqs >= 1
                assert holds(spec, card, ServingArgs(max_model_len=length, max_num_seqs=seqs), "0.33.0", 0.1) == []
    llama = rows[LLAMA_8B]
    assert (llama.max_num_seqs_4096, llama.max_num_seqs_32768, llama.max_num_seqs_max) == (94, 11, 2)
    assert rows["Qwen/Qwen3-32B"].max_num_seqs_max != 0


# F9: when the margin leaves nothing, say so.
def test_f9_no_safe_limits_is_said_and_alternatives_are_offered() -> None:
    spec, card, args, plan = _plan(LLAMA_70B, "A100-40GB", "0.10.1", max_model_len=8192, tensor_parallel_size=4)
    assert plan.fits
    assert any(w.startswith("KVP115 no safe limits") for w in plan.warnings)
    assert plan.alternatives and any(alt.fits for alt in plan.alternatives)
    assert plan.recommendation is None or plan.recommendation.basis.startswith("alternative")
    assert problems(spec, card, args, plan, "0.10.1", 0.1) == []


@pytest.mark.parametrize("output", ["table", "json", "args"])
def test_f9_the_cli_exits_1_without_safe_limits(output: str) -> None:
    from typer.testing import CliRunner

    from planner.cli import app

    words = ["recommend", "--gpu", "A100-40GB", "--model", LLAMA_70B, "--max-model-len", "8192"]
    words += ["--vllm-version", "0.10.1", "-tp", "4", "-o", output]
    result = CliRunner().invoke(app, words)
    assert result.exit_code == 1, result.output
    if output == "table":
        assert "no safe limits" in result.output
    if output == "args":
        assert "no safe limits as asked" in result.output


# Smaller: one sequence that does not keep the headroom.
def test_one_sequence_keeps_the_headroom_or_the_context_gives_way() -> None:
    spec, card = lookup_model(QWEN_14B), lookup_gpu("A100-40GB")
    plan = make_plan(spec, card, ServingArgs(), vllm_version="0.19.0")
    rec = plan.recommendation
    assert rec is not None and rec.max_num_seqs == 1 and rec.max_model_len < 30720
    assert any("--headroom 0.1" in note for note in rec.notes)
    assert holds(spec, card, ServingArgs(max_model_len=rec.max_model_len, max_num_seqs=1), "0.19.0", 0.1) == []
    free = make_plan(spec, card, ServingArgs(), vllm_version="0.19.0", headroom=0.0).recommendation
    assert free is not None and free.max_model_len == 30720 and free.notes == []


# Smaller: make_plan without alternatives returned an unverified shorter context under V0.
def test_without_alternatives_a_shorter_context_is_planned_again() -> None:
    spec, card = lookup_model(LLAMA_8B), lookup_gpu("L4")
    args = ServingArgs(max_model_len=65536)
    plan = make_plan(spec, card, args, vllm_version="0.6.4", with_alternatives=False)
    rec = plan.recommendation
    assert rec is not None
    assert holds(spec, card, args.model_copy(update=emitted_limits(rec.vllm_args)), "0.6.4", 0.1) == []


# The class: a grid of models x GPUs x releases (the unknown one included), contexts, utilizations and
# headrooms; every limit emitted (recommendation, every fitting option, on the bigger GPUs too) is planned
# again with its own flags and checked at the low end of that plan's band.
_KINDS = [
    LLAMA_8B,  # dense GQA
    QWEN_7B,  # V0 on T4, the 32K profile switch
    "google/gemma-3-27b-it",  # sliding window + vision encoder
    "ai21labs/Jamba-v0.1",  # Mamba hybrid
    "deepseek-ai/DeepSeek-V2-Lite",  # MLA + MoE
    "Qwen/Qwen3-30B-A3B",  # MoE
    "openai/gpt-oss-20b",  # MXFP4, sliding
    "mistralai/Mistral-7B-v0.1",  # sliding window on every layer
    LLAMA_70B,  # TP alternatives
]
_SETTINGS: list[dict[str, Any]] = [
    {},
    {"max_model_len": 32768},
    {"max_model_len": 32768, "gpu_memory_utilization": 0.6},
    {"max_model_len": 8192, "kv_cache_dtype": "fp8", "tensor_parallel_size": 2},
    {"max_model_len": 4096, "max_num_batched_tokens": 256},
]


def _grid(models: list[str], gpus: list[str], versions: list[str | None], settings: list[dict[str, Any]]) -> None:
    found: list[str] = []
    checked = 0
    for model in models:
        for gpu in gpus:
            for version in versions:
                for flags in settings:
                    for headroom in (0.1, 0.0) if not flags else (0.1,):
                        try:
                            spec, card, args, plan = _plan(model, gpu, version, headroom, **flags)
                        except KvPlannerError:  # vLLM refuses these flags: nothing is emitted
                            continue
                        checked += 1
                        found += problems(spec, card, args, plan, version, headroom)
    assert checked > len(models) * len(gpus) * len(versions)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("version", ["0.6.4", "0.10.1", "0.19.0", "0.33.0", None])
def test_every_emitted_limit_holds_on_a_grid(version: str | None) -> None:
    # (an unknown release plans every checked release for each limit: fewer points)
    models = _KINDS[::2] if version is not None else _KINDS[1::4]
    _grid(models, ["T4", "L4", "H100-80GB"], [version], _SETTINGS[:3])


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.6.4", "0.8.0", "0.10.1", "0.13.0", "0.19.0", "0.26.0", "0.33.0", None])
def test_every_emitted_limit_holds_on_the_whole_grid(version: str | None) -> None:
    models = _KINDS if version is not None else _KINDS[::2]  # (unknown: every checked release per limit)
    _grid(models, ["T4", "L4", "A100-40GB", "H100-80GB", "MI300X"], [version], _SETTINGS)


@pytest.mark.parametrize("version", ["0.10.1", "0.33.0", None])
def test_every_catalog_table_limit_holds(version: str | None) -> None:
    from planner.models.catalog import all_models
    from planner.plan.fleet import fleet_rows

    models = list(all_models())[:: 12 if version is None else 4]
    found = []
    for gpu in ("L4", "H100-80GB"):
        card = lookup_gpu(gpu)
        for row, spec in zip(fleet_rows(models, card, ServingArgs(), vllm_version=version), models, strict=True):
            for length, seqs in (
                (4096, row.max_num_seqs_4096),
                (32768, row.max_num_seqs_32768),
                (row.max_model_len, row.max_num_seqs_max),
            ):
                if length is None or seqs is None:
                    continue
                flags = ServingArgs(max_model_len=length, max_num_seqs=seqs)
                wrong = holds(spec, card, flags, version, 0.1)
                if wrong or seqs < 1:
                    found.append(f"{spec.id} on {gpu} @{length}: {seqs} {wrong}")
    assert not found, "\n".join(found)
