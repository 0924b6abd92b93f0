"""KubeAI ``Model`` (kubeai.org/v1), read the way KubeAI's model controller builds the vLLM pod.

kubeai-project/kubeai internal/modelcontroller/engine_vllm.go (vLLMPodForModel) runs
``python3 -m vllm.entrypoints.openai.api_server --model=<ref> --served-model-name=<name>
[--load-format=runai_streamer] <spec.args...> [--enable-lora]``, where ``<ref>`` is the repository of
``hf://org/name``, the URL itself for ``s3://``, ``/model`` for ``pvc://`` and the cache directory with a
cacheProfile. model_config.go (parseResourceProfile, getModelConfig) reads ``resourceProfile`` as
``<profile>:<count>`` (one pod, the profile's resources times count) or ``<profile>:<tp>:<pp>`` (a
LeaderWorkerSet of ``pp`` pods with ``tp`` GPUs each; lws_plan.go appends
``--tensor-parallel-size=<tp> --pipeline-parallel-size=<pp> --distributed-executor-backend=ray`` after
the user's args). The image is ``spec.image``, else the cluster's ``modelServers.VLLM.images`` entry
for the profile's ``imageName``: not in the Model, so the release is unknown unless ``spec.image`` or
the ``kv-planner.io/vllm-version`` annotation says.

Changes are appended to ``spec.args`` (after KubeAI's own flags, so vLLM's last-wins parsing applies).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from planner.k8s.gpus import VOLCANO_VGPU_NUMBER
from planner.k8s.platforms.base import (
    ArgsTarget,
    GpuHint,
    PlatformNote,
    PlatformRead,
    PlatformView,
    mapping,
    model_from_uri,
    strings,
)
from planner.k8s.quantity import parse_quantity
from planner.k8s.sharing import SHARE_RESOURCES
from planner.k8s.workloads import PodTemplateRef

PLATFORM = "kubeai"
# model_controller.go annotationsForModel copies only its pod-ip/port keys; the Model has no pod metadata field.
NOT_RECORDED = "KubeAI copies no annotation from the Model to its pods"

# KubeAI's default resource profiles (charts/kubeai/values.yaml, resourceProfiles): profile ->
# (GPU name for the catalog, GPU resource). The cluster may define others; a profile not listed here
# gives no GPU type (set kv-planner.io/gpu on the Model).
DEFAULT_PROFILES: dict[str, tuple[str | None, str | None]] = {
    "nvidia-gpu-t4": ("T4", "nvidia.com/gpu"),
    "nvidia-gpu-l4": ("L4", "nvidia.com/gpu"),
    "nvidia-gpu-l40s": ("L40S", "nvidia.com/gpu"),
    "nvidia-gpu-h100": ("H100-80GB", "nvidia.com/gpu"),
    "nvidia-gpu-gh200": ("GH200", "nvidia.com/gpu"),
    "nvidia-gpu-a100-80gb": ("A100-80GB", "nvidia.com/gpu"),
    "nvidia-gpu-a100-40gb": ("A100-40GB", "nvidia.com/gpu"),
    "nvidia-gpu-a16": ("A16", "nvidia.com/gpu"),
    "nvidia-gpu-rtx4070-8gb": ("RTX-4070", "nvidia.com/gpu"),
    "amd-gpu-mi300x": ("MI300X", "amd.com/gpu"),
    "cpu": (None, None),
}
# Shared-GPU resources a profile may hold, scaled with the count (HAMi, Volcano vGPU, ACK).
_SHARED = (*SHARE_RESOURCES, VOLCANO_VGPU_NUMBER)
_NON_GPU_PROFILE_PREFIXES = ("cpu", "google-tpu", "tpu", "aws-neuron", "intel-gaudi")


class KubeAIConfig(BaseModel):
    """The cluster's KubeAI system config (the ``system.yaml`` of the ``<release>-config`` ConfigMap,
    charts/kubeai/templates/configmap.yaml): its resource profiles and vLLM images."""

    model_config = ConfigDict(frozen=True)

    profiles: dict[str, dict[str, Any]]
    vllm_images: dict[str, str]


_MAX_CONFIG = 256 * 1024  # characters of a system.yaml parsed


def config_from_configmaps(configmaps: Mapping[Any, Mapping[str, str]] | None) -> KubeAIConfig | None:
    """KubeAI's system config from the ConfigMaps of the input, when one holds it."""
    for data in (configmaps or {}).values():
        text = data.get("system.yaml")
        if not isinstance(text, str) or "resourceProfiles" not in text or len(text) > _MAX_CONFIG:
            continue
        try:
            parsed = mapping(yaml.safe_load(text))
        except yaml.YAMLError:
            continue
        profiles = {
            str(k): dict(v) for k, v in mapping(parsed.get("resourceProfiles")).items() if isinstance(v, Mapping)
        }
        images = mapping(mapping(mapping(parsed.get("modelServers")).get("VLLM")).get("images"))
        if profiles:
            return KubeAIConfig(
                profiles=profiles, vllm_images={str(k): v for k, v in images.items() if isinstance(v, str)}
            )
    return None


def read(obj: Mapping[str, Any], config: KubeAIConfig | None = None) -> PlatformRead:
    """``config``: the cluster's KubeAI config when known (``planner check`` with the ConfigMap in its
    input); else KubeAI's default profiles name the GPU."""
    spec = mapping(obj.get("spec"))
    name = mapping(obj.get("metadata")).get("name")
    engine = spec.get("engine")
    if engine != "VLLM":
        reason = "not-vllm" if isinstance(engine, str) else "no-model"
        text = f"engine {engine!r} is not vLLM" if isinstance(engine, str) else "spec.engine is missing"
        return PlatformRead(platform=PLATFORM, notes=[PlatformNote(reason=reason, text=text)])

    profile_text = spec.get("resourceProfile")
    profile, count, parallel = _profile(profile_text)
    if profile is not None and profile.startswith(_NON_GPU_PROFILE_PREFIXES):
        return PlatformRead(
            platform=PLATFORM,
            notes=[
                PlatformNote(
                    reason="non-gpu-accelerator",
                    where=str(name) if name else None,
                    text=f"resourceProfile {profile_text}: not a GPU, not planned",
                )
            ],
        )

    url = spec.get("url")
    model = _vllm_model(url)
    if model is None:
        return PlatformRead(
            platform=PLATFORM,
            notes=[PlatformNote(reason="no-model", text="spec.url is missing or not a model URL")],
        )

    prefix = [f"--model={model}", f"--served-model-name={name or 'model'}"]
    if isinstance(url, str) and url.lower().startswith("s3://") and not spec.get("cacheProfile"):
        prefix.append("--load-format=runai_streamer")
    user_args = strings(spec.get("args")) or []
    suffix: list[str] = []
    if parallel is not None:
        tp, pp = parallel
        suffix += [
            f"--tensor-parallel-size={tp}",
            f"--pipeline-parallel-size={pp}",
            "--distributed-executor-backend=ray",
        ]
    if spec.get("adapters"):
        suffix.append("--enable-lora")
    command = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    words = command + prefix + user_args + suffix
    positions = [None] * (len(command) + len(prefix)) + list(range(len(user_args))) + [None] * len(suffix)

    cluster = config.profiles.get(profile or "") if config else None
    gpu_name, resource = DEFAULT_PROFILES.get(profile or "", (None, "nvidia.com/gpu"))
    pod_fields: dict[str, Any] = {}
    image = spec.get("image") if isinstance(spec.get("image"), str) else None
    if cluster is not None:
        # model_config.go getModelConfig: the profile's requests/limits times <count>, its node
        # selector, affinity and tolerations on the pod, its imageName choosing the server image.
        gpu_name = None if cluster.get("nodeSelector") or cluster.get("affinity") else gpu_name
        pod_fields = {k: cluster[k] for k in ("nodeSelector", "affinity", "tolerations") if k in cluster}
        if image is None and config is not None:
            wanted = cluster.get("imageName")
            key = wanted if isinstance(wanted, str) else "default"
            image = config.vllm_images.get(key) or config.vllm_images.get("default")
    container: dict[str, Any] = {
        "name": "server",
        "command": command,
        "args": words[len(command) :],
        "env": [{"name": k, "value": str(v)} for k, v in sorted(mapping(spec.get("env")).items())],
    }
    if image:
        container["image"] = image
    if cluster is not None and count is not None:
        container["resources"] = _scaled(cluster, count)
    elif count is not None and resource is not None:
        container["resources"] = {"limits": {resource: str(count)}}
    template = PodTemplateRef(
        name="model",
        metadata_path=("metadata",),
        spec_path=("spec",),
        group_size=parallel[1] if parallel else 1,
        plan_not_recorded=NOT_RECORDED,
    )
    target = ArgsTarget(path=("spec", "args"), exists=isinstance(spec.get("args"), list), positions=tuple(positions))
    view = PlatformView(
        platform=PLATFORM,
        template=template,
        pod_spec={**pod_fields, "containers": [container]},
        targets={0: target},
        gpu_hint=GpuHint(name=gpu_name, label=str(profile_text)) if gpu_name else None,
        group_gpus=(parallel[0] * parallel[1]) if parallel else None,
    )
    return PlatformRead(platform=PLATFORM, views=[view])


def _scaled(profile: Mapping[str, Any], count: int) -> dict[str, Any]:
    """The profile's GPU requests and limits times ``count``, as KubeAI multiplies every quantity of the
    profile (kubeai-project/kubeai@f442a2cd internal/modelcontroller/model_controller.go getModelConfig:
    ``q.Mul(int64(multiple))`` for each request and limit): the GPU count and the shared-GPU resources
    with it (``nvidia.com/gpumem: 10000`` at ``:2`` is 20000, per GPU as HAMi reads it)."""
    out: dict[str, Any] = {}
    for section in ("requests", "limits"):
        scaled = {}
        for key, value in mapping(profile.get(section)).items():
            if isinstance(key, str) and (key.endswith("/gpu") or "/mig-" in key or key in _SHARED):
                number = parse_quantity(value)
                if number is None or number != number.to_integral_value():
                    continue
                scaled[key] = str(int(number) * count)
        if scaled:
            out[section] = scaled
    return out


def _profile(text: Any) -> tuple[str | None, int | None, tuple[int, int] | None]:
    """(profile, GPUs per pod, (tp, pp) for multi-node) of ``<name>:<count>`` / ``<name>:<tp>:<pp>``."""
    if not isinstance(text, str):
        return None, None, None
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(p.strip().isdigit() for p in parts[1:]):
        return parts[0] or None, None, None
    count = int(parts[1])
    if len(parts) == 3:
        return parts[0], count, (count, int(parts[2]))
    return parts[0], count, None


def _vllm_model(url: Any) -> str | None:
    """What KubeAI passes as ``--model`` (engine_vllm.go), keeping the HF id for hf:// with a cache
    profile (the cache directory holds that repository)."""
    if not isinstance(url, str) or "://" not in url:
        return None
    scheme = url.split("://", 1)[0].lower()
    if scheme == "hf":
        return model_from_uri(url)
    if scheme == "pvc":
        return "/model"
    if scheme in ("s3", "gs", "oss"):
        return url
    return None  # ollama:// and others are not vLLM sources
