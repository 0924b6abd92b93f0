"""KServe ``InferenceService`` (serving.kserve.io/v1beta1) with ``predictor.model``, read the way
KServe's predictor reconciler builds the serving container.

kserve/kserve pkg/controller/v1beta1/inferenceservice/components/predictor.go selects the runtime
(``predictor.model.runtime`` by name, else a ServingRuntime / ClusterServingRuntime whose
``supportedModelFormats`` has the model format with ``autoSelect``), replaces the template variables
of the runtime's container (``{{.Name}}``, ``{{.Namespace}}``, ``{{.Labels.x}}``,
``{{.Annotations.x}}`` from the InferenceService's metadata) and merges it with the predictor's
container (pkg/utils MergeRuntimeContainers: a strategic merge, except that ``args`` and ``env`` are
*concatenated*, runtime first). ``storageUri`` is downloaded to ``/mnt/models`` by the storage
initializer; ``hf://org/name`` names a Hugging Face repository.

Runtimes: the ones in the same input (``planner check``), else KServe's built-in ones for the
``huggingface`` format (config/runtimes/kserve-huggingfaceserver.yaml: ``huggingfaceserver
--model_name={{.Name}}``, vLLM backend unless ``--backend=huggingface``) and the ``vllm`` format
(kserve-vllmserver.yaml: ``vllm serve ${MODEL} ... $@``, the predictor's args appended).

The model planned is the Hugging Face id (``--model_id``, else ``storageUri: hf://...``). Changes are
appended to ``predictor.model.args`` (after the runtime's args: vLLM's last occurrence wins).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import re2

from planner.k8s.images import image_release
from planner.k8s.platforms.base import (
    ArgsTarget,
    PlatformNote,
    PlatformRead,
    PlatformView,
    listed,
    mapping,
    model_from_uri,
    non_gpu_accelerator,
    strings,
)
from planner.k8s.platforms.launcher import flag_value, vllm_words
from planner.k8s.workloads import PodTemplateRef
from planner.vllm.argv import locate

PLATFORM = "kserve"
MODEL_DIR = "/mnt/models"  # KServe constants.DefaultModelLocalMountPath
LLM_FORMATS = ("huggingface", "vllm")
_POD_FIELDS = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "volumes",
    "runtimeClassName",
    "priorityClassName",
    "schedulerName",
)
_TEMPLATE = re2.compile(r"\{\{\s*\.(Name|Namespace|Labels\.[^}\s]+|Annotations\.[^}\s]+)\s*\}\}")

Runtimes = Mapping[str, Mapping[str, Any]]
"""Runtime name -> ServingRuntime / ClusterServingRuntime ``spec``."""


def runtimes_from_documents(documents: Sequence[Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for doc in documents:
        if not isinstance(doc, Mapping) or doc.get("kind") not in ("ServingRuntime", "ClusterServingRuntime"):
            continue
        name = mapping(doc.get("metadata")).get("name")
        if isinstance(name, str) and isinstance(doc.get("spec"), Mapping):
            found[name] = dict(doc["spec"])
    return found


def read(obj: Mapping[str, Any], runtimes: Runtimes | None = None) -> PlatformRead | None:
    """None when the predictor has its own containers (read as a pod template) or is not an LLM."""
    spec = mapping(obj.get("spec"))
    predictor = mapping(spec.get("predictor"))
    model = predictor.get("model")
    if isinstance(predictor.get("containers"), list) or not isinstance(model, Mapping):
        return None
    meta = mapping(obj.get("metadata"))
    model_format = str(mapping(model.get("modelFormat")).get("name") or "").lower()
    runtime_name = model.get("runtime") if isinstance(model.get("runtime"), str) else None
    runtime = _runtime(runtime_name, model_format, runtimes or {})
    if runtime is None and model_format not in LLM_FORMATS:
        if runtime_name and "vllm" in f"{runtime_name} {model_format}".lower():
            # The webhook reads no ServingRuntimes; planner check needs it in its input.
            text = f"ServingRuntime {runtime_name[:60]} is not in the input: its vLLM command line is unknown"
            return PlatformRead(platform=PLATFORM, notes=[PlatformNote(reason="unreadable-config", text=text)])
        return None  # sklearn, xgboost, ... : not an LLM server
    accelerator = non_gpu_accelerator(model.get("resources"))
    if accelerator:
        return PlatformRead(
            platform=PLATFORM,
            notes=[PlatformNote(reason="non-gpu-accelerator", where="predictor", text=f"{accelerator}: not planned")],
        )

    runtime_container = _runtime_container(runtime) if runtime else {}
    runtime_args = [_expand(w, meta) for w in strings(runtime_container.get("args")) or []]
    user_args = strings(model.get("args")) or []
    image = model.get("image") if isinstance(model.get("image"), str) else runtime_container.get("image")
    command = strings(model.get("command")) or strings(runtime_container.get("command")) or []
    command = [_expand(w, meta) for w in command]
    storage = model.get("storageUri") if isinstance(model.get("storageUri"), str) else None
    merged_args = runtime_args + user_args
    hf_model = flag_value(merged_args, "model_id") or (model_from_uri(storage) if storage else None)

    version_evidence = image_release(image if isinstance(image, str) else None)
    # (the user's args follow the runtime's in the container, so a --backend among them is the one in force:
    # KServe's own samples put --backend=huggingface there)
    launcher = _launcher(command, merged_args, image, model_format, runtime is None)
    if launcher == "huggingface-backend":
        return PlatformRead(
            platform=PLATFORM,
            notes=[PlatformNote(reason="not-vllm", where="predictor", text="--backend=huggingface: not vLLM")],
        )
    if launcher is None:
        return None

    offset = len(runtime_args)
    words: list[str]
    positions: list[int | None]
    if launcher == "vllm-argv":
        # The runtime runs vLLM itself; the model directory is the storageUri's repository.
        words = command + merged_args
        words = [hf_model if w == MODEL_DIR and hf_model else w for w in words]
        words = [f"--model={hf_model}" if w == f"--model={MODEL_DIR}" and hf_model else w for w in words]
        positions = [None] * (len(command) + offset) + list(range(len(user_args)))
    else:
        if hf_model is None:
            return PlatformRead(
                platform=PLATFORM,
                notes=[
                    PlatformNote(
                        reason="no-model",
                        where="predictor",
                        text="no --model_id and no hf:// storageUri: the model is not in the resource",
                    )
                ],
            )
        # huggingfaceserver / vllmserver: the engine flags among the server's own, then the model.
        kept = _without_model(vllm_words(merged_args, version_evidence.version if version_evidence else None))
        kept = sorted(kept + _max_length_words(merged_args), key=lambda pair: pair[1])
        head = ["vllm", "serve", hf_model]
        words = head + [w for w, _ in kept]
        positions = [None for _ in head]
        positions += [i - offset if i >= offset else None for _, i in kept]

    worker = mapping(predictor.get("workerSpec"))
    group_gpus = None
    group_size = 1
    if worker:
        tp = worker.get("tensorParallelSize")
        pp = worker.get("pipelineParallelSize")
        tp = tp if isinstance(tp, int) and tp > 0 else 1
        pp = pp if isinstance(pp, int) and pp > 0 else 1
        extra = [f"--tensor-parallel-size={tp}", f"--pipeline-parallel-size={pp}"]
        words += extra
        positions += [None, None]
        group_gpus, group_size = tp * pp, pp

    container: dict[str, Any] = {
        "name": str(runtime_container.get("name") or "kserve-container"),
        "command": words[:2],
        "args": words[2:],
        "env": _env(runtime_container.get("env")) + _env(model.get("env")),
    }
    if isinstance(image, str):
        container["image"] = image
    resources = model.get("resources") if isinstance(model.get("resources"), Mapping) else None
    resources = resources or runtime_container.get("resources")
    if isinstance(resources, Mapping):
        container["resources"] = dict(resources)
    pod_spec: dict[str, Any] = {k: predictor[k] for k in _POD_FIELDS if k in predictor}
    pod_spec["containers"] = [container]
    view = PlatformView(
        platform=PLATFORM,
        template=PodTemplateRef(
            # spec.predictor.annotations reach the predictor's pods only (ComponentExtensionSpec, KServe >= 0.11);
            # the InferenceService's own annotations also reach its transformer and explainer pods.
            name="predictor",
            metadata_path=("spec", "predictor"),
            spec_path=("spec", "predictor"),
            group_size=group_size,
        ),
        pod_spec=pod_spec,
        targets={
            0: ArgsTarget(
                path=("spec", "predictor", "model", "args"),
                exists=isinstance(model.get("args"), list),
                positions=tuple(positions),
            )
        },
        group_gpus=group_gpus,
    )
    return PlatformRead(platform=PLATFORM, views=[view])


def _max_length_words(args: Sequence[str]) -> list[tuple[str, int]]:
    """huggingfaceserver's own ``--max_length X`` (``dest="max_model_len"``, python/huggingfaceserver
    ``__main__.py``): vLLM's ``max_model_len``, as ``--max-model-len`` at the same places (before: set aside as
    the server's flag, so the model's whole context was planned and a smaller one "filled" over it)."""
    out: list[tuple[str, int]] = []
    for i, word in enumerate(args):
        if word.startswith("--max_length="):
            out.append(("--max-model-len=" + word.partition("=")[2], i))
        elif word == "--max_length" and i + 1 < len(args):
            out += [("--max-model-len", i), (args[i + 1], i + 1)]
    return out


def _without_model(kept: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Drop ``--model X`` / ``--model=X`` (the model is planned from the Hugging Face id)."""
    out: list[tuple[str, int]] = []
    skip_next = False
    for word, index in kept:
        if skip_next:
            skip_next = False
            continue
        if word == "--model":
            skip_next = True
            continue
        if word.startswith("--model="):
            continue
        out.append((word, index))
    return out


def _runtime(name: str | None, model_format: str, runtimes: Runtimes) -> Mapping[str, Any] | None:
    if name:
        return runtimes.get(name)
    candidates = []
    for runtime_name, runtime in sorted(runtimes.items()):
        for supported in listed(runtime.get("supportedModelFormats")):
            if not isinstance(supported, Mapping) or str(supported.get("name", "")).lower() != model_format:
                continue
            if supported.get("autoSelect") is True:
                value = supported.get("priority")
                priority: int = value if isinstance(value, int) else 0
                candidates.append((-priority, runtime_name, runtime))
    return min(candidates, key=lambda c: (c[0], c[1]))[2] if candidates else None


def _runtime_container(runtime: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = [c for c in listed(runtime.get("containers")) if isinstance(c, Mapping)]
    for container in containers:
        if container.get("name") == "kserve-container":
            return container
    return containers[0] if containers else {}


def _launcher(command: list[str], args: list[str], image: Any, model_format: str, builtin: bool) -> str | None:
    """How the merged container starts: vLLM itself ("vllm-argv"), a server that wraps vLLM's engine
    ("wrapper"), the huggingface server forced to its transformers backend, or None (unknown). ``args``:
    the runtime's and then the user's, as the container gets them."""
    if command and locate(command + args) is not None:
        return "vllm-argv"
    backend = flag_value(args, "backend")
    image_text = str(image or "").lower()
    wraps = "huggingfaceserver" in image_text or "vllmserver" in image_text or "vllm" in image_text
    if builtin and model_format in LLM_FORMATS:
        wraps = True
    if not wraps:
        return None
    if backend is not None and backend.lower() not in ("vllm", "auto"):
        return "huggingface-backend"
    return "wrapper"


def _expand(word: str, meta: Mapping[str, Any]) -> str:
    def value(match: Any) -> str:  # a re2 match
        key = match.group(1)
        if key == "Name":
            return str(meta.get("name") or "")
        if key == "Namespace":
            return str(meta.get("namespace") or "")
        section, _, item = key.partition(".")
        return str(mapping(meta.get(section.lower())).get(item, ""))

    return str(_TEMPLATE.sub(value, word))


def _env(value: Any) -> list[dict[str, Any]]:
    return [dict(e) for e in value if isinstance(e, Mapping)] if isinstance(value, list) else []
