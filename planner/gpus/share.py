"""One pod's share of a shared GPU: the memory it can count on and whether co-tenants are isolated.

Pure data, read from manifests by :mod:`planner.k8s.sharing` (see its table of mechanisms) or given on
the command line (``planner recommend --gpu-share``); :mod:`planner.plan.shared` plans with it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Mechanism = Literal["time-slicing", "mps", "hami", "fraction", "declared"]
GiB = 1 << 30


class GpuShare(BaseModel):
    """What one pod gets of a shared card (memory per GPU of the pod)."""

    model_config = ConfigDict(frozen=True)

    mechanism: Mechanism
    source: str = Field(description="where kv-planner read it, e.g. 'nvidia.com/gpu.replicas=4 (node-selector)'")
    card_bytes: int = Field(description="memory of the card (or MIG slice) being shared")
    visible_bytes: int = Field(description="the total vLLM sees (cudaMemGetInfo inside the container)")
    budget_bytes: int | None = Field(description="memory this pod can count on; None when not known")
    isolated: bool = Field(description="co-tenants cannot take this pod's memory (an enforced limit)")
    replicas: int | None = Field(default=None, description="pods sharing one card, when known")
    placement: str | None = Field(
        default=None, description="the physical card when known: 'claim:ns/name' or 'node:name' (one GPU)"
    )

    def describe(self) -> str:
        budget = f"{self.budget_bytes / GiB:.1f} GiB" if self.budget_bytes is not None else "unknown"
        isolation = "isolated" if self.isolated else "not isolated"
        return f"{self.mechanism} ({self.source}): {budget} of {self.card_bytes / GiB:.1f} GiB, {isolation}"
