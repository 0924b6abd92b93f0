"""A plan with a workload profile: the admission path leaves out the average request's risk, nothing else.

That risk is one more convolution chain (about an eighth of a profiled review's CPU) and only the
recommendation's notes print it; decisions never show plan notes.
"""

from __future__ import annotations

import pytest

from planner.gpus.catalog import lookup_gpu
from planner.models.catalog import lookup_model
from planner.plan import make_plan
from planner.plan.models import Plan
from planner.policy.planning import CoreBackend
from planner.vllm.args import ServingArgs
from planner.workload import parse_workload

CHAT = parse_workload(
    {"prompt_tokens": {"p50": 800, "p90": 3000, "p99": 12000}, "output_tokens": {"p50": 200, "p90": 800, "p99": 2000}}
)


@pytest.fixture(scope="module")
def plans() -> tuple[Plan, Plan, Plan]:
    spec, gpu = lookup_model("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("L4")
    args = ServingArgs(max_model_len=16_384)
    full = make_plan(spec, gpu, args, vllm_version="0.19.0", workload=CHAT)
    lean = make_plan(spec, gpu, args, vllm_version="0.19.0", workload=CHAT, average_risk=False)
    served = CoreBackend().plan(spec, gpu, args, vllm_version="0.19.0", headroom=0.1, workload=CHAT)
    return full, lean, served


def test_only_the_average_risk_clause_is_left_out(plans: tuple[Plan, Plan, Plan]) -> None:
    full, lean, _ = plans
    assert full.recommendation is not None and lean.recommendation is not None
    full_notes, lean_notes = full.recommendation.notes, lean.recommendation.notes
    assert full_notes[:2] == lean_notes[:2]
    assert ", P(overflow) = " in full_notes[2] and "P(overflow)" not in lean_notes[2]
    assert full_notes[2].startswith(lean_notes[2] + ", P(overflow) = ")
    without_notes = {"recommendation": {"notes"}}
    assert full.model_dump(exclude=without_notes) == lean.model_dump(exclude=without_notes)
    assert full.recommendation.basis == "workload"


def test_the_decisions_backend_plans_the_lean_way(plans: tuple[Plan, Plan, Plan]) -> None:
    _, lean, served = plans
    assert served.model_dump() == lean.model_dump()
