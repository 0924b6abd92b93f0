"""One Kubernetes object -> its pod templates -> its vLLM containers, each with its GPU resolved."""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import re2
from pydantic import BaseModel, ConfigDict, Field

from planner.gpus.share import GpuShare
from planner.k8s.configfiles import ConfigMaps, file_reader, with_configmap_env
from planner.k8s.detect import VllmContainer, find_vllm_containers, inspect_container, is_vllm_image, unread_command
from planner.k8s.dra import ClaimIndex, ClaimUse, container_claims, gpu_from_claims
from planner.k8s.gpus import GpuCatalog, GpuResolution, gpu_request, resolve_gpu
from planner.k8s.images import VersionEvidence, annotated_release
from planner.k8s.nodes import NodeInfo
from planner.k8s.platforms import group_of, mentions_vllm, read_platform
from planner.k8s.platforms.base import (
    ArgsTarget,
    PlatformNote,
    PlatformView,
    non_gpu_accelerator,
    non_gpu_device_class,
)
from planner.k8s.platforms.dualpods import server_view as dual_pods_server
from planner.k8s.platforms.kserve import Runtimes
from planner.k8s.platforms.llmisvc import Presets
from planner.k8s.quantity import quantity_bytes
from planner.k8s.sharing import resolve_share
from planner.k8s.workloads import (
    MAX_SEARCH_TEMPLATES,
    PodTemplateRef,
    controller_of,
    get_path,
    owned_by_controller,
    pod_templates,
)

SKIP_ANNOTATION = "kv-planner.io/skip"
SkipReason = Literal["opted-out", "owned-by-controller", "no-pod-template", "deleted"]


class ContainerFinding(BaseModel):
    model_config = ConfigDict(frozen=True)

    template: PodTemplateRef
    container: VllmContainer
    gpu: GpuResolution
    share: GpuShare | None = Field(default=None, description="the pod's share of a shared GPU, if shared")
    claims: list[ClaimUse] = Field(default_factory=list, description="DRA claims the container uses")
    replicas: int = Field(default=1, description="pods the workload runs (spec.replicas)")
    memory_limit_bytes: int | None = Field(default=None, description="the container's resources.limits.memory")
    platform: str | None = Field(default=None, description="the serving platform whose resource this is")
    target: ArgsTarget | None = Field(default=None, description="platform view: where its args are written")
    rebuilt: bool = Field(default=False, description="the container was rebuilt from platform fields")
    no_write: str | None = Field(default=None, description="why this container cannot be changed")

    @property
    def writable(self) -> bool:
        """Whether changes may be written: a real container, or a platform field that takes them."""
        return self.no_write is None and (self.target is not None or not self.rebuilt)


class TemplateFinding(BaseModel):
    model_config = ConfigDict(frozen=True)

    template: PodTemplateRef
    containers: list[ContainerFinding] = Field(default_factory=list)


class WorkloadFinding(BaseModel):
    """What kv-planner reads from one object."""

    model_config = ConfigDict(frozen=True)

    kind: str | None
    api_version: str | None
    namespace: str | None
    name: str | None
    skip: SkipReason | None = None
    platform: str | None = None
    templates: list[TemplateFinding] = Field(default_factory=list)
    notes: list[PlatformNote] = Field(default_factory=list, description="what was seen but not planned, and why")

    @property
    def vllm_containers(self) -> list[ContainerFinding]:
        return [c for t in self.templates for c in t.containers]


def _opted_out(meta: Any) -> bool:
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping) or SKIP_ANNOTATION not in annotations:
        return False
    return str(annotations[SKIP_ANNOTATION]).strip().lower() not in ("false", "0", "no", "off")


def inspect_workload(
    obj: Mapping[str, Any],
    *,
    catalog: GpuCatalog,
    inventory: Sequence[NodeInfo] | None = None,
    default_gpu: str | None = None,
    default_version: str | None = None,
    configmaps: ConfigMaps | None = None,
    namespace: str | None = None,
    runtimes: Runtimes | None = None,
    claims: ClaimIndex | None = None,
    presets: Presets | None = None,
) -> WorkloadFinding:
    """Read ``obj``: its templates, their vLLM containers and GPUs (never raises on odd shapes)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else namespace
    header: dict[str, Any] = {
        "kind": obj.get("kind") if isinstance(obj.get("kind"), str) else None,
        "api_version": obj.get("apiVersion") if isinstance(obj.get("apiVersion"), str) else None,
        "namespace": ns,
        "name": meta.get("name") if isinstance(meta.get("name"), str) else meta.get("generateName"),
    }
    if _opted_out(meta):
        return WorkloadFinding(skip="opted-out", **header)
    if header["kind"] in ("Pod", "ReplicaSet") and owned_by_controller(obj):
        return WorkloadFinding(skip="owned-by-controller", **header)
    # Another controller (an operator kv-planner has no reader for, or an ownerReference its author made
    # up): checked, but changes are only listed, as the controller would undo or fight them.
    owner = controller_of(obj)
    owned_elsewhere = (
        f"owned by {owner[1][:63]} {owner[2][:63]}: its controller keeps the template"
        if owner is not None and owner[:2] != ("batch/v1", "CronJob")  # (a CronJob only creates its Jobs)
        else None
    )
    stated, problem = annotated_release(meta.get("annotations"))
    notes: list[PlatformNote] = []
    if problem:
        notes.append(PlatformNote(reason="bad-version-annotation", text=problem))
    read = read_platform(obj, runtimes=runtimes, configmaps=configmaps, presets=presets)
    if read is not None:
        platform: str | None = read.platform
        views = list(read.views)
        notes += read.notes
    else:
        platform = None
        refs = pod_templates(obj)
        if len(refs) > MAX_SEARCH_TEMPLATES:
            text = f"{header['kind']} holds more than {MAX_SEARCH_TEMPLATES} pod templates: the first are checked"
            notes.append(PlatformNote(reason="unsupported-kind", text=text))
        views = []
        for ref in refs[:MAX_SEARCH_TEMPLATES]:
            view, dual_notes = dual_pods_server(obj, PlatformView(platform="kubernetes", template=ref))
            views.append(view)
            notes += dual_notes
        if not views and group_of(obj) not in _BUILTIN_GROUPS and mentions_vllm(obj):
            kind = header["kind"]
            text = f"{kind} mentions vLLM but kv-planner has no reader for it"
            notes.append(PlatformNote(reason="unsupported-kind", text=text))
    header["platform"] = platform
    if not views:
        return WorkloadFinding(skip="no-pod-template", notes=notes, **header)

    replicas = _replicas(obj)
    templates: list[TemplateFinding] = []
    for view in views:
        ref = view.template
        pod_spec = view.pod_spec if view.pod_spec is not None else get_path(obj, ref.spec_path)
        template_meta = get_path(obj, ref.metadata_path)
        if not isinstance(pod_spec, Mapping):
            continue
        if _opted_out(template_meta):
            templates.append(TemplateFinding(template=ref))
            continue
        template_stated, template_problem = annotated_release(_annotations(template_meta))
        if template_problem and template_problem not in [n.text for n in notes]:
            notes.append(PlatformNote(reason="bad-version-annotation", where=ref.name, text=template_problem))
        version: VersionEvidence | None = stated or template_stated or view.stated_version
        reader = _reader(pod_spec, ns, configmaps) if configmaps else None
        containers = find_vllm_containers(
            _with_configmap_env(pod_spec, ns, configmaps) if configmaps else pod_spec,
            implicit_env=ref.implicit_env,
            default_version=default_version,
            read_file=reader,
            stated_version=version,
            engine_namespace=view.engine_namespace,
            engine_namespace_files=view.engine_namespace_files,
        )
        notes += _unreadable_commands(pod_spec, {found.index for found in containers})
        notes += _sidecars(pod_spec)
        notes += [_several_servers(found) for found in containers if found.servers > 1]
        peer = get_path(obj, ref.peer_spec_path) if ref.peer_spec_path else None
        findings = []
        for found in containers:
            if found.style == "image" and not view.image_entrypoint:
                continue  # the platform runs its own command there, not the image's vLLM entrypoint
            raw = pod_spec["containers"][found.index]
            uses = container_claims(pod_spec, raw, ns, claims)
            accelerator = _non_gpu(raw, uses)
            if accelerator:
                notes.append(
                    PlatformNote(
                        reason="non-gpu-accelerator",
                        where=found.name,
                        text=f"{accelerator}: kv-planner plans GPUs only, not checked",
                    )
                )
                continue
            pod_meta = view.pod_metadata if view.pod_metadata is not None else template_meta
            gpu = resolve_gpu(
                container=raw,
                pod_spec=pod_spec,
                annotations=[_annotations(meta), _annotations(template_meta), _annotations(view.pod_metadata)],
                catalog=catalog,
                group_size=ref.group_size,
                peer_spec=peer if isinstance(peer, Mapping) else None,
                inventory=inventory,
                default_gpu=default_gpu,
                labels=get_path(pod_meta, ("labels",)) if isinstance(pod_meta, Mapping) else None,
            )
            gpu = _platform_gpu(gpu, view, catalog)
            if uses:
                gpu = gpu_from_claims(uses, catalog, gpu) or gpu
            annotations = [meta.get("annotations"), _annotations(template_meta), _annotations(view.pod_metadata)]
            share = resolve_share(
                container=raw,
                pod_spec=pod_spec,
                annotations=[a if isinstance(a, Mapping) else None for a in annotations],
                gpu=gpu,
                inventory=inventory,
                claims=uses,
                replicas=replicas,
                namespace=ns,
            )
            target = view.targets.get(found.index)
            rebuilt = view.pod_spec is not None
            no_write = view.no_write if (rebuilt and target is None) else None
            if rebuilt and target is None and no_write is None:
                no_write = "the platform keeps no field for vLLM's arguments"
            no_write = no_write or owned_elsewhere
            findings.append(
                ContainerFinding(
                    template=ref,
                    container=found,
                    gpu=gpu,
                    share=share,
                    claims=uses,
                    replicas=replicas,
                    memory_limit_bytes=_memory_limit(raw),
                    platform=view.platform,
                    target=target,
                    rebuilt=rebuilt,
                    no_write=no_write,
                )
            )
        templates.append(TemplateFinding(template=ref, containers=findings))
    return WorkloadFinding(templates=templates, notes=notes, **header)


# API groups of Kubernetes' own kinds (never "an LLM server we cannot read").
_BUILTIN_GROUPS = ("", "apps", "batch", "autoscaling", "policy", "networking.k8s.io", "rbac.authorization.k8s.io")
# vLLM builds for accelerators the planner does not model, by the words their images' names are made of:
# vllm/vllm-tpu, vllm-neuron (and AWS's ...-vllm-neuronx), opea/vllm-gaudi, vllm-hpu, vllm-ascend,
# ghcr.io/llm-d/llm-d-xpu, intel/vllm:0.10.2-xpu, vllm/vllm-openai-xpu, Rebellions' vllm-rbln, IBM's
# vllm-spyre, Moore Threads' vllm-musa, Cambricon's vllm-mlu, and the CPU builds (vllm/vllm-openai-cpu,
# vllm-cpu-release-repo, llm-d-cpu).
_NON_GPU_IMAGE_WORDS = frozenset(("tpu", "hpu", "xpu", "npu", "cpu", "gaudi", "ascend", "rbln", "spyre", "musa", "mlu"))
_NON_GPU_IMAGE_PREFIXES = ("neuron",)  # neuronx
_IMAGE_WORD = re2.compile(r"[^a-z0-9]+")
# Every ASCII character but [a-z0-9] -> a space, for the words of an ASCII image name (_image_words).
_ASCII_SEPARATORS = {code: " " for code in range(128) if chr(code) not in string.ascii_lowercase + string.digits}


def _unreadable_commands(pod_spec: Mapping[str, Any], read: set[int]) -> list[PlatformNote]:
    """Containers with an accelerator that look like a vLLM server kv-planner could not read: a vLLM
    image whose command is a script file or a wrapper program (production-stack's Ray head copies a script
    from a ConfigMap and runs it), any image whose shell script names vLLM but is one kv-planner does not
    read (the note says why: bash would refuse it, or it nests past a bound), or another image handed
    vLLM's own flags (``--max-model-len``, ...) for its entrypoint. A warning, not "no vLLM container":
    KVP037 with a GPU, KVP064 with a non-GPU accelerator. Without an accelerator such a container is a
    helper, not a server to plan (LMCache's cache server runs in the vLLM image)."""
    containers = pod_spec.get("containers")
    if not isinstance(containers, list):
        return []
    notes: list[PlatformNote] = []
    for index, raw in enumerate(containers):
        if index in read or not isinstance(raw, Mapping):
            continue
        accelerator = _non_gpu(raw)
        if accelerator is None and not _asks_for_gpu(raw):
            continue
        # (after the cheap checks: unread_command reads the script again)
        unread = unread_command(raw)
        command = unread.words if unread is not None else _vllm_flags_for_entrypoint(raw)
        if command is None:
            continue
        shown = _one_line(command)
        image = str(raw.get("image")).rsplit("/", 1)[-1][:60]
        where = str(raw.get("name") or f"#{index}")[:63]
        if accelerator is not None:
            text = f"{accelerator}: image {image} runs `{shown}`; kv-planner plans GPUs only, not checked"
            notes.append(PlatformNote(reason="non-gpu-accelerator", where=where, text=text))
            continue
        why = f" ({_one_line([unread.why], 70)})" if unread is not None and unread.why else ""
        text = f"image {image} with a GPU runs `{shown}`, which kv-planner cannot read as vLLM{why}: not checked"
        notes.append(PlatformNote(reason="unreadable-command", where=where, text=text))
    return notes


# Flags only vLLM (and its forks) take: an image that is not a vLLM image, given them in `args` and no
# `command`, runs vLLM through an entrypoint kv-planner cannot see (llm-d's own images are read as vLLM).
_VLLM_ONLY_FLAGS = frozenset(
    (
        "--max-model-len",
        "--gpu-memory-utilization",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--swap-space",
        "--enable-chunked-prefill",
        "--disable-log-requests",
    )
)


def _vllm_flags_for_entrypoint(container: Mapping[str, Any]) -> list[str] | None:
    """``args`` when the container has no ``command`` and they hold vLLM's own flags, else None."""
    if container.get("command"):
        return None
    args = container.get("args")
    if not isinstance(args, list):
        return None
    words = [w for w in args if isinstance(w, str)]
    if any(w.split("=", 1)[0] in _VLLM_ONLY_FLAGS for w in words):
        return words
    return None


def _sidecars(pod_spec: Mapping[str, Any]) -> list[PlatformNote]:
    """Native sidecars (init containers with ``restartPolicy: Always``, Kubernetes 1.29+) that run vLLM, or
    a vLLM image with a GPU: they serve for the pod's whole life, but kv-planner plans ``containers``."""
    init = pod_spec.get("initContainers")
    if not isinstance(init, list):
        return []
    notes: list[PlatformNote] = []
    for index, raw in enumerate(init):
        if not isinstance(raw, Mapping) or raw.get("restartPolicy") != "Always":
            continue
        image = raw.get("image")
        vllm_image = is_vllm_image(image if isinstance(image, str) else None)
        if inspect_container(index, raw) is None and not (vllm_image and _asks_for_gpu(raw)):
            continue
        where = str(raw.get("name") or f"init #{index}")[:63]
        notes.append(PlatformNote(reason="sidecar", where=where, text="vLLM in a native sidecar: not checked"))
    return notes


def _several_servers(found: VllmContainer) -> PlatformNote:
    """A script that starts more than one vLLM server: the one read (the ``exec``'d one, else the last)
    is named; the others run beside it on the same GPUs and are not checked."""
    shown, count = _one_line(found.words), found.servers
    if found.servers_conditional:  # `if ...; then vllm serve a; else vllm serve b; fi`: one of them runs
        text = f"the script starts one of {count} vLLM servers, as its conditions decide; only `{shown}` is checked"
    else:
        text = f"the script starts {count} vLLM servers; only `{shown}` is checked, the others share its GPUs"
    return PlatformNote(reason="several-servers", where=found.name[:63], text=text)


def _one_line(words: Sequence[str], limit: int = 80) -> str:
    """A command line as one line of at most ``limit`` characters (untrusted text in a message)."""
    shown = " ".join(" ".join(words).split())
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _asks_for_gpu(container: Mapping[str, Any]) -> bool:
    """A GPU resource (nvidia.com/gpu, amd.com/gpu, MIG) or a DRA claim."""
    _, count = gpu_request(container)
    claims = get_path(container, ("resources", "claims"))
    return bool(count) or (isinstance(claims, list) and bool(claims))


def _non_gpu(container: Mapping[str, Any], claims: Sequence[ClaimUse] = ()) -> str | None:
    """What says a vLLM container runs on an accelerator the planner does not model (it models NVIDIA
    and AMD GPUs): a resource (TPU, Neuron, Gaudi, Intel XPU, Ascend, Rebellions, ...), a DRA claim of
    such a device class (``gpu.intel.com``), or an image built for one (``vllm-tpu``, ``llm-d-xpu``)."""
    resource = non_gpu_accelerator(container.get("resources"))
    if resource:
        return resource
    for use in claims:
        for request in use.claim.requests if use.claim is not None else ():
            if request.device_class and non_gpu_device_class(request.device_class):
                return f"DRA device class {request.device_class[:63]}"
    cpu = _cpu_backend_env(container) if not claims else None
    if cpu is not None:
        return cpu
    image = container.get("image")
    if not isinstance(image, str):
        return None
    word = _non_gpu_image(image)
    return f"image {image.rsplit('/', 1)[-1][:60]} (a {word} build)" if word is not None else None


def _image_words(name: str) -> list[str]:
    """The runs of ``[a-z0-9]`` in ``name``, in order (what splitting it at ``[^a-z0-9]+`` leaves, less the
    empty words at its ends). An ASCII name is split by ``str.translate`` and ``str.split`` (linear, no
    regex: re2's wrapper took ~100 us on an image name, on every container of every review); others by re2."""
    if name.isascii():
        return name.translate(_ASCII_SEPARATORS).split()
    words: list[str] = _IMAGE_WORD.split(name)  # (re2 is untyped)
    return [word for word in words if word]


# Variables only vLLM's CPU backend reads (vllm/envs.py): set on a container that asks for no GPU, they say
# it runs vLLM on the CPU (KServe's huggingface runtime on CPU, the vLLM docs' CPU Deployment), whatever the image.
_CPU_BACKEND_ENV = ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND")


def _cpu_backend_env(container: Mapping[str, Any]) -> str | None:
    env = container.get("env")
    if not isinstance(env, list) or gpu_request(container)[1] is not None:
        return None
    names = {item.get("name") for item in env if isinstance(item, Mapping)}
    found = next((name for name in _CPU_BACKEND_ENV if name in names), None)
    return f"CPU backend ({found} set, no GPU)" if found else None


def _non_gpu_image(image: str) -> str | None:
    """The word of an image's name (repository path or tag, not its digest) that marks a build for a
    non-GPU device (``xpu``, ``gaudi``, ``neuronx``, ``cpu``, ...), else None."""
    for word in _image_words(image.split("@", 1)[0].lower()):
        if word in _NON_GPU_IMAGE_WORDS or word.startswith(_NON_GPU_IMAGE_PREFIXES):
            return word
    return None


def _platform_gpu(gpu: GpuResolution, view: PlatformView, catalog: GpuCatalog) -> GpuResolution:
    """Apply what the platform says: its GPU name (below the user's annotation and the node
    selectors, above the CLI default) and the GPUs of the whole serving group."""
    update: dict[str, Any] = {}
    if view.gpu_hint is not None and gpu.source in (None, "cli", "inventory"):
        spec = catalog.lookup(view.gpu_hint.name)
        if spec is not None:
            update.update(name=spec.name, label=view.gpu_hint.label, source="platform", spec=spec, unknown_label=False)
    if view.group_gpus is not None:
        update["group_gpus"] = view.group_gpus
    return gpu.model_copy(update=update) if update else gpu


def _memory_limit(container: Mapping[str, Any]) -> int | None:
    limit = get_path(container, ("resources", "limits", "memory"))
    return quantity_bytes(limit) if limit is not None else None


def _replicas(obj: Mapping[str, Any]) -> int:
    """Pods the object runs at once: ``spec.replicas`` of Deployments, StatefulSets and ReplicaSets
    (the API default 1 when absent), 1 for everything else."""
    if obj.get("kind") not in ("Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"):
        return 1
    value = get_path(obj, ("spec", "replicas"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1


def _annotations(meta: Any) -> Mapping[str, Any] | None:
    if isinstance(meta, Mapping) and isinstance(meta.get("annotations"), Mapping):
        value: Mapping[str, Any] = meta["annotations"]
        return value
    return None


def _with_configmap_env(
    pod_spec: Mapping[str, Any], namespace: str | None, configmaps: ConfigMaps
) -> Mapping[str, Any]:
    """The pod spec read for vLLM: each container's environment from known ConfigMaps written out (planner
    check; see :func:`with_configmap_env`)."""
    containers = pod_spec.get("containers")
    if not isinstance(containers, list):
        return pod_spec
    resolved = [with_configmap_env(c, namespace, configmaps) if isinstance(c, Mapping) else c for c in containers]
    return {**pod_spec, "containers": resolved}


def _reader(
    pod_spec: Mapping[str, Any], namespace: str | None, configmaps: ConfigMaps
) -> Callable[[Mapping[str, Any]], Callable[[str], str | None]]:
    def for_container(container: Mapping[str, Any]) -> Callable[[str], str | None]:
        return file_reader(pod_spec, container, namespace, configmaps)

    return for_container
