"""The decisions' backend predicts a setting once when it plans it without and then with a workload profile
(a decision's fit check, then its --max-num-seqs), and once whether its utilization is unset or spelled out
as the release's default (a decision fills it): the plans are those of make_plan from scratch, and the
kept prediction is never changed by the plans made from it."""

from __future__ import annotations

import pytest

import planner.policy.planning as planning
from planner.errors import PlannerInputError, UnknownVllmVersionError
from planner.findings import Code, Finding
from planner.gpus.catalog import lookup_gpu
from planner.models.catalog import lookup_model
from planner.plan import make_plan
from planner.plan.build import plan_without_recommendation
from planner.plan.models import Plan
from planner.policy.planning import CoreBackend
from planner.vllm.args import ServingArgs
from planner.workload import parse_workload

CHAT = parse_workload({"prompt_tokens": {"p50": 800, "p99": 12000}, "output_tokens": {"p50": 200, "p99": 2000}})
SPEC, GPU = lookup_model("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("L4")


def test_one_prediction_serves_the_plan_with_and_without_a_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[ServingArgs] = []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[2])
        return plan_without_recommendation(*args, **kwargs)

    monkeypatch.setattr(planning, "plan_without_recommendation", counted)
    backend = CoreBackend()
    args = ServingArgs(max_model_len=16_384)
    plain = backend.plan(SPEC, GPU, args, vllm_version="0.19.0", headroom=0.1, workload=None)
    profiled = backend.plan(SPEC, GPU, args, vllm_version="0.19.0", headroom=0.1, workload=CHAT)
    other_headroom = backend.plan(SPEC, GPU, args, vllm_version="0.19.0", headroom=0.2, workload=CHAT)
    # The three plans share one prediction, and their recommendation's (the count it settled on, planned
    # once): no setting is predicted twice.
    assert calls[0] == args
    assert len({a.model_dump_json() for a in calls}) == len(calls)
    predicted = len(calls)
    assert plain.model_dump() == make_plan(SPEC, GPU, args, vllm_version="0.19.0").model_dump()
    lean = make_plan(SPEC, GPU, args, vllm_version="0.19.0", workload=CHAT, average_risk=False)
    assert profiled.model_dump() == lean.model_dump()
    roomier = make_plan(SPEC, GPU, args, vllm_version="0.19.0", headroom=0.2, workload=CHAT, average_risk=False)
    assert other_headroom.model_dump() == roomier.model_dump()
    assert plain.recommendation is not None and profiled.recommendation is not None
    assert plain.recommendation.basis == "worst-case" and profiled.recommendation.basis == "workload"
    backend.plan(SPEC, GPU, ServingArgs(max_model_len=8_192), vllm_version="0.19.0", headroom=0.1, workload=None)
    assert calls[predicted] == ServingArgs(max_model_len=8_192)  # another setting is predicted anew


def test_plans_made_from_a_kept_base_leave_it_unchanged() -> None:
    """make_plan replaces a copy's fields and later steps append to its findings (make_shared_plan does):
    neither reaches the kept base, which the next plan of the same setting starts from."""
    args = ServingArgs(max_model_len=16_384)
    base = plan_without_recommendation(SPEC, GPU, args, vllm_version="0.19.0")
    before = base[0].model_dump()
    first = make_plan(SPEC, GPU, args, vllm_version="0.19.0", workload=CHAT, base=base)
    first.findings.append(Finding.of(Code.SHARED_GPU_BUDGET, "shared GPU: a note added after planning"))
    second = make_plan(SPEC, GPU, args, vllm_version="0.19.0", base=base)
    assert base[0].model_dump() == before
    assert base[0].recommendation is None and base[0].alternatives == []
    assert second.model_dump() == make_plan(SPEC, GPU, args, vllm_version="0.19.0").model_dump()


@pytest.mark.parametrize("headroom", [1.0, -0.1, 1.5])
def test_a_bad_headroom_is_refused_before_anything_is_predicted_or_kept(
    monkeypatch: pytest.MonkeyPatch, headroom: float
) -> None:
    calls: list[ServingArgs] = []
    monkeypatch.setattr(planning, "plan_without_recommendation", lambda *a, **k: calls.append(a[2]))
    with pytest.raises(PlannerInputError, match="headroom must be in"):
        CoreBackend().plan(SPEC, GPU, ServingArgs(), vllm_version="0.19.0", headroom=headroom, workload=None)
    assert calls == []


def test_no_release_and_a_release_spelled_none_are_different_settings() -> None:
    """The memo keys spell the release as JSON: no release given (the newest known) is ``null``, and a
    manifest's release "None" is a string, which vLLM's version rules refuse; it must not find the plan
    memoized for no release."""
    backend = CoreBackend()
    args = ServingArgs(max_model_len=8_192)
    assert backend.plan(SPEC, GPU, args, vllm_version=None, headroom=0.1, workload=None).fits
    with pytest.raises(UnknownVllmVersionError):
        backend.plan(SPEC, GPU, args, vllm_version="None", headroom=0.1, workload=None)


def test_the_plan_memo_keeps_the_most_recently_used() -> None:
    """The plan memo is a bounded LRU (planner.hub.memo.Memo, as each of the backend's caches is): with room
    for two plans, the one asked for again stays and the one not used since is the one a third pushes out."""
    backend = CoreBackend(memo_size=2)

    def plan(context: int) -> Plan:
        args = ServingArgs(max_model_len=context)
        return backend.plan(SPEC, GPU, args, vllm_version="0.19.0", headroom=0.1, workload=None)

    first, second = plan(4_096), plan(8_192)
    assert plan(4_096) is first  # used again: now the most recent
    plan(16_384)  # pushes out 8,192, the least recently used
    assert plan(4_096) is first
    again = plan(8_192)
    assert again is not second and again.model_dump() == second.model_dump()  # planned anew, the same plan


def test_a_release_spread_of_none_is_kept_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A workload whose candidate releases give no spread (None) is summed up once, like any other: the memo
    holds None as a value, not as "absent"."""
    calls: list[object] = []

    def counted(*args: object, **kwargs: object) -> None:
        calls.append(args)
        return None

    monkeypatch.setattr(planning, "release_spread", counted)
    backend = CoreBackend()
    args = ServingArgs(max_model_len=8_192)
    assert backend.release_spread(SPEC, GPU, args, headroom=0.1) is None
    assert backend.release_spread(SPEC, GPU, args, headroom=0.1) is None
    assert len(calls) == 1


@pytest.mark.parametrize("version", ["0.6.0", "0.10.2", "0.19.0", None])
@pytest.mark.parametrize(
    ("model_id", "gpu_name", "context"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "L4", 16_384),
        ("Qwen/Qwen3-30B-A3B", "H100-80GB", 32_768),
        ("google/gemma-3-12b-it", "A100-80GB", 8_192),  # a vision tower: its profile reads the context
        ("Qwen/Qwen3-32B", "A10G", 20_480),  # does not fit: alternatives
    ],
)
def test_an_unset_utilization_and_the_release_default_spelled_out_plan_alike(
    model_id: str, gpu_name: str, context: int, version: str | None
) -> None:
    """What lets the backend key a prediction with the default spelled out: every figure of the plan (its
    recommendation and alternatives included) is the same either way."""
    spec, gpu = lookup_model(model_id), lookup_gpu(gpu_name)
    unset = ServingArgs(max_model_len=context)
    spelled = planning._utilization_spelled(unset, version)
    assert spelled.gpu_memory_utilization is not None and spelled != unset
    assert make_plan(spec, gpu, unset, vllm_version=version).model_dump() == (
        make_plan(spec, gpu, spelled, vllm_version=version).model_dump()
    )


def test_a_filled_utilization_is_not_predicted_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decision plans the flags as written, then with the utilization it filled (the release's default)
    and the count emitted: the second plan's predictions are the first's, and each plan is make_plan's."""
    calls: list[ServingArgs] = []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[2])
        return plan_without_recommendation(*args, **kwargs)

    monkeypatch.setattr(planning, "plan_without_recommendation", counted)
    backend = CoreBackend()
    written = ServingArgs(max_model_len=16_384, enable_prefix_caching=True)
    first = backend.plan(SPEC, GPU, written, vllm_version="0.19.0", headroom=0.1, workload=None)
    predicted = len(calls)
    assert first.recommendation is not None
    filled = written.model_copy(
        update={"gpu_memory_utilization": 0.9, "max_num_seqs": first.recommendation.max_num_seqs}
    )
    second = backend.plan(SPEC, GPU, filled, vllm_version="0.19.0", headroom=0.1, workload=None)
    assert len(calls) == predicted  # every setting it needed was predicted for the first
    assert first.model_dump() == make_plan(SPEC, GPU, written, vllm_version="0.19.0").model_dump()
    assert second.model_dump() == make_plan(SPEC, GPU, filled, vllm_version="0.19.0").model_dump()


def test_a_utilization_is_spelled_out_only_when_unset_and_the_release_is_known() -> None:
    given = ServingArgs(gpu_memory_utilization=0.8)
    assert planning._utilization_spelled(given, "0.19.0") is given
    unset = ServingArgs()
    assert planning._utilization_spelled(unset, "not-a-version") is unset  # planning it says why
    assert planning._utilization_spelled(unset, None).gpu_memory_utilization is not None
