"""NVIDIA Dynamo ``DynamoGraphDeployment`` (nvidia.com/v1alpha1) with vLLM workers.

Each entry of ``spec.services`` becomes pods whose main container is ``extraPodSpec.mainContainer``
(ai-dynamo/dynamo deploy/cloud/operator, ``DynamoComponentDeploymentSharedSpec``); the GPUs are the
service's own ``resources.limits.gpu`` (the operator turns it into ``nvidia.com/gpu``) and
``multinode.nodeCount`` pods form one group. A vLLM worker runs ``python3 -m dynamo.vllm`` with vLLM's
engine flags plus Dynamo's own (``--is-prefill-worker``, ``--connector``, ...; dynamo
components/src/dynamo/vllm/args.py adds ``AsyncEngineArgs`` to its parser), either as an argv list
(``command: [python3, -m, dynamo.vllm]``, ``args: [--model, X]``) or as one shell string in ``args``
(older examples: ``python3 -m dynamo.vllm --model X 2>&1 | tee /tmp/vllm.log``).

Changes go into ``mainContainer.args`` for the argv form; shell strings are not edited (a warning
names the flags to add). The image (``nvcr.io/nvidia/ai-dynamo/vllm-runtime:<dynamo release>``)
carries Dynamo's version, not vLLM's: unknown unless annotated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from planner.k8s.images import image_release
from planner.k8s.platforms.base import (
    ArgsTarget,
    PlatformNote,
    PlatformRead,
    PlatformView,
    listed,
    mapping,
    strings,
)
from planner.k8s.platforms.launcher import flag_value, vllm_words
from planner.k8s.shell import parse_script, shell_script
from planner.k8s.workloads import PodTemplateRef

PLATFORM = "dynamo"
SHELL_NO_WRITE = "the worker's command is a shell string"
_OTHER_ENGINES = ("dynamo.sglang", "dynamo.trtllm", "dynamo.llama_cpp", "dynamo.mistralrs")


def _module_start(words: Sequence[str]) -> int | None:
    """Index after ``-m dynamo.vllm`` in ``words``."""
    for i in range(len(words) - 1):
        if words[i] == "-m" and words[i + 1] == "dynamo.vllm":
            return i + 2
    return None


def read(obj: Mapping[str, Any]) -> PlatformRead:
    services = mapping(mapping(obj.get("spec")).get("services"))
    views: list[PlatformView] = []
    notes: list[PlatformNote] = []
    for name in sorted(k for k in services if isinstance(k, str)):
        service = mapping(services[name])
        extra = mapping(service.get("extraPodSpec"))
        main = mapping(extra.get("mainContainer"))
        command = strings(main.get("command")) or []
        args = strings(main.get("args")) or []
        text = " ".join(command + args)
        if "dynamo.vllm" not in text:
            if any(engine in text for engine in _OTHER_ENGINES):
                notes.append(PlatformNote(reason="not-vllm", where=name, text="worker runs another engine"))
            continue
        words, offset, no_write = _vllm_part(command, args)
        if words is None:
            notes.append(PlatformNote(reason="no-model", where=name, text="dynamo.vllm command line not read"))
            continue
        model = flag_value(words, "model")
        if model is None:
            notes.append(PlatformNote(reason="no-model", where=name, text="dynamo.vllm without --model"))
            continue
        kept = [(w, i) for w, i in vllm_words(words, None) if not _is_model(words, i)]
        head = ["vllm", "serve", model]
        view_words = head + [w for w, _ in kept]
        positions: list[int | None] = [None] * len(head)
        positions += [i - offset if no_write is None and i >= offset else None for _, i in kept]
        container: dict[str, Any] = {
            "name": name,
            "command": view_words[:2],
            "args": view_words[2:],
            "env": [dict(e) for e in listed(service.get("envs")) if isinstance(e, Mapping)],
        }
        image = main.get("image") if isinstance(main.get("image"), str) else None
        if image:
            container["image"] = image
        count = _gpu_count(service.get("resources"))
        if count is not None:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(count)}}
        nodes = mapping(service.get("multinode")).get("nodeCount")
        group = nodes if isinstance(nodes, int) and nodes > 1 else 1
        pod_spec = {k: v for k, v in extra.items() if k != "mainContainer"}
        pod_spec["containers"] = [container]
        base = ("spec", "services", name, "extraPodSpec", "mainContainer")
        targets = {}
        if no_write is None:
            targets[0] = ArgsTarget(
                path=(*base, "args"), exists=isinstance(main.get("args"), list), positions=tuple(positions)
            )
        views.append(
            PlatformView(
                platform=PLATFORM,
                template=PodTemplateRef(
                    # extraPodMetadata.annotations are added to the service's pods (Dynamo's operator; the
                    # graph's own annotations are not)
                    name=name,
                    metadata_path=("spec", "services", name, "extraPodMetadata"),
                    spec_path=("spec", "services", name),
                    group_size=group,
                ),
                pod_spec=pod_spec,
                targets=targets,
                no_write=no_write,
                group_gpus=count * group if count is not None and group > 1 else None,
                stated_version=image_release(image),
            )
        )
    return PlatformRead(platform=PLATFORM, views=views, notes=notes)


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
    for shell_command in parse_script(script, {}):
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
