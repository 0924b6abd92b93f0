"""Find the containers of a pod spec that run vLLM, and read their command lines.

A container runs vLLM when its command line (``command`` + ``args``, after the kubelet's ``$(VAR)``
expansion) starts ``vllm serve`` or the OpenAI api_server module, directly or behind launchers
(``tini --``, ``uv run -m``: ``argv`` style), inside a ``sh -c`` script or an ``env -S`` string
(``shell`` style); or when it has no ``command`` and its image is a vLLM image, whose entrypoint is vLLM
(``image`` style: ``args`` only). Init containers and sidecars are not vLLM: only
``containers`` are read, and each by its own command line.

Only ``argv`` and ``image`` containers may be mutated: their words map one to one onto ``command`` /
``args`` entries. In a shell script a word's position depends on the shell, so those get warnings.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Literal

import re2
from pydantic import BaseModel, ConfigDict, Field

from planner.errors import InvalidArgumentError, UnreadableScriptError
from planner.k8s.envvars import container_env, expand_all, string_list, unknown_env_names
from planner.k8s.images import VersionEvidence, image_release
from planner.k8s.script_files import container_commands
from planner.k8s.shell import ShellCommand
from planner.vllm.argv import VllmCommand, find, locate, parse_args, parse_command
from planner.vllm.argv_table import flag_table
from planner.vllm.launchers import unwrap

Style = Literal["argv", "shell", "image"]
_UNRESOLVED_K8S = re2.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class VllmContainer(BaseModel):
    """One container that runs vLLM, with its parsed command line."""

    model_config = ConfigDict(frozen=True)

    index: int = Field(description="position in spec.containers")
    name: str
    image: str | None = None
    vllm_version: str | None = Field(default=None, description="X.Y.Z from evidence (images.py), else None")
    version_source: str | None = Field(default=None, description="official-image, derivative-image, annotation")
    style: Style
    command: VllmCommand | None = Field(default=None, description="None when the command line did not parse")
    parse_error: str | None = None
    words: list[str] = Field(default_factory=list, description="what vLLM receives, after expansion")
    command_len: int = Field(default=0, description="argv style: how many words come from `command`")
    has_args: bool = Field(default=False, description="the container has an `args` list")
    env: dict[str, str] = Field(default_factory=dict)
    unresolved: list[str] = Field(default_factory=list, description="variables with no value in the manifest")
    runtime: list[str] = Field(
        default_factory=list,
        description="shell style: text kept as written that only the running script gives a value "
        "(`$(cat /cfg/len)`, an array kv-planner does not model)",
    )
    servers: int = Field(default=1, description="shell style: the vLLM servers the script starts (one is read)")
    servers_conditional: bool = Field(
        default=False, description="shell style: some of those servers are in branches or loops (one of them runs)"
    )


def image_version(image: str | None) -> str | None:
    """The vLLM release ``image`` runs as X.Y.Z, only from evidence (:mod:`planner.k8s.images`)."""
    evidence = image_release(image)
    return evidence.version if evidence else None


def is_vllm_image(image: str | None) -> bool:
    if not image:
        return False
    repository = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0].lower()
    if _LLM_D_SERVING.match(repository):
        return True
    # Stand-ins that speak vLLM's API without vLLM (aibrix/vllm-mock, aibrix/vllm-simulator,
    # llm-d-inference-sim): their entrypoint is not vLLM's.
    return "vllm" in repository and not any(word in repository for word in ("mock", "simulator", "-sim"))


# llm-d's serving images (ghcr.io/llm-d/llm-d-cuda, -xpu, -rocm, -hpu, -cpu, ... and their -dev builds) are
# vLLM builds whose entrypoint is vLLM's OpenAI server (llm-d/llm-d docker/Dockerfile.cuda, .xpu:
# ENTRYPOINT ["python", "-m", "vllm.entrypoints.openai.api_server"]); llm-d's other images (the inference
# scheduler, routing sidecar, inference-sim) are not.
_LLM_D_SERVING = re2.compile(r"^llm-d(-(cuda|xpu|rocm|hpu|gaudi|cpu|aws|gke))?(-dev)?$")


def find_vllm_containers(
    pod_spec: Mapping[str, Any],
    *,
    implicit_env: Mapping[str, str] | None = None,
    default_version: str | None = None,
    read_file: Callable[[Mapping[str, Any]], Callable[[str], str | None]] | None = None,
    stated_version: VersionEvidence | None = None,
    engine_namespace: Mapping[str, Any] | None = None,
    engine_namespace_files: Mapping[int, str] | None = None,
) -> list[VllmContainer]:
    """The vLLM containers of ``pod_spec`` (``containers`` only), in order. ``engine_namespace``: engine
    arguments the platform sets without vLLM's parser (:attr:`VllmCommand.namespace`), on each command;
    ``engine_namespace_files``: container index -> a JSON file of them (:func:`_with_namespace_file`)."""
    found: list[VllmContainer] = []
    containers = pod_spec.get("containers")
    if not isinstance(containers, list):
        return found
    for index, container in enumerate(containers):
        if not isinstance(container, Mapping):
            continue
        reader = read_file(container) if read_file else None
        result = inspect_container(
            index,
            container,
            implicit_env=implicit_env,
            default_version=default_version,
            read_config=reader,
            stated_version=stated_version,
        )
        path = (engine_namespace_files or {}).get(index)
        if result is not None and path and result.command is not None:
            result = result.model_copy(update={"command": _with_namespace_file(result.command, path, reader)})
        if result is not None and engine_namespace and result.command is not None:
            command = result.command.model_copy(update={"namespace": {**engine_namespace, **result.command.namespace}})
            result = result.model_copy(update={"command": command})
        if result is not None:
            found.append(result)
    return found


def _with_namespace_file(
    command: VllmCommand, path: str, read_config: Callable[[str], str | None] | None
) -> VllmCommand:
    """``command`` starting from the namespace in the JSON file ``path``, as Dynamo's ``--engine-config-json``
    does (ai-dynamo/dynamo components/src/dynamo/vllm/args.py ``_load_engine_config_json``: the object becomes
    ``argparse.Namespace(**values)`` and vLLM's parser runs on it, so a flag on the command line wins and a
    ``false`` is dest = False; keys that are not vLLM dests are refused). Not readable here: the file is
    named as a config file not checked (KVP031)."""
    text = read_config(path) if read_config else None
    if text is None:
        return command.model_copy(update={"config_file": path, "config_loaded": False})
    try:
        values = json.loads(text)
    except (ValueError, RecursionError):  # (untrusted: a nesting past Python's stack is not an object either)
        values = None
    if not isinstance(values, dict):
        error = f"--engine-config-json {path[:80]} must contain a JSON object"
        return command.model_copy(update={"errors": [*command.errors, error]})
    dests = {dest for dest, _ in flag_table(command.release).options.values()}
    unknown = sorted(str(key)[:40] for key in values if key not in dests)  # (untrusted text: cut)
    if unknown:
        error = "Unknown vLLM engine argument(s) in --engine-config-json: " + ", ".join(unknown[:5])
        return command.model_copy(update={"errors": [*command.errors, error]})
    return command.model_copy(update={"namespace": {**values, **command.namespace}})


def inspect_container(
    index: int,
    container: Mapping[str, Any],
    *,
    implicit_env: Mapping[str, str] | None = None,
    default_version: str | None = None,
    read_config: Callable[[str], str | None] | None = None,
    stated_version: VersionEvidence | None = None,
) -> VllmContainer | None:
    """A :class:`VllmContainer` when ``container`` runs vLLM, else None.

    The release comes from ``stated_version`` (the ``kv-planner.io/vllm-version`` annotation), else
    from the image when its publisher maps it; ``default_version`` (the policy's assumption) only
    chooses how the command line is parsed, it is not reported as the container's release.
    """
    env = container_env(container, implicit_env)
    image = container.get("image") if isinstance(container.get("image"), str) else None
    evidence = stated_version or image_release(image)
    tag_version = evidence.version if evidence else None
    version = tag_version or default_version
    raw_command = string_list(container.get("command"))
    raw_args = string_list(container.get("args"))
    command = expand_all(raw_command or [], env)
    args = expand_all(raw_args or [], env)
    words = command + args
    name = str(container.get("name") or f"#{index}")
    common: dict[str, Any] = {
        "index": index,
        "name": name,
        "image": image,
        "vllm_version": tag_version,
        "version_source": evidence.source if evidence else None,
        "env": env,
        "has_args": raw_args is not None,
    }
    # (re2's Python wrapper costs microseconds a call; a reference needs "$(", which most words lack)
    unresolved = sorted({m for w in words if "$(" in w for m in _UNRESOLVED_K8S.findall(w)})

    if raw_command:
        found = find(words, env)
        if found is not None and found.argv_start is not None:
            parsed, error = _safe(lambda: parse_command(words, version=version, read_config=read_config, env=env))
            return VllmContainer(
                style="argv",
                command=parsed,
                parse_error=error,
                words=words,
                command_len=len(command),
                unresolved=unresolved,
                **common,
            )
        if found is not None:
            # vLLM's words come from a string a launcher splits (`env -S '...'`): like a script's, they have no
            # place in `command`/`args` to edit, so the container is read as a shell command (warnings only).
            split = list(found.words)
            parsed, error = _safe(lambda: parse_command(split, version=version, read_config=read_config))
            return VllmContainer(
                style="shell", command=parsed, parse_error=error, words=split, unresolved=unresolved, **common
            )
        try:
            commands = container_commands(_program_words(words, env), env, read_config, unknown_env_names(container))
        except UnreadableScriptError:
            return None  # (not read as vLLM: unread_command says why, KVP037)
        if commands is None:
            return None
        servers = script_servers(commands)
        if not servers:
            return None
        shell_command = servers[-1]
        parsed, error = _safe(partial(parse_command, shell_command.words, version=version, read_config=read_config))
        missing = sorted(set(unresolved) | set(shell_command.unresolved))
        return VllmContainer(
            style="shell",
            command=parsed,
            parse_error=error,
            words=shell_command.words,
            unresolved=missing,
            runtime=shell_command.runtime,
            servers=len(servers),
            servers_conditional=len(servers) > 1 and any(server.conditional for server in servers),
            **common,
        )

    if is_vllm_image(image):
        parsed, error = _safe(lambda: parse_args(args, version=version, read_config=read_config))
        return VllmContainer(
            style="image", command=parsed, parse_error=error, words=args, unresolved=unresolved, **common
        )
    found_in_args = find(args, env) if args else None
    if found_in_args is not None and found_in_args.argv_start is not None:
        # `args: [vllm, serve, M, ...]` on an image whose entrypoint runs its arguments (`exec "$@"`, NGC's
        # nvidia_entrypoint.sh, tini): the words are vLLM's command line, one for one with `args`.
        parsed, error = _safe(lambda: parse_command(args, version=version, read_config=read_config, env=env))
        return VllmContainer(
            style="argv", command=parsed, parse_error=error, words=args, command_len=0, unresolved=unresolved, **common
        )
    return None


# How Ray workers of a multi-node vLLM group start besides `ray start` itself: KubeRay's generated command
# (RayCluster worker groups, AIBrix fleets) and the worker role of vLLM's examples/online_serving
# multi-node-serving.sh (LeaderWorkerSet's vLLM example).
_RAY_WORKER_MARKS = ("$KUBERAY_GEN_RAY_START_CMD", "${KUBERAY_GEN_RAY_START_CMD}", "multi-node-serving.sh worker")


class UnreadCommand(BaseModel):
    """A command line :func:`inspect_container` did not read as vLLM, and why when it is known."""

    model_config = ConfigDict(frozen=True)

    words: list[str]
    why: str | None = None  # a shell script kv-planner does not read: what it does not read in it


def unread_command(container: Mapping[str, Any]) -> UnreadCommand | None:
    """The command line (``command`` + ``args``, expanded) of a container with a vLLM image and a
    ``command``, for one :func:`inspect_container` did not read as vLLM (it runs a script file or another
    program), or of any container whose shell script names vLLM and cannot be read (a syntax error, a
    bound); None for any other container, and for a Ray worker (``ray start``: it lends its GPUs to the
    vLLM server of its group, which is read where it runs)."""
    image = container.get("image")
    command = string_list(container.get("command"))
    if not command:
        return None
    vllm_image = is_vllm_image(image if isinstance(image, str) else None)
    env = container_env(container)
    words = expand_all(command + (string_list(container.get("args")) or []), env)
    if not vllm_image and not any("vllm" in word.lower() for word in words):
        return None
    if any(mark in word for word in words for mark in _RAY_WORKER_MARKS):
        return None
    program = _program_words(words, env)
    try:
        scripted = container_commands(program, env)
    except UnreadableScriptError as error:
        return UnreadCommand(words=words, why=error.message)
    if not vllm_image:
        return None
    commands = [c.words for c in scripted] if scripted is not None else [program]
    if any(len(c) > 1 and c[0].rsplit("/", 1)[-1] == "ray" and c[1] == "start" for c in commands):
        return None
    return UnreadCommand(words=words)


def _program_words(words: list[str], env: Mapping[str, str]) -> list[str]:
    """The command ``words`` runs past its launchers (``tini -- bash -c '...'`` runs ``bash -c '...'``);
    the words as written when a launcher's form is not read."""
    unwrapped = unwrap(words, env)
    return list(unwrapped.words) if unwrapped is not None else words


def script_servers(commands: Sequence[ShellCommand]) -> list[ShellCommand]:
    """The commands of a script that start a vLLM server (vLLM itself at the command position, not
    ``echo vllm serve``), up to the first one the shell ``exec``s: the shell is replaced by it, so
    nothing after it runs. The last one returned is the one read: the ``exec``'d server is the
    container's main process; without ``exec`` the last server started (``vllm serve a & vllm serve b``:
    the one the script waits for)."""
    servers: list[ShellCommand] = []
    for command in commands:
        if locate(command.words) is None:
            continue
        servers.append(command)
        if command.execs:
            break
    return servers


def _safe(parse: Callable[[], VllmCommand | None]) -> tuple[VllmCommand | None, str | None]:
    try:
        return parse(), None
    except InvalidArgumentError as error:
        return None, error.message
