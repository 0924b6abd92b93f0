"""KServe ``LLMInferenceService`` (serving.kserve.io/v1alpha1, v1alpha2), read the way KServe builds it.

kserve/kserve ``pkg/controller/v1alpha2/llmisvc/config_merge.go`` (``combineBaseRefsConfig``, at
aaac4e29) builds each workload from three layers, merged in this order with a strategic merge patch
(``mergeSpecs``: maps merged, ``containers`` / ``env`` / ``volumes`` merged by name, other lists such as
``command`` and ``args`` replaced, unset and zero fields ignored):

1. the well-known presets KServe picks from what the service (with its baseRefs) asks for:
   ``config-llm-template`` (single node), ``config-llm-worker-data-parallel`` (``worker`` with data
   parallelism), their ``-prefill-`` / ``-decode-`` forms when ``spec.prefill`` is set
   (``config/llmisvcconfig/*.yaml``);
2. the service's ``spec.baseRefs``: user ``LLMInferenceServiceConfig`` presets, looked up by name in the
   service's namespace, then in KServe's (``kserve``);
3. the service's own spec.

The merged config is then rendered as a Go template (``ReplaceVariables``) whose data is the service with
its **own** spec (only ``spec.model.name`` is taken from the presets): a preset's ``parallelism`` is merged
into the workload (GPU group sizes) but the well-known templates render ``--tensor-parallel-size``,
``--enable-expert-parallel``, ``--data-parallel-size`` from the service's own ``spec.parallelism``
(KServe's config_merge_test "prefill via base ref only" shows templates reading the service's fields).

The well-known presets run ``vllm serve /mnt/models --served-model-name <name> --port 8000`` in container
``main`` (``/mnt/models`` is where the storage initializer puts ``spec.model.uri``), then
``--tensor-parallel-size`` (single node: ``parallelism.tensor``; data parallel: also
``--enable-expert-parallel`` for ``parallelism.expert``, ``--data-parallel-size``,
``--data-parallel-size-local``), then ``$VLLM_ADDITIONAL_ARGS`` and the container's ``args`` (``"$@"``).
kv-planner rebuilds that command line rather than reading the presets' bash scripts. A ``command`` the
service or one of its presets gives for ``main`` replaces the preset's (and its ``args`` too), and is
read as written, template field references (``{{ .Spec.Model.Name }}``) filled in.

``planner check`` reads presets in its input; the webhook reads none: a service whose baseRefs cannot be
read is planned without them and is never denied for it (KVP078), as the preset may change anything.

No field can be changed safely (release-dependent preset templates, a shell string in
``VLLM_ADDITIONAL_ARGS``), so changes are reported as warnings. The plan annotations go to
``spec.annotations`` (``spec.prefill.annotations`` for the prefill role), which KServe copies to the pods
(``utils.PropagateMap(llmSvc.Spec.Annotations, ...)`` in workload_single_node.go / workload_multi_node.go).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import re2

from planner.k8s.gpus import gpu_request
from planner.k8s.images import image_release
from planner.k8s.platforms.base import (
    PlatformNote,
    PlatformRead,
    PlatformView,
    listed,
    mapping,
    model_from_uri,
    non_gpu_accelerator,
    strings,
)
from planner.k8s.workloads import PodTemplateRef

PLATFORM = "kserve-llmisvc"
ADDITIONAL_ARGS = "VLLM_ADDITIONAL_ARGS"
MODEL_DIR = "/mnt/models"  # KServe constants.DefaultModelLocalMountPath
SYSTEM_NAMESPACE = "kserve"  # KServe constants.KServeNamespace (POD_NAMESPACE of the controller)
MAX_BASE_REFS = 32  # presets merged per service (each merge is linear in the preset's size)
NO_WRITE = (
    "KServe builds vLLM's command line from its preset templates: add them to VLLM_ADDITIONAL_ARGS of the main "
    "container in spec.template"
)
NO_WRITE_COMMAND = "the main container's command is a user's ({where}): add them there"
PRESET_TEXT = (
    "an LLMInferenceServiceConfig preset: planner check reads it with each LLMInferenceService of the same "
    "input that names it in spec.baseRefs; the webhook reads no presets (those services get KVP078)"
)
# Well-known presets (config_merge.go WellKnownDefaultConfigs, and the pipeline-parallel names it also
# resolves): their content is what kv-planner rebuilds, so naming one in baseRefs changes nothing here.
_WELL_KNOWN = (
    "config-llm-template",
    "config-llm-decode-template",
    "config-llm-prefill-template",
    "config-llm-worker-data-parallel",
    "config-llm-decode-worker-data-parallel",
    "config-llm-prefill-worker-data-parallel",
    "config-llm-worker-pipeline-parallel",
    "config-llm-decode-worker-pipeline-parallel",
    "config-llm-prefill-worker-pipeline-parallel",
    "config-llm-scheduler",
    "config-llm-router-route",
    "config-llm-scheduler-latency-predictor",
    "config-llm-tokenizer",
    "config-llm-tracing",
)
# Lists of a PodSpec / Container merged by key (core/v1 patchMergeKey); other lists are replaced.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}
_ACTION = re2.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")
_FIELD = re2.compile(r"^\.[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)*$")
_JSON_NAMES = {"URI": "uri", "ObjectMeta": "metadata"}

Presets = Mapping[tuple[str | None, str], Mapping[str, Any]]
"""(namespace or None, name) -> ``LLMInferenceServiceConfig`` ``spec``."""


def presets_from_documents(documents: Sequence[Any]) -> dict[tuple[str | None, str], dict[str, Any]]:
    """The LLMInferenceServiceConfig presets of ``planner check``'s input."""
    found: dict[tuple[str | None, str], dict[str, Any]] = {}
    for doc in documents:
        if not isinstance(doc, Mapping) or doc.get("kind") != "LLMInferenceServiceConfig":
            continue
        if not str(doc.get("apiVersion", "")).startswith("serving.kserve.io/"):
            continue
        meta = mapping(doc.get("metadata"))
        name, namespace = meta.get("name"), meta.get("namespace")
        if isinstance(name, str) and isinstance(doc.get("spec"), Mapping):
            found[(namespace if isinstance(namespace, str) else None, name)] = dict(doc["spec"])
    return found


def read(obj: Mapping[str, Any], presets: Presets | None = None) -> PlatformRead:
    if obj.get("kind") == "LLMInferenceServiceConfig":
        return PlatformRead(platform=PLATFORM, notes=[PlatformNote(reason="template-only", text=PRESET_TEXT)])
    meta = mapping(obj.get("metadata"))
    own = mapping(obj.get("spec"))
    notes: list[PlatformNote] = []
    applied, missing, unread = _base_refs(own, meta, presets)
    if missing or unread:
        notes.append(_missing_note(missing, unread, presets is None, meta))
    merged: Mapping[str, Any] = {}
    for _, preset in applied:
        merged = merge(merged, preset)
    merged = merge(merged, own)
    model_spec = mapping(merged.get("model"))
    uri = model_spec.get("uri")
    # (spec.model.name: the last preset naming one wins over the service's own, as in combineBaseRefsConfig)
    named = _resolved_model_name(own, [p for _, p in applied])
    served = named or str(meta.get("name") or "")  # LLMInferenceService.SetDefaults: the service's name
    model = (model_from_uri(uri) if _is_hf(uri) else None) or named
    if not model:
        return PlatformRead(
            platform=PLATFORM, notes=[*notes, PlatformNote(reason="no-model", text="spec.model names no model")]
        )
    # What the templates see: the service's own spec, with the model name the presets resolved.
    data = {"Spec": {**own, "model": {**mapping(own.get("model")), "name": served}}, "ObjectMeta": meta}
    views: list[PlatformView] = []
    roles: list[tuple[str, tuple[str, ...], Mapping[str, Any], Mapping[str, Any]]] = [("main", ("spec",), merged, own)]
    if isinstance(merged.get("prefill"), Mapping):
        roles.append(("prefill", ("spec", "prefill"), merged["prefill"], mapping(own.get("prefill"))))
    for role, base, role_spec, own_role in roles:
        view = _role_view(role, base, role_spec, own_role, model, served, data, applied, notes)
        if view is not None:
            views.append(view)
    return PlatformRead(platform=PLATFORM, views=views, notes=notes)


def _role_view(
    role: str,
    base: tuple[str, ...],
    role_spec: Mapping[str, Any],
    own_role: Mapping[str, Any],
    model: str,
    served: str,
    data: Mapping[str, Any],
    applied: list[tuple[str, Mapping[str, Any]]],
    notes: list[PlatformNote],
) -> PlatformView | None:
    template = mapping(role_spec.get("template"))
    containers = [c for c in listed(template.get("containers")) if isinstance(c, Mapping)]
    main = next((c for c in containers if c.get("name") == "main"), {})
    accelerator = non_gpu_accelerator(main.get("resources"))
    if accelerator:
        notes.append(PlatformNote(reason="non-gpu-accelerator", where=role, text=f"{accelerator}: not planned"))
        return None
    merged_parallelism = mapping(role_spec.get("parallelism"))
    own_parallelism = mapping(own_role.get("parallelism"))
    worker = role_spec.get("worker") if isinstance(role_spec.get("worker"), Mapping) else None
    data_parallel = bool(_positive(merged_parallelism, "data") or _positive(merged_parallelism, "dataLocal"))
    pipeline = worker is not None and not data_parallel and _positive(merged_parallelism, "pipeline")
    env = [dict(e) for e in listed(main.get("env")) if isinstance(e, Mapping)]
    command = strings(main.get("command"))
    args = strings(main.get("args")) or []
    no_write = NO_WRITE
    if command:
        # The user's own command line (the service's spec.template or a preset's) replaces the preset's.
        where = _command_source(role, own_role, applied)
        no_write = NO_WRITE_COMMAND.format(where=where)
        rendered, actions = _render([*command, *args], data)
        if actions and any("vllm" in w.lower() for w in rendered):  # (llm-d's simulator is not planned anyway)
            notes.append(
                PlatformNote(
                    reason="unreadable-config",
                    where=role,
                    text=f"Go template actions KServe renders are not evaluated here: {actions[0][:60]}",
                )
            )
        words = [_model_dir(w, model) for w in rendered]
        container: dict[str, Any] = {"name": _name(role), "command": words[: len(command)]}
        container["args"] = words[len(command) :]
        container["env"] = env
    else:
        if merged_parallelism and merged_parallelism != own_parallelism:
            notes.append(_parallelism_note(role, own_parallelism, applied))
        words = ["vllm", "serve", model, "--served-model-name", served]
        words += _parallel_words(own_parallelism, data_parallel=worker is not None and data_parallel)
        if pipeline:
            # KServe ships no pipeline-parallel preset (config_merge.go lists only the single-node, worker and
            # data-parallel ones): planned as vLLM needs it run, over the group's pods.
            words += _pipeline_words(merged_parallelism)
        extra = next((e for e in env if e.get("name") == ADDITIONAL_ARGS), None)
        if extra is not None and isinstance(extra.get("value"), str):
            try:
                words += shlex.split(extra["value"])
            except ValueError:
                notes.append(PlatformNote(reason="unreadable-config", where=role, text=f"{ADDITIONAL_ARGS} unreadable"))
        rendered, _ = _render(args, data)
        words += [_model_dir(w, model) for w in rendered]  # the preset ends with "$@": the container's args
        container = {
            "name": _name(role),
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
    size = _group_size(merged_parallelism, data_parallel) if worker is not None else 1
    return PlatformView(
        platform=PLATFORM,
        # spec.annotations (spec.prefill.annotations) are copied to the role's pods: utils.PropagateMap in
        # workload_single_node.go (KServe >= 0.17) and workload_multi_node.go (>= 0.20).
        template=PodTemplateRef(name=role, metadata_path=base, spec_path=(*base, "template"), group_size=size),
        pod_spec=pod_spec,
        no_write=no_write,
        group_gpus=_group_gpus(main, worker, size) if worker is not None else None,
        stated_version=image_release(image),
    )


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` strategic-merged onto ``base`` (KServe ``mergeSpecs``): maps are merged key by key,
    lists of containers / env / volumes / ports by their merge key, other lists and scalars replaced;
    unset values of ``override`` (null, false, "", [], {}) leave ``base`` as it is (omitempty fields are
    not in the patch KServe builds)."""
    out = dict(base)
    for key, value in override.items():
        if _unset(value):
            continue
        current = out.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            out[key] = merge(current, value)
        elif isinstance(value, list) and isinstance(current, list) and key in _MERGE_KEYS:
            out[key] = _merge_list(current, value, _MERGE_KEYS[key])
        else:
            out[key] = value
    return out


def _merge_list(base: list[Any], override: list[Any], key: str) -> list[Any]:
    if not all(isinstance(item, Mapping) and key in item for item in (*base, *override)):
        return override
    out = list(base)
    for item in override:
        index = next((i for i, existing in enumerate(out) if existing[key] == item[key]), None)
        if index is None:
            out.append(item)
        else:
            out[index] = merge(out[index], item)
    return out


def _unset(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, (str, list, Mapping)) and not value)


def _base_refs(
    own: Mapping[str, Any], meta: Mapping[str, Any], presets: Presets | None
) -> tuple[list[tuple[str, Mapping[str, Any]]], list[str], int]:
    """(the presets found, in baseRefs order; the names not found; refs past the bound, unread)."""
    refs = [r.get("name") for r in listed(own.get("baseRefs")) if isinstance(r, Mapping)]
    names = [n for n in refs if isinstance(n, str) and n and not n.endswith(_WELL_KNOWN)]
    unread = max(0, len(names) - MAX_BASE_REFS)
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
    applied: list[tuple[str, Mapping[str, Any]]] = []
    missing: list[str] = []
    for name in names[:MAX_BASE_REFS]:
        found = None
        for key in ((namespace, name), (None, name), (SYSTEM_NAMESPACE, name)):
            if presets is not None and key in presets:
                found = presets[key]
                break
        if found is None:
            missing.append(name)
        else:
            applied.append((name, found))
    return applied, missing, unread


def _missing_note(missing: list[str], unread: int, no_presets: bool, meta: Mapping[str, Any]) -> PlatformNote:
    shown = ", ".join(n[:63] for n in missing[:3]) + (", ..." if len(missing) > 3 else "")
    if no_presets:
        where = "kv-planner reads no LLMInferenceServiceConfig here (planner check reads those in its input)"
    else:
        namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
        where = f"not in the input (namespace {namespace[:63] if namespace else 'unset'} or {SYSTEM_NAMESPACE})"
    text = f"spec.baseRefs preset {shown}: {where}" if missing else ""
    if unread:
        text = (text + "; " if text else "") + f"{unread} baseRefs past the first {MAX_BASE_REFS} not read"
    text += ": planned without it; a preset can change the model, command and GPUs, so nothing is denied"
    return PlatformNote(reason="preset-not-read", text=text)


def _parallelism_note(
    role: str, own_parallelism: Mapping[str, Any], applied: list[tuple[str, Mapping[str, Any]]]
) -> PlatformNote:
    names = ", ".join(n[:63] for n, _ in applied[:3]) or "a preset"
    tensor = own_parallelism.get("tensor") if _positive(own_parallelism, "tensor") else 1
    text = (
        f"parallelism from preset {names} sizes the pods but is not passed to vLLM: KServe renders "
        f"--tensor-parallel-size and the data/expert flags from the LLMInferenceService's own "
        f"spec.{'prefill.' if role == 'prefill' else ''}parallelism (planned as KServe runs it: TP {tensor}); "
        "set it there"
    )
    return PlatformNote(reason="preset-not-passed", where=role, text=text)


def _resolved_model_name(own: Mapping[str, Any], applied: list[Mapping[str, Any]]) -> str | None:
    name = mapping(own.get("model")).get("name")
    for preset in applied:
        value = mapping(preset.get("model")).get("name")
        if isinstance(value, str) and value:
            name = value
    return name if isinstance(name, str) and name else None


def _command_source(role: str, own_role: Mapping[str, Any], applied: list[tuple[str, Mapping[str, Any]]]) -> str:
    spec_path = "spec.prefill.template" if role == "prefill" else "spec.template"
    if _main_has_command(mapping(own_role.get("template"))):
        return spec_path
    for name, preset in reversed(applied):
        section = mapping(preset.get("prefill")) if role == "prefill" else preset
        if _main_has_command(mapping(section.get("template"))):
            return f"preset {name[:63]}"
    return spec_path


def _main_has_command(template: Mapping[str, Any]) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("name") == "main" and bool(strings(c.get("command")))
        for c in listed(template.get("containers"))
    )


def _render(words: list[str], data: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """Field references (``{{ .Spec.Model.Name }}``, ``{{ .ObjectMeta.Namespace }}``) filled in as KServe's
    ReplaceVariables does; other actions (``if``, function calls) are dropped and returned."""
    others: list[str] = []

    def value(match: Any) -> str:  # a re2 match
        action = str(match.group(1))
        if _FIELD.match(action):
            return _field(data, action[1:].split("."))
        others.append(action)
        return ""

    return [str(_ACTION.sub(value, w)) if "{{" in w else w for w in words], others


def _field(data: Mapping[str, Any], path: list[str]) -> str:
    if path[0] in ("Name", "Namespace"):  # promoted from the embedded ObjectMeta
        path = ["ObjectMeta", *path]
    node: Any = data
    for part in path:
        key = part if part in ("Spec", "ObjectMeta") else _JSON_NAMES.get(part, part[:1].lower() + part[1:])
        node = node.get(key) if isinstance(node, Mapping) else None
    if node is None or isinstance(node, (Mapping, list)):
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def _model_dir(word: str, model: str) -> str:
    """``/mnt/models`` (where KServe puts ``spec.model.uri``) as the model it holds, also inside a shell string."""
    if MODEL_DIR not in word:
        return word
    out = []
    for part in re2.split(r"(\s+)", word):
        bare = part.strip("\"'")
        if bare in (MODEL_DIR, f"--model={MODEL_DIR}"):
            out.append(part.replace(MODEL_DIR, model))
        else:
            out.append(part)
    return "".join(out)


def _name(role: str) -> str:
    return "main" if role == "main" else f"{role}/main"


def _is_hf(uri: Any) -> bool:
    return isinstance(uri, str) and uri.lower().startswith("hf://")


def _positive(parallelism: Mapping[str, Any], key: str) -> int | None:
    value = parallelism.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _parallel_words(parallelism: Mapping[str, Any], *, data_parallel: bool) -> list[str]:
    """The flags KServe's preset templates render from ``parallelism`` (config/llmisvcconfig): the single-node
    templates only ``--tensor-parallel-size``; the data-parallel ones also expert and data parallelism."""
    words: list[str] = []
    tensor = _positive(parallelism, "tensor")
    if data_parallel and parallelism.get("expert") is True:
        words.append("--enable-expert-parallel")
    if tensor:
        words += ["--tensor-parallel-size", str(tensor)]
    if data_parallel:
        words += ["--data-parallel-size", str(_positive(parallelism, "data") or 1)]
        words += ["--data-parallel-size-local", str(_positive(parallelism, "dataLocal") or 1)]
    return words


def _pipeline_words(parallelism: Mapping[str, Any]) -> list[str]:
    pipeline = _positive(parallelism, "pipeline")
    return ["--pipeline-parallel-size", str(pipeline)] if pipeline else []


def _group_size(parallelism: Mapping[str, Any], data_parallel: bool) -> int:
    """Pods of the LeaderWorkerSet (ParallelismSpec.GetSize): data / dataLocal, else pipeline."""
    if data_parallel:
        return max((_positive(parallelism, "data") or 1) // (_positive(parallelism, "dataLocal") or 1), 1)
    return _positive(parallelism, "pipeline") or 1


def _group_gpus(main: Mapping[str, Any], worker: Mapping[str, Any], size: int) -> int | None:
    """GPUs of the group: the leader's plus (size - 1) workers' (``spec.worker``'s main container)."""
    _, leader = gpu_request(main)
    if leader is None:
        return None
    workers = [c for c in listed(worker.get("containers")) if isinstance(c, Mapping) and c.get("name") == "main"]
    _, per_worker = gpu_request(workers[0]) if workers else (None, None)
    return leader + (size - 1) * (per_worker if per_worker is not None else leader)
