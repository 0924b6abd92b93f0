"""KubeRay ``RayCluster`` / ``RayService`` / ``RayJob`` (ray.io/v1) and AIBrix ``RayClusterFleet``.

Two ways vLLM runs on Ray, both read here:

* a container of the head or a worker group starts vLLM itself (``ray start ... && vllm serve ...``,
  vLLM's Ray executor spreading TP x PP over the cluster): an ordinary pod template, except that the
  GPUs vLLM may use are the cluster's (head + replicas x GPUs of each worker group);
* Ray Serve LLM (ray.serve.llm ``build_openai_app``): ``serveConfigV2`` (a YAML *string*) lists
  ``llm_configs``, each with ``model_loading_config.model_source`` (or ``model_id``), ``engine_kwargs``
  (vLLM's engine arguments by their ``dest`` names, ray python/ray/llm/_internal/serve/configs:
  ``LLMConfig.engine_kwargs``) and ``accelerator_type`` (Ray's accelerator names, ``A10G``, ``L4``,
  ``A100-80G``, ``H100``). Each replica's engine gets TP x PP GPUs. KubeRay's own vLLM sample
  (ray-operator/config/samples/vllm) instead passes ``MODEL_ID`` / ``TENSOR_PARALLELISM`` /
  ``PIPELINE_PARALLELISM`` in ``runtime_env.env_vars``; that form is read too.

serveConfigV2 is one YAML string: there is no field a JSON patch could change safely, so Ray Serve
LLM views are checked and their changes reported as warnings (``no_write``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from planner.k8s.gpus import gpu_request
from planner.k8s.images import image_release
from planner.k8s.platforms.base import (
    GpuHint,
    PlatformNote,
    PlatformRead,
    PlatformView,
    listed,
    mapping,
)
from planner.k8s.workloads import PodTemplateRef, Pointer, get_path, is_pod_spec

PLATFORM = "ray"
SERVE_NO_WRITE = "serveConfigV2 is a YAML string: set these in engine_kwargs"
# A Ray Serve LLM engine runs as actors in the Ray cluster's pods, which every engine of the cluster shares:
# no pod annotation describes this engine (KubeRay copies the RayService's annotations to the RayCluster only).
SERVE_NOT_RECORDED = "a Ray Serve LLM engine runs in the Ray cluster's shared pods, which no annotation describes"
_MAX_SERVE_CONFIG = 256 * 1024  # characters of serveConfigV2 parsed (bounded work per review)
# Ray accelerator_type names (ray.util.accelerators) -> catalog names.
_RAY_ACCELERATORS = {
    "A100-40G": "A100-40GB",
    "A100-80G": "A100-80GB",
    "H100": "H100-80GB",
    "H200": "H200-141GB",
    "A10G": "A10G",
    "L4": "L4",
    "L40S": "L40S",
    "T4": "T4",
    "V100": "V100",
    "MI300X": "MI300X",
}
_NON_GPU_ACCELERATORS = ("TPU", "AWS-NEURON", "INTEL-GAUDI")


def cluster_base(obj: Mapping[str, Any]) -> Pointer | None:
    """Where the RayClusterSpec sits in ``obj`` (None: no cluster spec)."""
    kind = obj.get("kind")
    if kind == "RayCluster":
        return ("spec",)
    if kind == "RayService":
        return ("spec", "rayClusterConfig")
    if kind == "RayJob":
        return ("spec", "rayClusterSpec")
    if kind == "RayClusterFleet":  # AIBrix: spec.template is a RayCluster template
        return ("spec", "template", "spec")
    return None


def group_templates(obj: Mapping[str, Any], base: Pointer) -> list[tuple[str, Pointer, int]]:
    """(group name, template pointer, pods) of the head and each worker group."""
    groups: list[tuple[str, Pointer, int]] = []
    head = (*base, "headGroupSpec", "template")
    if is_pod_spec(get_path(obj, (*head, "spec"))):
        groups.append(("head", head, 1))
    workers = get_path(obj, (*base, "workerGroupSpecs"))
    if isinstance(workers, list):
        for index, group in enumerate(workers):
            if not isinstance(group, Mapping):
                continue
            template = (*base, "workerGroupSpecs", str(index), "template")
            if not is_pod_spec(get_path(obj, (*template, "spec"))):
                continue
            replicas = group.get("replicas", group.get("minReplicas", 1))
            pods = replicas if isinstance(replicas, int) and replicas >= 0 else 1
            groups.append((str(group.get("groupName") or f"worker-{index}"), template, pods))
    return groups


def cluster_gpus(obj: Mapping[str, Any], base: Pointer) -> int | None:
    """GPUs across the Ray cluster (head + replicas x GPUs per pod of each worker group)."""
    total = 0
    for _, template, pods in group_templates(obj, base):
        for container in listed(get_path(obj, (*template, "spec", "containers"))):
            if isinstance(container, Mapping):
                _, count = gpu_request(container)
                total += (count or 0) * pods
    return total or None


def read(obj: Mapping[str, Any]) -> PlatformRead | None:
    base = cluster_base(obj)
    if base is None:
        return None
    views: list[PlatformView] = []
    notes: list[PlatformNote] = []
    total = cluster_gpus(obj, base)
    for name, template, _ in group_templates(obj, base):
        views.append(
            PlatformView(
                platform=PLATFORM,
                template=PodTemplateRef(
                    name=name, metadata_path=(*template, "metadata"), spec_path=(*template, "spec")
                ),
                group_gpus=total,
                # KubeRay runs `ray start` in a container that has no command of its own
                # (ray-operator/controllers/ray/common/pod.go: BuildPod / generateRayStartCommand).
                image_entrypoint=False,
            )
        )
    if obj.get("kind") == "RayService":
        serve_views, serve_notes = _serve_views(obj, base)
        views += serve_views
        notes += serve_notes
    return PlatformRead(platform=PLATFORM, views=views, notes=notes)


def _serve_views(obj: Mapping[str, Any], base: Pointer) -> tuple[list[PlatformView], list[PlatformNote]]:
    text = get_path(obj, ("spec", "serveConfigV2"))
    if not isinstance(text, str) or not text.strip():
        return [], []
    if len(text) > _MAX_SERVE_CONFIG:
        return [], [PlatformNote(reason="unreadable-config", text="serveConfigV2 too large to read")]
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return [], [PlatformNote(reason="unreadable-config", text="serveConfigV2 is not valid YAML")]
    views: list[PlatformView] = []
    notes: list[PlatformNote] = []
    image, pod_fields = _worker_image(obj, base)
    for app_index, raw_app in enumerate(listed(mapping(config).get("applications"))):
        app = mapping(raw_app)
        app_name = str(app.get("name") or f"app-{app_index}")
        app_args = mapping(app.get("args"))
        llm_configs = app_args.get("llm_configs")
        if llm_configs is None and isinstance(app_args.get("llm_config"), Mapping):
            llm_configs = [app_args["llm_config"]]  # ray.serve.llm:build_llm_deployment takes one
        if isinstance(llm_configs, list):
            for index, llm in enumerate(llm_configs):
                where = f"{app_name}/llm_configs/{index}"
                if not isinstance(llm, Mapping):
                    notes.append(
                        PlatformNote(
                            reason="unreadable-config",
                            where=where,
                            text=f"llm_configs entry {str(llm)[:40]!r} is a file in the image: not read",
                        )
                    )
                    continue
                view, note = _llm_config_view(llm, where, image, pod_fields)
                views += [view] if view else []
                notes += [note] if note else []
            continue
        env = mapping(mapping(app.get("runtime_env")).get("env_vars"))
        if isinstance(env.get("MODEL_ID"), str):
            kwargs = {
                "tensor_parallel_size": env.get("TENSOR_PARALLELISM", 1),
                "pipeline_parallel_size": env.get("PIPELINE_PARALLELISM", 1),
            }
            llm = {"model_loading_config": {"model_source": env["MODEL_ID"]}, "engine_kwargs": kwargs}
            view, note = _llm_config_view(llm, app_name, image, pod_fields)
            views += [view] if view else []
            notes += [note] if note else []
        elif "llm" in str(app.get("import_path", "")).lower() or "vllm" in str(app.get("import_path", "")).lower():
            notes.append(
                PlatformNote(reason="no-model", where=app_name, text="Ray Serve app names no model kv-planner reads")
            )
    return views, notes


def _worker_image(obj: Mapping[str, Any], base: Pointer) -> tuple[str | None, dict[str, Any]]:
    """The image and scheduling fields of the first GPU group (where Serve replicas land)."""
    fallback: tuple[str | None, dict[str, Any]] = (None, {})
    for _, template, _ in group_templates(obj, base):
        spec = mapping(get_path(obj, (*template, "spec")))
        pod_fields = {k: spec[k] for k in ("nodeSelector", "affinity", "tolerations") if k in spec}
        for container in listed(spec.get("containers")):
            if not isinstance(container, Mapping):
                continue
            image = container.get("image") if isinstance(container.get("image"), str) else None
            if gpu_request(container)[1]:
                return image, pod_fields
            if fallback[0] is None:
                fallback = (image, pod_fields)
    return fallback


def _llm_config_view(
    llm: Mapping[str, Any], where: str, image: str | None, pod_fields: Mapping[str, Any]
) -> tuple[PlatformView | None, PlatformNote | None]:
    loading = mapping(llm.get("model_loading_config"))
    model = loading.get("model_source") or loading.get("model_id")
    accelerator = str(llm.get("accelerator_type") or "")
    if accelerator.upper().startswith(_NON_GPU_ACCELERATORS):
        return None, PlatformNote(reason="non-gpu-accelerator", where=where, text=f"accelerator_type {accelerator}")
    if not isinstance(model, str) or not model.strip():
        return None, PlatformNote(reason="no-model", where=where, text="model_loading_config names no model")
    kwargs = mapping(llm.get("engine_kwargs"))
    words = ["vllm", "serve", model.strip(), *_kwargs_words(kwargs)]
    tp = _int(kwargs.get("tensor_parallel_size"), 1)
    pp = _int(kwargs.get("pipeline_parallel_size"), 1)
    container: dict[str, Any] = {
        "name": where,
        "command": words[:2],
        "args": words[2:],
        "resources": {"limits": {"nvidia.com/gpu": str(tp * pp)}},
    }
    if image:
        container["image"] = image
    hint = _RAY_ACCELERATORS.get(accelerator.upper()) if accelerator else None
    view = PlatformView(
        platform=PLATFORM,
        template=PodTemplateRef(
            name=where,
            metadata_path=("metadata",),
            spec_path=("spec", "serveConfigV2"),
            plan_not_recorded=SERVE_NOT_RECORDED,
        ),
        pod_spec={**pod_fields, "containers": [container]},
        no_write=SERVE_NO_WRITE,
        gpu_hint=GpuHint(name=hint, label=accelerator) if hint else None,
        stated_version=image_release(image),
    )
    return view, None


def _kwargs_words(kwargs: Mapping[str, Any]) -> list[str]:
    """engine_kwargs (vLLM dest names) -> command-line words, as vLLM's own ``--config`` does."""
    words: list[str] = []
    for key in sorted(k for k in kwargs if isinstance(k, str)):
        value = kwargs[key]
        option = "--" + key.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            if value:  # False is the default of the store_true flags a release without --no-x has
                words.append(option)
        elif isinstance(value, (Mapping, list)):
            words += [option, json.dumps(value, separators=(",", ":"))]
        else:
            words += [option, str(value)]
    return words


def _int(value: Any, default: int) -> int:
    try:
        number = int(str(value))
    except ValueError:
        return default
    return number if number >= 1 else default
