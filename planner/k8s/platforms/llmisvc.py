"""KServe ``LLMInferenceService`` (serving.kserve.io/v1alpha1, v1alpha2).

kserve/kserve pkg/controller/v1alpha1/llmisvc (config_merge.go) builds each workload from the
``LLMInferenceServiceConfig`` presets (config/llmisvc/config-llm-template.yaml: container ``main``
running ``vllm serve <model> --served-model-name <model> --port 8000``; the ``-prefill-``, ``-decode-``
and ``-worker-`` presets for disaggregated and multi-node serving) merged with the resource's own
``spec.template`` (a PodSpec, strategic merge by container name) and ``spec.worker``. The model is
``spec.model.uri`` (``hf://org/name``) or ``spec.model.name``; ``spec.parallelism`` sets tensor /
pipeline / data parallelism; ``spec.prefill`` is a second role with its own template, worker and
parallelism. Extra vLLM flags are given in the container's ``VLLM_ADDITIONAL_ARGS`` environment
variable, which the preset's command appends.

Writing ``args`` into ``spec.template`` would *replace* the preset's args (a strategic merge replaces
lists without a merge key), and ``VLLM_ADDITIONAL_ARGS`` is a shell string: no field can be changed
safely, so changes are reported as warnings.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from planner.k8s.images import image_release
from planner.k8s.platforms.base import (
    PlatformNote,
    PlatformRead,
    PlatformView,
    listed,
    mapping,
    model_from_uri,
    non_gpu_accelerator,
)
from planner.k8s.workloads import PodTemplateRef

PLATFORM = "kserve-llmisvc"
NO_WRITE = "LLMInferenceService args replace the preset's: add them to VLLM_ADDITIONAL_ARGS"
ADDITIONAL_ARGS = "VLLM_ADDITIONAL_ARGS"


def read(obj: Mapping[str, Any]) -> PlatformRead:
    if obj.get("kind") == "LLMInferenceServiceConfig":
        note = PlatformNote(reason="template-only", text="a preset: checked with each LLMInferenceService using it")
        return PlatformRead(platform=PLATFORM, notes=[note])
    spec = mapping(obj.get("spec"))
    model_spec = mapping(spec.get("model"))
    model = model_from_uri(model_spec.get("uri")) if _is_hf(model_spec.get("uri")) else None
    model = model or (model_spec.get("name") if isinstance(model_spec.get("name"), str) else None)
    if not model:
        return PlatformRead(
            platform=PLATFORM, notes=[PlatformNote(reason="no-model", text="spec.model names no model")]
        )
    views: list[PlatformView] = []
    notes: list[PlatformNote] = []
    roles: list[tuple[str, tuple[str, ...], Mapping[str, Any]]] = [("main", ("spec",), spec)]
    if isinstance(spec.get("prefill"), Mapping):
        roles.append(("prefill", ("spec", "prefill"), spec["prefill"]))
    for role, base, role_spec in roles:
        template = mapping(role_spec.get("template"))
        containers = [c for c in listed(template.get("containers")) if isinstance(c, Mapping)]
        main = next((c for c in containers if c.get("name") == "main"), {})
        accelerator = non_gpu_accelerator(main.get("resources"))
        if accelerator:
            notes.append(PlatformNote(reason="non-gpu-accelerator", where=role, text=f"{accelerator}: not planned"))
            continue
        parallelism = mapping(role_spec.get("parallelism") or spec.get("parallelism"))
        words = ["vllm", "serve", model, "--served-model-name", str(model_spec.get("name") or model)]
        words += _parallel_words(parallelism)
        env = [dict(e) for e in listed(main.get("env")) if isinstance(e, Mapping)]
        extra = next((e for e in env if e.get("name") == ADDITIONAL_ARGS), None)
        if extra is not None and isinstance(extra.get("value"), str):
            try:
                words += shlex.split(extra["value"])
            except ValueError:
                notes.append(PlatformNote(reason="unreadable-config", where=role, text=f"{ADDITIONAL_ARGS} unreadable"))
        container: dict[str, Any] = {
            "name": "main" if role == "main" else f"{role}/main",
            "command": words[:2],
            "args": words[2:],
            "env": [e for e in env if e.get("name") != ADDITIONAL_ARGS],
        }
        image = main.get("image") if isinstance(main.get("image"), str) else None
        if image:
            container["image"] = image
        if isinstance(main.get("resources"), Mapping):
            container["resources"] = dict(main["resources"])
        pod_spec = {k: v for k, v in template.items() if k != "containers"}
        pod_spec["containers"] = [container]
        worker = isinstance(role_spec.get("worker"), Mapping)
        group_gpus = _parallel_total(parallelism) if worker else None
        views.append(
            PlatformView(
                platform=PLATFORM,
                template=PodTemplateRef(name=role, metadata_path=("metadata",), spec_path=(*base, "template")),
                pod_spec=pod_spec,
                no_write=NO_WRITE,
                group_gpus=group_gpus,
                stated_version=image_release(image),
            )
        )
    return PlatformRead(platform=PLATFORM, views=views, notes=notes)


def _is_hf(uri: Any) -> bool:
    return isinstance(uri, str) and uri.lower().startswith("hf://")


def _parallel_words(parallelism: Mapping[str, Any]) -> list[str]:
    words: list[str] = []
    for key, option in (
        ("tensor", "--tensor-parallel-size"),
        ("pipeline", "--pipeline-parallel-size"),
        ("data", "--data-parallel-size"),
    ):
        value = parallelism.get(key)
        if isinstance(value, int) and value >= 1:
            words += [option, str(value)]
    return words


def _parallel_total(parallelism: Mapping[str, Any]) -> int | None:
    total = 1
    for key in ("tensor", "pipeline", "data"):
        value = parallelism.get(key)
        if isinstance(value, int) and value >= 1:
            total *= value
    return total if total > 1 else None
