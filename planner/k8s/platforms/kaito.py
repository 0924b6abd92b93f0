"""KAITO ``Workspace`` and ``InferenceSet`` (kaito.sh/v1alpha1, v1beta1): vLLM is KAITO's default runtime.

A Workspace keeps ``resource`` and ``inference`` at the top level of the object (kaito-project/kaito
``api/v1beta1/workspace_types.go``: no ``spec``); an InferenceSet keeps the same pair under
``spec.template`` and makes ``spec.replicas`` Workspaces of it (``api/v1beta1/inferenceset_types.go``).
``inference`` is one of two things:

* ``inference.template``: a PodTemplateSpec the user wrote (custom models, a ``vllm serve`` of their own).
  KAITO runs it as it is, in a StatefulSet (``pkg/workspace/manifests/manifests.go:
  GenerateManifestWithPodTemplate``), with the pod's node affinity replaced by ``resource.labelSelector``'s
  ``matchLabels`` and the pod pinned to the nodes provisioned for ``resource.instanceType``. kv-planner
  reads the template the same way (the GPU type from the instance type or those labels) and writes
  changes into the containers' own ``args``.
* ``inference.preset``: KAITO builds the whole vLLM command line itself from its preset catalogue, the
  ``inference.config`` ConfigMap and ``resource.partition`` (``pkg/workspace/inference/
  preset_inferences.go``: ``--max-model-len=auto`` unless the ConfigMap sets one). None of that is in the
  resource, so it is named (KVP063) instead of planned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.k8s.gpus import INSTANCE_TYPE_LABELS
from planner.k8s.platforms.base import (
    ArgsTarget,
    PlatformNote,
    PlatformRead,
    PlatformView,
    listed,
    mapping,
    own_args_target,
)
from planner.k8s.workloads import PodTemplateRef, is_pod_spec

PLATFORM = "kaito"
KINDS = ("Workspace", "InferenceSet")


def read(obj: Mapping[str, Any]) -> PlatformRead:
    if obj.get("kind") == "InferenceSet":
        base: tuple[str, ...] = ("spec", "template")
        holder = mapping(mapping(obj.get("spec")).get("template"))
    else:
        base, holder = (), obj
    inference = mapping(holder.get("inference"))
    resource = mapping(holder.get("resource"))
    template = mapping(inference.get("template"))
    if is_pod_spec(template.get("spec")):
        return PlatformRead(platform=PLATFORM, views=[_template_view(base, mapping(template.get("spec")), resource)])
    preset = mapping(inference.get("preset"))
    name = preset.get("name")
    if isinstance(name, str) and name.strip():
        config = inference.get("config")
        settings = f" and the ConfigMap {config[:63]}" if isinstance(config, str) and config else ""
        text = (
            f"KAITO preset {name[:63]}: KAITO builds the vLLM command line from its preset catalogue{settings} "
            "and sizes the context itself; kv-planner does not read presets: not checked"
        )
        return PlatformRead(platform=PLATFORM, notes=[PlatformNote(reason="unsupported-kind", text=text)])
    if inference:
        text = "KAITO inference without a pod template or a preset kv-planner can read: not checked"
        return PlatformRead(platform=PLATFORM, notes=[PlatformNote(reason="unsupported-kind", text=text)])
    return PlatformRead(platform=PLATFORM)  # a tuning Workspace, or nothing to serve


def _template_view(base: tuple[str, ...], pod: Mapping[str, Any], resource: Mapping[str, Any]) -> PlatformView:
    """The StatefulSet's pod as KAITO makes it from ``inference.template``."""
    at = (*base, "inference", "template")
    pod_spec = dict(pod)
    labels = {
        str(k): str(v)
        for k, v in mapping(mapping(resource.get("labelSelector")).get("matchLabels")).items()
        if isinstance(v, (str, int, float)) and not isinstance(v, bool)
    }
    if labels:  # KAITO overwrites the template's affinity with these (and drops it when there are none)
        terms = [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(labels.items())]
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": terms}]}
            }
        }
    else:
        pod_spec.pop("affinity", None)
    instance = resource.get("instanceType")
    if isinstance(instance, str) and instance.strip():  # the nodes KAITO provisions for the workspace
        pod_spec["nodeSelector"] = {**mapping(pod_spec.get("nodeSelector")), INSTANCE_TYPE_LABELS[0]: instance}
    targets: dict[int, ArgsTarget] = {}
    for index, container in enumerate(listed(pod_spec.get("containers"))):
        if isinstance(container, Mapping):
            target = own_args_target(container, (*at, "spec", "containers", str(index), "args"))
            if target is not None:
                targets[index] = target
    return PlatformView(
        platform=PLATFORM,
        template=PodTemplateRef(name="inference", metadata_path=(*at, "metadata"), spec_path=(*at, "spec")),
        pod_spec=pod_spec,
        targets=targets,
        no_write="the container's command is a shell string",
    )
