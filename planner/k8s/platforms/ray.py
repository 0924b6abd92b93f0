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
  ``PIPELINE_PARALLELISM`` in ``runtime_env.env_vars``; that form is read too. ``build_dp_openai_app``
  takes one ``llm_config`` whose ``engine_kwargs.data_parallel_size`` (an early release: ``args.dp_size``)
  is the number of Serve replicas, one engine (DP rank) each on TP x PP GPUs of the cluster
  (ray python/ray/llm/_internal/serve ``data_parallel/dp_server.py: build_dp_deployment``: num_replicas =
  data_parallel_size): the engines' GPUs are checked against the Ray cluster's, not one pod's.
  ``build_pd_openai_app`` takes ``prefill_config`` and ``decode_config``, two LLMConfigs each built into
  its own deployment (``build_pd_openai_app``: ``build_llm_deployment`` / ``build_dp_deployment`` per side):
  both engines are planned.

A Serve engine runs on the Ray worker pods: it gets the first GPU group's image, scheduling fields,
per-GPU share (HAMi / Volcano / ACK resources, an MPS limit in the env) and pod labels and annotations
(Run:ai fractions, ``kv-planner.io/gpu-memory``), so a shared or fractional worker GPU is planned as
the share it is.

serveConfigV2 is one YAML string: there is no field a JSON patch could change safely, so Ray Serve
LLM views are checked and their changes reported as warnings (``no_write``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.errors import PlannerInputError
from planner.k8s.gpus import ACK_COUNT_LABEL, ACK_MEMORY, VOLCANO_GPU_MEMORY, gpu_request
from planner.k8s.images import image_release
from planner.k8s.platforms.base import (
    GpuHint,
    PlatformNote,
    PlatformRead,
    PlatformView,
    listed,
    mapping,
    non_gpu_accelerator,
)
from planner.k8s.sharing import SHARE_ENV, SHARE_RESOURCES
from planner.k8s.workloads import PodTemplateRef, Pointer, as_list, get_path, is_mapping, is_pod_spec
from planner.untrusted import load_embedded_yaml

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
_PD_KEYS = ("prefill_config", "decode_config")  # ray.serve.llm:build_pd_openai_app (PDServingArgs)


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
        config = load_embedded_yaml(text, source="serveConfigV2")
    except PlannerInputError as error:
        return [], [PlatformNote(reason="unreadable-config", text=str(error)[:160])]
    views: list[PlatformView] = []
    notes: list[PlatformNote] = []
    worker = _worker(obj, base)
    for app_index, raw_app in enumerate(listed(mapping(config).get("applications"))):
        app = mapping(raw_app)
        app_name = str(app.get("name") or f"app-{app_index}")
        app_args = mapping(app.get("args"))
        llm_configs = app_args.get("llm_configs")
        keys: list[str] = []
        if llm_configs is None and app_args.get("llm_config") is not None:
            llm_configs = [app_args["llm_config"]]  # build_llm_deployment / build_dp_openai_app take one
        elif llm_configs is None and any(k in app_args for k in _PD_KEYS):
            keys = [k for k in _PD_KEYS if k in app_args]  # build_pd_openai_app: prefill and decode
            llm_configs = [app_args[k] for k in keys]
        if isinstance(llm_configs, list):
            dp = _int(app_args.get("dp_size"), 1)  # the first build_dp_openai_app: DP size beside llm_config
            for index, llm in enumerate(llm_configs):
                where = f"{app_name}/{keys[index]}" if keys else f"{app_name}/llm_configs/{index}"
                if not isinstance(llm, Mapping):
                    notes.append(
                        PlatformNote(
                            reason="unreadable-config",
                            where=where,
                            text=f"LLM config {_shown(llm)} is a file in the image: not read",
                        )
                    )
                    continue
                view, note = _llm_config_view(llm, where, worker, dp_size=dp)
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
            view, note = _llm_config_view(llm, app_name, worker)
            views += [view] if view else []
            notes += [note] if note else []
        elif "llm" in str(app.get("import_path", "")).lower() or "vllm" in str(app.get("import_path", "")).lower():
            notes.append(
                PlatformNote(reason="no-model", where=app_name, text="Ray Serve app names no model kv-planner reads")
            )
    return views, notes


@dataclass(frozen=True)
class _Worker:
    """What a Serve engine takes from the Ray worker pods it runs on (the first GPU group's)."""

    image: str | None = None
    pod_fields: Mapping[str, Any] = field(default_factory=dict)
    resource: str = "nvidia.com/gpu"  # the GPU resource an engine's TP x PP GPUs are counted in
    shares: Mapping[str, str] = field(default_factory=dict)  # per-GPU share resources
    env: tuple[Mapping[str, Any], ...] = ()  # share env (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)
    metadata: Mapping[str, Any] | None = None  # the worker pods' labels and annotations
    cluster_gpus: int | None = None


def _worker(obj: Mapping[str, Any], base: Pointer) -> _Worker:
    """The image, scheduling fields, GPU resource, per-GPU share and pod metadata of the first GPU
    group (where Serve replicas land), else of the first group that asks for another accelerator (a TPU
    slice: the engine runs there, and is named as not planned, KVP064), else of the first group."""
    fallback: _Worker | None = None
    accelerator: _Worker | None = None
    total = cluster_gpus(obj, base)
    for _, template, _ in group_templates(obj, base):
        spec = mapping(get_path(obj, (*template, "spec")))
        pod_fields = {k: spec[k] for k in ("nodeSelector", "affinity", "tolerations") if k in spec}
        meta = mapping(get_path(obj, (*template, "metadata")))
        metadata = {k: dict(meta[k]) for k in ("labels", "annotations") if isinstance(meta.get(k), Mapping)}
        for container in listed(spec.get("containers")):
            if not isinstance(container, Mapping):
                continue
            image = container.get("image") if isinstance(container.get("image"), str) else None
            resource, count = gpu_request(container)
            if count:
                return _Worker(
                    image=image,
                    pod_fields=pod_fields,
                    # (a share that is not a count, ACK's gpu-mem or Volcano's gpu-memory: GPUs are counted)
                    resource=resource if resource not in (None, ACK_MEMORY, VOLCANO_GPU_MEMORY) else "nvidia.com/gpu",
                    shares=_per_gpu_shares(container, mapping(metadata.get("labels"))),
                    env=tuple(
                        dict(item)
                        for item in as_list(container.get("env"))
                        if is_mapping(item) and item.get("name") in SHARE_ENV
                    ),
                    metadata=metadata or None,
                    cluster_gpus=total,
                )
            other = non_gpu_accelerator(container.get("resources"))
            if other and accelerator is None:
                # (before: an engine on a TPU worker group was planned as one NVIDIA GPU of unknown type)
                accelerator = _Worker(
                    image=image, pod_fields=pod_fields, resource=other, metadata=metadata or None, cluster_gpus=total
                )
            if fallback is None or fallback.image is None:
                fallback = _Worker(image=image, pod_fields=pod_fields, cluster_gpus=total)
    return accelerator or fallback or _Worker(cluster_gpus=total)


def _per_gpu_shares(container: Mapping[str, Any], labels: Mapping[str, Any]) -> dict[str, str]:
    """The worker container's share of each of its GPUs (limits over requests). ACK's ``gpu-mem`` is the
    pod's total over ``aliyun.com/gpu-count`` cards: divided, so an engine on several GPUs gets the
    same memory on each."""
    out: dict[str, str] = {}
    resources = mapping(container.get("resources"))
    for section in ("requests", "limits"):  # limits win
        for key, value in mapping(resources.get(section)).items():
            if key in SHARE_RESOURCES:
                out[key] = str(value)
    cards = _int(labels.get(ACK_COUNT_LABEL), 1)
    if ACK_MEMORY in out and cards > 1:
        try:
            out[ACK_MEMORY] = str(int(out[ACK_MEMORY]) // cards)
        except ValueError:
            del out[ACK_MEMORY]
    return out


def _llm_config_view(
    llm: Mapping[str, Any], where: str, worker: _Worker, *, dp_size: int = 1
) -> tuple[PlatformView | None, PlatformNote | None]:
    loading = mapping(llm.get("model_loading_config"))
    model = loading.get("model_source") or loading.get("model_id")
    accelerator = str(llm.get("accelerator_type") or "")
    if accelerator.upper().startswith(_NON_GPU_ACCELERATORS):
        return None, PlatformNote(reason="non-gpu-accelerator", where=where, text=f"accelerator_type {accelerator}")
    if not isinstance(model, str) or not model.strip():
        return None, PlatformNote(reason="no-model", where=where, text="model_loading_config names no model")
    kwargs = dict(mapping(llm.get("engine_kwargs")))
    if dp_size > 1 and "data_parallel_size" not in kwargs:
        kwargs["data_parallel_size"] = dp_size
    words = ["vllm", "serve", model.strip(), *_kwargs_words(kwargs)]
    tp = _int(kwargs.get("tensor_parallel_size"), 1)
    pp = _int(kwargs.get("pipeline_parallel_size"), 1)
    dp = _int(kwargs.get("data_parallel_size"), 1)
    container: dict[str, Any] = {
        "name": where,
        "command": words[:2],
        "args": words[2:],
        "resources": {"limits": {worker.resource: str(tp * pp), **worker.shares}},
    }
    if worker.env:
        container["env"] = [dict(item) for item in worker.env]
    if worker.image:
        container["image"] = worker.image
    hint = _RAY_ACCELERATORS.get(accelerator.upper()) if accelerator else None
    # Data parallelism: DP Serve replicas, one engine of TP x PP GPUs each, placed on the cluster's GPUs
    # (not one pod's); the engines' total is checked against the cluster (fewer: KVP003), and a cluster
    # with more GPUs than they use is not "idle" (other apps and replicas share it).
    group_gpus = None
    if dp > 1:
        needed = tp * pp * dp
        group_gpus = needed if worker.cluster_gpus is None else min(needed, worker.cluster_gpus)
    view = PlatformView(
        platform=PLATFORM,
        template=PodTemplateRef(
            name=where,
            metadata_path=("metadata",),
            spec_path=("spec", "serveConfigV2"),
            plan_not_recorded=SERVE_NOT_RECORDED,
        ),
        pod_spec={**worker.pod_fields, "containers": [container]},
        no_write=SERVE_NO_WRITE,
        engine_namespace=_bool_kwargs(kwargs),
        gpu_hint=GpuHint(name=hint, label=accelerator) if hint else None,
        stated_version=image_release(worker.image),
        pod_metadata=dict(worker.metadata) if worker.metadata is not None else None,
        group_gpus=group_gpus,
    )
    return view, None


def _kwargs_words(kwargs: Mapping[str, Any]) -> list[str]:
    """engine_kwargs (vLLM dest names) -> command-line words, so that vLLM's parser of the release in force
    checks and types them. A boolean has no word here: see :func:`_bool_kwargs`."""
    words: list[str] = []
    for key in sorted(k for k in kwargs if isinstance(k, str)):
        value = kwargs[key]
        option = "--" + key.replace("_", "-")
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, (Mapping, list)):
            words += [option, json.dumps(value, separators=(",", ":"))]
        else:
            words += [option, str(value)]
    return words


def _bool_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The boolean engine_kwargs, as the dest = value they are. Ray gives engine_kwargs to vLLM's
    ``AsyncEngineArgs(**kwargs)``, not to its parser (ray python/ray/llm/_internal/serve engines/vllm:
    ``AsyncEngineArgs(**engine_config.get_initialization_kwargs())``), so ``enable_chunked_prefill: false``
    turns chunked prefill off in every release. No word says so in every release: ``--no-enable-chunked-prefill``
    exists in 0.8.5 and 0.12+, not in 0.10.1-0.11.0, where ``--enable-chunked-prefill`` is an option that takes
    a value (so even ``true`` as a bare ``--enable-chunked-prefill`` is refused there); and the release is often
    unknown here, or planned over many. So the value is set past the parser, where the planner resolves its
    arguments (:attr:`planner.vllm.argv.VllmCommand.namespace`). Before, ``false`` was dropped as a default:
    chunked prefill planned on, and V1's larger startup activation peak without it left out."""
    return {key: value for key, value in kwargs.items() if isinstance(key, str) and isinstance(value, bool)}


def _int(value: Any, default: int) -> int:
    try:
        number = int(str(value))
    except ValueError:
        return default
    return number if number >= 1 else default


def _shown(value: Any) -> str:
    """A non-mapping LLM config for a message: a path as written (cut), anything else by its type only (its
    repr could expand YAML aliases without bound)."""
    return repr(value[:40]) if isinstance(value, str) else f"of type {type(value).__name__}"
