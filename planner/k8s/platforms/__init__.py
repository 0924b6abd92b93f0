"""Serving platforms' own resources, each read by its own module the way its controller reads it.

:func:`read_platform` dispatches on API group and kind; None means "not a platform resource kv-planner
knows": the object is then searched for pod templates like any other. Resources of LLM-serving
platforms kv-planner has no reader for are named (``unsupported-kind``) instead of skipped silently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from planner.k8s.platforms import aibrix, dynamo, kaito, kserve, kubeai, llmisvc, ray
from planner.k8s.platforms.base import PlatformNote, PlatformRead
from planner.k8s.platforms.kserve import Runtimes

# LLM-serving resources without a reader: (API group, kind) -> what they are.
UNSUPPORTED: dict[tuple[str, str], str] = {
    ("production-stack.vllm.ai", "VLLMRuntime"): "vLLM production-stack VLLMRuntime",
    ("llmaz.io", "OpenModel"): "llmaz OpenModel",
    ("inference.llmaz.io", "Playground"): "llmaz Playground",
    ("inference.llmaz.io", "Service"): "llmaz Service",
    ("ome.io", "InferenceService"): "OME InferenceService",
    ("ome.io", "ClusterServingRuntime"): "OME ClusterServingRuntime",
    ("apps.nvidia.com", "NIMService"): "NVIDIA NIMService",
    ("nvidia.com", "DynamoComponentDeployment"): "Dynamo DynamoComponentDeployment",
    ("arks.ai", "ArksApplication"): "Arks ArksApplication",
    ("kaito.sh", "MultiRoleInference"): "KAITO MultiRoleInference (built from a preset model)",
}
_SNIFF_LIMIT = 64 * 1024  # characters of a custom resource's spec searched for "vllm"
_NOT_CONTENT = frozenset(("apiVersion", "kind", "metadata", "status"))


def group_of(obj: Mapping[str, Any]) -> str:
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or "/" not in api_version:
        return ""
    return api_version.split("/", 1)[0]


def read_platform(
    obj: Mapping[str, Any],
    *,
    runtimes: Runtimes | None = None,
    configmaps: Mapping[Any, Mapping[str, str]] | None = None,
    presets: llmisvc.Presets | None = None,
) -> PlatformRead | None:
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return None
    group = group_of(obj)
    if group == "kubeai.org" and kind == "Model":
        return kubeai.read(obj, kubeai.config_from_configmaps(configmaps))
    if group == "serving.kserve.io" and kind in ("ServingRuntime", "ClusterServingRuntime"):
        return PlatformRead(
            platform="kserve",
            notes=[
                PlatformNote(
                    reason="template-only",
                    text=f"a {kind}: planner check reads its command line with each InferenceService of the same "
                    "input that uses it; the webhook reads no runtimes (it assumes KServe's built-in ones)",
                )
            ],
        )
    if group == "serving.kserve.io" and kind == "InferenceService":
        return kserve.read(obj, runtimes)
    if group == "serving.kserve.io" and kind in ("LLMInferenceService", "LLMInferenceServiceConfig"):
        return llmisvc.read(obj, presets)
    if group == "ray.io" and kind in ("RayCluster", "RayService", "RayJob"):
        return ray.read(obj)
    if group == "orchestration.aibrix.ai" and kind == "RayClusterFleet":
        return ray.read(obj)
    if group == "orchestration.aibrix.ai" and kind in ("StormService", "RoleSet"):
        return aibrix.read(obj)
    if group == "nvidia.com" and kind == "DynamoGraphDeployment":
        return dynamo.read(obj)
    if group == "kaito.sh" and kind in kaito.KINDS:
        return kaito.read(obj)
    what = UNSUPPORTED.get((group, kind))
    if what is not None:
        return PlatformRead(
            platform=group,
            notes=[PlatformNote(reason="unsupported-kind", text=f"{what} is not read by kv-planner: not checked")],
        )
    return None


def mentions_vllm(obj: Mapping[str, Any]) -> bool:
    """True when a custom resource mentions vLLM (bounded): an LLM server kv-planner cannot read.

    Its ``spec``, or, for kinds that keep their fields at the top level (KAITO's Workspace keeps
    ``inference`` and ``resource`` there), everything but ``apiVersion``, ``kind``, ``metadata`` and
    ``status``: the first 64 KiB of it, serialized."""
    spec = obj.get("spec")
    if spec is None:
        spec = {k: v for k, v in obj.items() if k not in _NOT_CONTENT}
    if not isinstance(spec, Mapping):
        return False
    try:
        text = json.dumps(spec, default=str)[:_SNIFF_LIMIT]
    except (TypeError, ValueError):
        return False
    return "vllm" in text.lower()
