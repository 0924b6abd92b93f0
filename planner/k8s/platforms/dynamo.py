"""NVIDIA Dynamo ``DynamoGraphDeployment`` (nvidia.com/v1alpha1 and v1beta1) with vLLM workers.

v1alpha1 keeps each component in the map ``spec.services``: its pods' main container is
``extraPodSpec.mainContainer`` (ai-dynamo/dynamo deploy/cloud/operator, ``DynamoComponentDeploymentSharedSpec``),
the GPUs are the service's own ``resources.limits.gpu`` (the operator turns it into ``nvidia.com/gpu``).
v1beta1 (the storage version; deploy/operator/api/v1beta1) keeps them in the list ``spec.components``,
each with a native ``podTemplate`` whose container ``main`` receives the operator's defaults; ``spec.env``
is prepended to every component's environment. In both, ``multinode.nodeCount`` pods form one group, and
the ``device`` field (``resources``, ``nodeSelector``, ``tolerations``, ``schedulerName``: Dynamo's
vendor-neutral way to ask for HAMi slices, AMD or Intel devices, ai-dynamo/dynamo#10716) is copied into
the pod: its resources into the main container (authoritative over the container's own), the rest into
the pod spec.

A vLLM worker runs ``python3 -m dynamo.vllm`` with vLLM's engine flags plus Dynamo's own
(``--is-prefill-worker``, ``--connector``, ...; dynamo components/src/dynamo/vllm/args.py adds
``AsyncEngineArgs`` to its parser), either as an argv list (``command: [python3, -m, dynamo.vllm]``,
``args: [--model, X]``) or as one shell string in ``args`` (older examples: ``python3 -m dynamo.vllm
--model X 2>&1 | tee /tmp/vllm.log``). Other containers of a v1beta1 pod template are read as they are
(``vllm serve`` in an engine container beside a Dynamo sidecar).

Changes go into the container's ``args`` for the argv form; shell strings are not edited (a warning
names the flags to add). The image (``nvcr.io/nvidia/ai-dynamo/vllm-runtime:<dynamo release>``)
carries Dynamo's version, not vLLM's: unknown unless annotated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from planner.errors import UnreadableScriptError
from planner.k8s.gpus import gpu_request
from planner.k8s.images import image_release
from planner.k8s.platforms.base import (
    ArgsTarget,
    PlatformNote,
    PlatformRead,
    PlatformView,
    listed,
    mapping,
    own_args_target,
    strings,
)
from planner.k8s.platforms.launcher import flag_value, vllm_words
from planner.k8s.shell import parse_script, shell_script
from planner.k8s.workloads import PodTemplateRef

PLATFORM = "dynamo"
SHELL_NO_WRITE = "the worker's command is a shell string"
_OTHER_ENGINES = ("dynamo.sglang", "dynamo.trtllm", "dynamo.llama_cpp", "dynamo.mistralrs")
MAIN_CONTAINER = "main"  # v1beta1: the podTemplate container that gets the operator's defaults
MAX_COMPONENTS = 64  # v1beta1 components read from one object (Dynamo's CRD allows 25)


def _module_start(words: Sequence[str]) -> int | None:
    """Index after ``-m dynamo.vllm`` in ``words``."""
    for i in range(len(words) - 1):
        if words[i] == "-m" and words[i + 1] == "dynamo.vllm":
            return i + 2
    return None


def read(obj: Mapping[str, Any]) -> PlatformRead:
    spec = mapping(obj.get("spec"))
    views: list[PlatformView] = []
    notes: list[PlatformNote] = []
    services = mapping(spec.get("services"))  # v1alpha1
    for name in sorted(k for k in services if isinstance(k, str)):
        view = _service_view(name, mapping(services[name]), notes)
        if view is not None:
            views.append(view)
    components = listed(spec.get("components"))  # v1beta1
    graph_env = [dict(e) for e in listed(spec.get("env")) if isinstance(e, Mapping)]
    for index, component in enumerate(components[:MAX_COMPONENTS]):
        view = _component_view(index, mapping(component), graph_env, notes)
        if view is not None:
            views.append(view)
    if len(components) > MAX_COMPONENTS:
        text = f"{len(components)} components: only the first {MAX_COMPONENTS} are checked"
        notes.append(PlatformNote(reason="unsupported-kind", text=text))
    return PlatformRead(platform=PLATFORM, views=views, notes=notes)


class _Worker(NamedTuple):
    """A ``dynamo.vllm`` command line as vLLM would receive it."""

    words: list[str]  # vllm serve MODEL <engine flags>
    positions: tuple[int | None, ...]  # each word's index in the container's args (None: not there)
    no_write: str | None
    engine_config: str | None = None  # --engine-config-json FILE


def _worker(container: Mapping[str, Any], where: str, notes: list[PlatformNote]) -> _Worker | None:
    """The vLLM command line of a container running ``dynamo.vllm`` (None for any other container;
    a note when it runs another of Dynamo's engines or its command line cannot be read: see
    :func:`_noted`)."""
    command = strings(container.get("command")) or []
    args = strings(container.get("args")) or []
    text = " ".join(command + args)
    if "dynamo.vllm" not in text:
        if any(engine in text for engine in _OTHER_ENGINES):
            notes.append(PlatformNote(reason="not-vllm", where=where, text="worker runs another engine"))
        return None
    words, offset, no_write = _vllm_part(command, args)
    if words is None:
        notes.append(PlatformNote(reason="no-model", where=where, text="dynamo.vllm command line not read"))
        return None
    model = flag_value(words, "model")
    if model is None:
        notes.append(PlatformNote(reason="no-model", where=where, text="dynamo.vllm without --model"))
        return None
    kept = [(w, i) for w, i in vllm_words(words, None) if not _is_model(words, i)]
    head = ["vllm", "serve", model]
    # Dynamo's --engine-config-json FILE: a JSON object of vLLM engine arguments by dest name, made the
    # argparse Namespace vLLM's parser starts from, so flags on the command line win and a `false` is
    # dest = False in every release (args.py _load_engine_config_json). Read as that namespace
    # (PlatformView.engine_namespace_files; from a ConfigMap by planner check; elsewhere KVP031, not checked).
    # Before: read as vLLM's --config, whose words drop a `false` before 0.33 (chunked prefill then planned on).
    engine_config = flag_value(words, "engine-config-json") or None
    positions: list[int | None] = [None] * len(head)
    positions += [i - offset if no_write is None and i >= offset else None for _, i in kept]
    words_out = head + [w for w, _ in kept]
    return _Worker(words=words_out, positions=tuple(positions), no_write=no_write, engine_config=engine_config)


def _noted(container: Mapping[str, Any]) -> bool:
    """Whether :func:`_worker` has a note for ``container`` (a Dynamo engine module it does not plan)."""
    text = " ".join((strings(container.get("command")) or []) + (strings(container.get("args")) or []))
    return any(engine in text for engine in (*_OTHER_ENGINES, "dynamo.vllm"))


def _service_view(name: str, service: Mapping[str, Any], notes: list[PlatformNote]) -> PlatformView | None:
    """v1alpha1: one entry of ``spec.services``."""
    extra = mapping(service.get("extraPodSpec"))
    main = mapping(extra.get("mainContainer"))
    worker = _worker(main, name, notes)
    if worker is None:
        return None
    container: dict[str, Any] = {
        "name": name,
        "command": worker.words[:2],
        "args": worker.words[2:],
        "env": [dict(e) for e in listed(service.get("envs")) if isinstance(e, Mapping)],
    }
    if isinstance(main.get("volumeMounts"), list):  # (files it reads: --engine-config-json from a ConfigMap)
        container["volumeMounts"] = main["volumeMounts"]
    image = main.get("image") if isinstance(main.get("image"), str) else None
    if image:
        container["image"] = image
    count = _gpu_count(service.get("resources"))
    limits = {"nvidia.com/gpu": str(count)} if count is not None else {}
    device = mapping(service.get("device"))
    limits.update(_device_resources(device))
    if limits:
        container["resources"] = {"limits": limits}
    nodes = mapping(service.get("multinode")).get("nodeCount")
    group = nodes if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 1 else 1
    pod_spec = _with_device({k: v for k, v in extra.items() if k != "mainContainer"}, device)
    pod_spec["containers"] = [container]
    base = ("spec", "services", name, "extraPodSpec", "mainContainer")
    targets = {}
    if worker.no_write is None:
        targets[0] = ArgsTarget(
            path=(*base, "args"), exists=isinstance(main.get("args"), list), positions=worker.positions
        )
    _, per_pod = gpu_request(container)
    return PlatformView(
        platform=PLATFORM,
        template=PodTemplateRef(
            # extraPodMetadata.annotations are added to the service's pods (Dynamo's operator; the graph's
            # own annotations are not)
            name=name,
            metadata_path=("spec", "services", name, "extraPodMetadata"),
            spec_path=("spec", "services", name),
            group_size=group,
        ),
        pod_spec=pod_spec,
        targets=targets,
        no_write=worker.no_write,
        engine_namespace_files={0: worker.engine_config} if worker.engine_config else {},
        group_gpus=per_pod * group if per_pod is not None and group > 1 else None,
        stated_version=image_release(image),
    )


def _component_view(
    index: int, component: Mapping[str, Any], graph_env: list[dict[str, Any]], notes: list[PlatformNote]
) -> PlatformView | None:
    """v1beta1: one entry of ``spec.components``, whose ``podTemplate`` is a real PodTemplateSpec.

    Read as it is unless the operator changes what its containers run: a ``dynamo.vllm`` worker is
    rebuilt as the ``vllm serve`` it amounts to, ``device`` and ``spec.env`` are merged in. Changes to a
    rebuilt pod still go to the user's own lists (each container's ``args``)."""
    name = component.get("name")
    name = name[:63] if isinstance(name, str) and name else f"#{index}"
    template = mapping(component.get("podTemplate"))
    pod = mapping(template.get("spec"))
    containers = listed(pod.get("containers"))
    if not containers:
        return None
    base = ("spec", "components", str(index), "podTemplate")
    nodes = mapping(component.get("multinode")).get("nodeCount")
    group = nodes if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 1 else 1
    ref = PodTemplateRef(name=name, metadata_path=(*base, "metadata"), spec_path=(*base, "spec"), group_size=group)
    device = mapping(component.get("device"))
    # The operator gives a `main` container without a command its own (`python3 -m dynamo.frontend`
    # for a frontend): the image's entrypoint does not run there.
    entrypoint = not any(
        isinstance(raw, Mapping) and raw.get("name") == MAIN_CONTAINER and raw.get("command") is None
        for raw in containers
    )
    workers: dict[int, _Worker] = {}
    noted: set[int] = set()  # other engines, unreadable dynamo.vllm lines: named already
    for j, raw in enumerate(containers):
        if isinstance(raw, Mapping):
            worker = _worker(raw, f"{name}/{str(raw.get('name') or j)[:63]}", notes)
            if worker is not None:
                workers[j] = worker
            elif _noted(raw):
                noted.add(j)
    if not workers and not noted and not device and not graph_env:
        # the pod template as the user wrote it
        return PlatformView(platform=PLATFORM, template=ref, image_entrypoint=entrypoint)
    main = _main_index(containers, workers)
    rebuilt: list[Any] = []
    targets: dict[int, ArgsTarget] = {}
    shell = False
    for j, raw in enumerate(containers):
        if not isinstance(raw, Mapping):
            rebuilt.append(raw)
            continue
        if j in noted:  # said once (KVP066 / KVP065), not again as a command kv-planner cannot read
            rebuilt.append({"name": raw.get("name")})
            continue
        container = dict(raw)
        if graph_env:  # the component's own entries come later and win
            container["env"] = graph_env + [dict(e) for e in listed(raw.get("env")) if isinstance(e, Mapping)]
        if j == main and device:
            container["resources"] = _device_merged(raw.get("resources"), _device_resources(device))
        path = (*base, "spec", "containers", str(j), "args")
        worker = workers.get(j)
        target: ArgsTarget | None
        if worker is not None:
            container["command"], container["args"] = worker.words[:2], worker.words[2:]
            exists = isinstance(raw.get("args"), list)
            target = ArgsTarget(path=path, exists=exists, positions=worker.positions) if not worker.no_write else None
        else:
            target = own_args_target(raw, path)
        if target is not None:
            targets[j] = target
        else:
            shell = True
        rebuilt.append(container)
    pod_spec = _with_device(dict(pod), device)
    pod_spec["containers"] = rebuilt
    return PlatformView(
        platform=PLATFORM,
        template=ref,
        pod_spec=pod_spec,
        targets=targets,
        no_write=SHELL_NO_WRITE if shell else None,
        engine_namespace_files={j: w.engine_config for j, w in workers.items() if w.engine_config},
        image_entrypoint=entrypoint,
    )


def _main_index(containers: list[Any], workers: Mapping[int, _Worker]) -> int:
    """The container Dynamo's operator treats as the main one (named ``main``), else the first worker."""
    for j, raw in enumerate(containers):
        if isinstance(raw, Mapping) and raw.get("name") == MAIN_CONTAINER:
            return j
    return min(workers) if workers else 0


def _device_resources(device: Mapping[str, Any]) -> dict[str, str]:
    """``device.resources`` (a map of resource name to quantity) as container resource limits."""
    out: dict[str, str] = {}
    for key, value in mapping(device.get("resources")).items():
        if isinstance(key, str) and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            out[key] = str(value)
    return out


def _device_merged(resources: Any, device: Mapping[str, str]) -> dict[str, Any]:
    """The container's resources with ``device.resources`` authoritative for the keys it names."""
    merged = dict(mapping(resources))
    merged["limits"] = {**mapping(merged.get("limits")), **device}
    requests = dict(mapping(merged.get("requests")))
    if requests:
        merged["requests"] = {k: device.get(k, v) if isinstance(k, str) else v for k, v in requests.items()}
    return merged


def _with_device(pod_spec: dict[str, Any], device: Mapping[str, Any]) -> dict[str, Any]:
    """``pod_spec`` with ``device.nodeSelector`` (authoritative), ``tolerations`` and ``schedulerName``."""
    selector = mapping(device.get("nodeSelector"))
    if selector:
        pod_spec["nodeSelector"] = {**mapping(pod_spec.get("nodeSelector")), **selector}
    tolerations = listed(device.get("tolerations"))
    if tolerations:
        pod_spec["tolerations"] = listed(pod_spec.get("tolerations")) + tolerations
    if isinstance(device.get("schedulerName"), str):
        pod_spec["schedulerName"] = device["schedulerName"]
    return pod_spec


def _vllm_part(command: list[str], args: list[str]) -> tuple[list[str] | None, int, str | None]:
    """(the words from ``dynamo.vllm`` on, index of the first ``args`` word in them, no-write reason)."""
    words = command + args
    start = _module_start(words)
    script = shell_script(words)
    if script is None and not command and len(args) == 1 and " " in args[0]:
        script = args[0]  # the operator runs a lone args string with a shell
    if start is not None and script is None:
        return words[start:], len(command) - start, None
    if script is None:
        return None, 0, None
    try:
        shell_commands = parse_script(script, {})
    except UnreadableScriptError:
        return None, 0, None  # (a script bash would refuse, or nested past the bound: not read)
    for shell_command in shell_commands:
        begin = _module_start(shell_command.words)
        if begin is not None:
            return list(shell_command.words[begin:]), 0, SHELL_NO_WRITE
    return None, 0, None


def _is_model(words: Sequence[str], index: int) -> bool:
    word = words[index]
    if word == "--model" or word.startswith("--model="):
        return True
    return index > 0 and words[index - 1] == "--model"


def _gpu_count(resources: Any) -> int | None:
    for section in ("limits", "requests"):
        value = mapping(mapping(resources).get(section)).get("gpu")
        if value is None:
            continue
        try:
            count = int(str(value))
        except ValueError:
            return None
        return count if count >= 0 else None
    return None
