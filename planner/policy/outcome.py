"""The result of evaluating one vLLM container, before patches are built."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planner.plan.models import Plan
from planner.policy.codes import Finding


class ContainerOutcome(BaseModel):
    """What kv-planner decided for one vLLM container (before patches are built)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    findings: list[Finding] = Field(default_factory=list)
    changes: dict[str, str] = Field(default_factory=dict, description="dest -> new value (argv edits)")
    args: dict[str, Any] = Field(default_factory=dict, description="sizing flags as written (typed)")
    effective_args: dict[str, Any] = Field(default_factory=dict)
    plan: Plan | None = None
    model_id: str | None = None
