"""AIBrix ``StormService`` (orchestration.aibrix.ai/v1alpha1): roles of pods, each a PodTemplateSpec.

vllm-project/aibrix api/orchestration/v1alpha1 (StormService: ``spec.template.spec.roles[]`` with
``name``, ``replicas``, ``podGroupSize`` and ``template``). Prefill/decode disaggregation is one role
per stage; every role's containers are read like a Deployment's and changed in place. AIBrix's
``RayClusterFleet`` embeds a RayCluster template and is read by :mod:`planner.k8s.platforms.ray`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.k8s.platforms.base import PlatformRead, PlatformView
from planner.k8s.workloads import PodTemplateRef, get_path, is_pod_spec

PLATFORM = "aibrix"


def read(obj: Mapping[str, Any]) -> PlatformRead:
    """StormService: ``spec.template.spec.roles``; RoleSet (what a StormService creates, also usable
    alone): ``spec.roles``."""
    base: tuple[str, ...] = ("spec", "roles") if obj.get("kind") == "RoleSet" else ("spec", "template", "spec", "roles")
    roles = get_path(obj, base)
    views: list[PlatformView] = []
    if isinstance(roles, list):
        for index, role in enumerate(roles):
            if not isinstance(role, Mapping):
                continue
            template = (*base, str(index), "template")
            if not is_pod_spec(get_path(obj, (*template, "spec"))):
                continue
            size = role.get("podGroupSize")
            group = size if isinstance(size, int) and size > 1 else 1
            views.append(
                PlatformView(
                    platform=PLATFORM,
                    template=PodTemplateRef(
                        name=str(role.get("name") or f"role-{index}"),
                        metadata_path=(*template, "metadata"),
                        spec_path=(*template, "spec"),
                        group_size=group,
                    ),
                )
            )
    return PlatformRead(platform=PLATFORM, views=views)
