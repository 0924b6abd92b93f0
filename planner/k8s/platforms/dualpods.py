"""llm-d fast model actuation's dual pods (llm-d-incubation/llm-d-fast-model-actuation ``pkg/api``).

A *server-requesting* pod (a ReplicaSet's, as llm-d-modelservice renders ``decode.requester``) is a stub:
its container ``inference-server`` holds the GPUs and answers which ones. The dual-pods controller builds
the *server-providing* pod that runs vLLM from it: all annotations removed, then the strategic merge patch
in the annotation ``dual-pods.llm-d.ai/server-patch`` (``dual-pod.llm-d.ai/server-patch`` in earlier
releases) applied, its ``spec.containers`` merged by name. kv-planner reads the pod the patch makes,
so the vLLM server it runs is planned, not the stub (before: "no vLLM container", KVP060).

The patch is a YAML string in an annotation: nothing a JSON patch could change safely (changes are listed,
KVP034), and the server-providing pod keeps none of the requester's annotations (no plan recorded, KVP079).
A patch with Go template actions (``{{ .NodeName }}``), or an ``inference-server-config`` (launcher-based)
request, is not read (KVP067): the server is not checked until its pod is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.errors import PlannerInputError
from planner.k8s.platforms.base import PlatformNote, PlatformView, mapping
from planner.k8s.platforms.llmisvc import merge
from planner.k8s.workloads import get_path
from planner.untrusted import load_embedded_yaml

PATCH_KEYS = ("dual-pods.llm-d.ai/server-patch", "dual-pod.llm-d.ai/server-patch")
CONFIG_KEY = "dual-pods.llm-d.ai/inference-server-config"
NO_WRITE = "the vLLM server is defined in the dual-pods server-patch annotation (a YAML string): set these there"
NOT_RECORDED = "the dual-pods controller removes the requester's annotations from the server-providing pod"


def server_view(obj: Mapping[str, Any], view: PlatformView) -> tuple[PlatformView, list[PlatformNote]]:
    """``view`` as the server-providing pod its dual-pods annotation builds (``view`` itself without one)."""
    annotations = mapping(mapping(get_path(obj, view.template.metadata_path)).get("annotations"))
    key = next((k for k in PATCH_KEYS if isinstance(annotations.get(k), str)), None)
    where = view.template.name
    if key is None:
        if isinstance(annotations.get(CONFIG_KEY), str):
            text = f"llm-d dual-pods: the server comes from InferenceServerConfig {annotations[CONFIG_KEY][:63]!r}"
            return view, [PlatformNote(reason="unreadable-config", where=where, text=f"{text}: not checked")]
        return view, []
    text = annotations[key]
    if "{{" in text:
        why = f"llm-d dual-pods {key} has Go template actions, not evaluated here: the server is not checked"
        return view, [PlatformNote(reason="unreadable-config", where=where, text=why)]
    try:
        patch = load_embedded_yaml(text, source=key)
    except PlannerInputError as error:
        return view, [PlatformNote(reason="unreadable-config", where=where, text=str(error)[:160])]
    spec_patch = mapping(mapping(patch).get("spec"))
    base = get_path(obj, view.template.spec_path)
    if not spec_patch or not isinstance(base, Mapping):
        return view, []
    template = view.template.model_copy(update={"plan_not_recorded": NOT_RECORDED})
    server = view.model_copy(update={"pod_spec": merge(base, spec_patch), "no_write": NO_WRITE, "template": template})
    return server, []
