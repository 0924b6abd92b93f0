"""What a platform reader hands to :mod:`planner.k8s.inspect`: views of vLLM pods, and named reasons.

A serving platform (KServe, KubeAI, Ray, AIBrix, Dynamo, ...) does not always keep a pod template in
its resource: its controller builds the vLLM command line from fields such as ``url: hf://...``,
``resourceProfile: nvidia-gpu-l4:1`` and ``args``. A reader rebuilds, from the resource alone, the
container that controller would run (a *view*) so that the same decisions apply as to a Deployment,
and says where a change may be written:

* an :class:`ArgsTarget` — a list of strings in the resource that the controller appends to vLLM's
  command line (KubeAI ``spec.args``, KServe ``predictor.model.args``, a Dynamo worker's ``args``);
  vLLM's argparse lets the last occurrence of a flag win, so a flag the controller sets itself is
  overridden by appending it there;
* or no field at all (``no_write``): the change becomes a warning naming the flags to add.

Readers never raise on odd shapes; what they cannot read becomes a :class:`PlatformNote` with a reason
(DESIGN.md: an LLM server kv-planner cannot read is a warning with a code, never a silent skip).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import re2
from pydantic import BaseModel, ConfigDict, Field

from planner.k8s.images import VersionEvidence
from planner.k8s.shell import shell_script
from planner.k8s.workloads import PodTemplateRef, Pointer

NoteReason = Literal[
    "unsupported-kind",  # an LLM-serving resource kv-planner has no reader for
    "non-gpu-accelerator",  # TPU, Neuron, Gaudi, CPU: the planner models GPUs only
    "no-model",  # an LLM server whose model is not in the resource
    "not-vllm",  # the resource serves with another engine (SGLang, TGI, llama.cpp, ...)
    "unreadable-config",  # a platform config (Ray serveConfigV2, ...) that does not parse
    "bad-version-annotation",  # kv-planner.io/vllm-version is not a release
    "template-only",  # a runtime / preset other resources use: checked where it is used
    "unreadable-command",  # a vLLM image with a GPU whose command is a script file or another program
    "sidecar",  # vLLM in a native sidecar (an init container that keeps running)
    "several-servers",  # a container's script starts more than one vLLM server: one is checked
    "preset-not-read",  # a preset the resource names (KServe spec.baseRefs) is not readable here: never denied
    "preset-not-passed",  # a preset field the platform does not pass to vLLM (KServe preset parallelism)
]


class PlatformNote(BaseModel):
    """Why part of a resource was not planned (``reason`` maps to a reason code in planner.policy)."""

    model_config = ConfigDict(frozen=True)

    reason: NoteReason
    where: str | None = Field(default=None, description="the role / component / container concerned")
    text: str


class ArgsTarget(BaseModel):
    """The list of strings in the resource that ends vLLM's command line."""

    model_config = ConfigDict(frozen=True)

    path: Pointer = Field(description="JSON pointer tokens of the list in the resource")
    exists: bool = Field(description="False: the list is created by the patch")
    positions: tuple[int | None, ...] = Field(
        description="for each word of the view's command line: its index in the list, None when the "
        "platform supplies it (those are overridden by appending, never edited)"
    )


class GpuHint(BaseModel):
    """The GPU a platform field names (KubeAI resource profile, Ray Serve accelerator_type, ...)."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="a GPU name the catalog can look up")
    label: str = Field(description="the raw value, for the report")


class PlatformView(BaseModel):
    """One pod template of a platform resource, as its controller would build it."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    platform: str
    template: PodTemplateRef
    pod_spec: dict[str, Any] | None = Field(
        default=None, description="the rebuilt PodSpec; None: the template at template.spec_path is real"
    )
    targets: dict[int, ArgsTarget] = Field(
        default_factory=dict, description="container index -> where its args are written"
    )
    no_write: str | None = Field(
        default=None, description="why containers without a target cannot be changed (None: ordinary container)"
    )
    gpu_hint: GpuHint | None = None
    pod_metadata: dict[str, Any] | None = Field(
        default=None,
        description="labels and annotations of the pods the platform runs, when they are not at "
        "template.metadata_path (a Ray Serve engine runs on a worker group's pods)",
    )
    group_gpus: int | None = Field(default=None, description="GPUs across the serving group, when the platform says")
    stated_version: VersionEvidence | None = None
    engine_namespace: dict[str, Any] = Field(
        default_factory=dict,
        description="engine arguments (dest -> value) the platform sets on the view's vLLM engine without "
        "vLLM's parser, under its command line's flags (VllmCommand.namespace): Ray Serve LLM's `false` "
        "engine_kwargs, which no release-independent word spells",
    )
    engine_namespace_files: dict[int, str] = Field(
        default_factory=dict,
        description="container index -> a JSON file (read as `--config` files are, from a ConfigMap) whose object "
        "is that engine's namespace before its parser (Dynamo's --engine-config-json)",
    )
    image_entrypoint: bool = Field(
        default=True,
        description="a container with no command runs its image's entrypoint (False: the platform "
        "replaces it, as KubeRay does with `ray start`)",
    )


class PlatformRead(BaseModel):
    """What a reader found in one resource."""

    model_config = ConfigDict(frozen=True)

    platform: str
    views: list[PlatformView] = Field(default_factory=list)
    notes: list[PlatformNote] = Field(default_factory=list)


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (readers never trust shapes)."""
    return value if isinstance(value, Mapping) else {}


def listed(value: Any) -> list[Any]:
    """``value`` when it is a list, else an empty one."""
    return value if isinstance(value, list) else []


def strings(value: Any) -> list[str] | None:
    """A list of strings as Kubernetes would accept it (numbers and booleans as YAML scalars), else None."""
    if not isinstance(value, list):
        return None
    out: list[str] = []
    for item in value:
        if isinstance(item, bool):
            out.append("true" if item else "false")
        elif isinstance(item, (str, int, float)):
            out.append(str(item))
        else:
            return None
    return out


def model_from_uri(uri: Any) -> str | None:
    """The Hugging Face id in ``hf://org/name`` (a revision after ``@`` or ``:`` is dropped); other
    schemes (``s3://``, ``gs://``, ``pvc://``, ``oci://``) are paths, returned as they are."""
    if not isinstance(uri, str) or not uri.strip():
        return None
    text: str = uri.strip()
    if text.lower().startswith("hf://"):
        ref = text[5:].strip("/").split("@", 1)[0]
        return ref or None
    return text


def own_args_target(container: Mapping[str, Any], path: Pointer) -> ArgsTarget | None:
    """The container's own ``args`` (at ``path``) as the place for changes to a real container of a
    rebuilt pod, when its words are ``command + args`` one for one (not a shell string, whose words come
    from the script): a flag written there is edited in place, any other appended."""
    command = container.get("command")
    args = container.get("args")
    command_words = strings(command) if command is not None else []
    args_words = strings(args) if args is not None else []
    if command_words is None or args_words is None or shell_script(command_words + args_words) is not None:
        return None
    positions = [None] * len(command_words) + list(range(len(args_words)))
    return ArgsTarget(path=path, exists=isinstance(args, list), positions=tuple(positions))


# Accelerators vLLM runs on that the planner does not model: its catalog and memory model are NVIDIA's and
# AMD's GPUs (nvidia.com/gpu, nvidia.com/mig-*, amd.com/gpu, and the NVIDIA sharing resources of HAMi,
# Volcano, Alibaba, ...). A device plugin names its resource `vendor-domain/name`; these vendors' resources
# are never NVIDIA or AMD GPUs (lower-case prefixes: Ascend's are spelled huawei.com/Ascend910B3).
NON_GPU_RESOURCES = (
    "google.com/tpu",  # Cloud TPU on GKE
    "aws.amazon.com/neuron",  # Inferentia / Trainium: neuron, neuroncore, neurondevice
    "habana.ai/",  # Intel Gaudi: habana.ai/gaudi
    "gpu.intel.com/",  # Intel GPUs (XPU): gpu.intel.com/i915, gpu.intel.com/xe (intel-device-plugins-for-kubernetes)
    "huawei.com/ascend",  # Ascend NPUs: huawei.com/Ascend910, Ascend910B3, Ascend310P
    "rebellions.ai/",  # Rebellions ATOM / REBEL: rebellions.ai/ATOM
    "furiosa.ai/",  # FuriosaAI Warboy / RNGD
    "tenstorrent.com/",  # Tenstorrent Wormhole / Blackhole
    "cambricon.com/",  # Cambricon MLU: mlu, vmlu (HAMi)
    "hygon.com/",  # Hygon DCU: dcunum, dcumem, dcucores (HAMi)
    "iluvatar.ai/",  # Iluvatar CoreX: vgpu (HAMi)
    "metax-tech.com/",  # MetaX: gpu, sgpu, vcore, vmemory (HAMi)
    "mthreads.com/",  # Moore Threads: vgpu (HAMi)
    "enflame.com/",  # Enflame GCU: vgcu (HAMi)
    "kunlunxin.com/",  # Kunlunxin XPU (HAMi)
    "qualcomm.com/qaic",  # Qualcomm Cloud AI 100
)
# The class, for vendors not listed: a resource (or DRA device class) whose name says it is a TPU, NPU,
# XPU, HPU, DCU, MLU, GCU, IPU, AIU, Neuron, Gaudi or Ascend device, whoever publishes it.
NON_GPU_WORDS = frozenset(("tpu", "npu", "xpu", "hpu", "dcu", "mlu", "vmlu", "gcu", "vgcu", "ipu", "aiu")) | frozenset(
    ("neuron", "neuroncore", "neurondevice", "gaudi", "ascend")
)
_GPU_DOMAINS = ("nvidia.com", "amd.com")  # their resources are GPUs (or shares of one) the planner models
_NON_GPU_DOMAINS = tuple(prefix[:-1] for prefix in NON_GPU_RESOURCES if prefix.endswith("/"))
_WORD_SPLIT = re2.compile(r"[^a-z0-9]+")


def non_gpu_resource(name: str) -> bool:
    """Whether the extended resource ``name`` is a non-GPU accelerator (see :data:`NON_GPU_RESOURCES`)."""
    lowered = name.lower()
    if lowered.startswith(NON_GPU_RESOURCES):
        return True
    domain, slash, kind = lowered.partition("/")
    return bool(slash) and domain not in _GPU_DOMAINS and not NON_GPU_WORDS.isdisjoint(_WORD_SPLIT.split(kind))


def non_gpu_device_class(name: str) -> bool:
    """Whether the DRA device class ``name`` (``gpu.intel.com``, ``tpu.google.com``) is not a GPU the
    planner models."""
    lowered = name.lower()
    if lowered in _NON_GPU_DOMAINS or lowered.endswith(tuple("." + d for d in _NON_GPU_DOMAINS)):
        return True
    return not NON_GPU_WORDS.isdisjoint(_WORD_SPLIT.split(lowered))


def non_gpu_accelerator(resources: Any) -> str | None:
    """The first non-GPU accelerator resource (TPU, Neuron, Gaudi, Intel XPU, Ascend, ...) a resources
    block asks for, else None."""
    for section in ("limits", "requests"):
        values = mapping(mapping(resources).get(section))
        for key in sorted(k for k in values if isinstance(k, str)):
            if non_gpu_resource(key):
                return key
    return None
