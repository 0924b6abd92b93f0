"""Scripts that run scripts: positional parameters, ``bash -c`` inside a script, and script files from
ConfigMaps of the same manifest stream (``planner check``), all within named bounds."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from planner.k8s import script_files
from planner.k8s.detect import inspect_container
from planner.k8s.script_files import MAX_DEPTH, MAX_FILE_CHARS, MAX_TOTAL_CHARS, container_commands
from planner.k8s.shell import parse_script
from planner.k8s.shell_expand import expand
from planner.policy.check import check_policy, run_check
from planner.policy.decide import WorkloadEntry
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend
from tests.work import python_calls

POLICY = check_policy({"modelLookup": {"offline": True, "timeoutSeconds": 1}})
BACKEND = CoreBackend()
GPU = {"limits": {"nvidia.com/gpu": "1"}}
TOO_BIG = "meta-llama/Llama-3.1-70B-Instruct"  # 131 GiB of weights: never fits one L4 (KVP001)


# -- positional parameters -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("vllm serve $1 --max-model-len ${2}", ["vllm", "serve", "m", "o", "--max-model-len", "8192"]),
        ('vllm serve "$1" --max-model-len "$2"', ["vllm", "serve", "m o", "--max-model-len", "8192"]),
        ('vllm serve "$@"', ["vllm", "serve", "m o", "8192"]),  # each argument one word, spaces kept
        ("vllm serve $@", ["vllm", "serve", "m", "o", "8192"]),  # unquoted: split on blanks
        ('vllm serve "$*"', ["vllm", "serve", "m o 8192"]),
        ("vllm serve ${3:-fallback} $#", ["vllm", "serve", "fallback", "2"]),
        ("echo $0", ["echo", "run.sh"]),
    ],
)
def test_positional_parameters_expand_like_the_shell(text: str, expected: list[str]) -> None:
    positional = ["run.sh", "m o", "8192"]
    (command,) = parse_script(text, {}, positional=positional)
    assert command.words == expected


def test_without_positional_parameters_they_stay_as_written() -> None:
    # (a `sh -c` run without arguments has none: what it says is kept, not guessed)
    assert expand("$1 ${2} $@", {})[0] == "$1 ${2} $@"


def test_sh_c_arguments_are_the_scripts_parameters() -> None:
    container = {
        "name": "vllm",
        "image": "example.com/server:1",
        "command": ["sh", "-c", 'exec vllm serve "$1" --max-model-len "$2"', "sh", "Qwen/Qwen2.5-7B-Instruct", "4096"],
    }
    found = inspect_container(0, container)
    assert found is not None and found.command is not None
    assert found.command.model == "Qwen/Qwen2.5-7B-Instruct"
    assert found.words[-2:] == ["--max-model-len", "4096"]


# -- scripts inside scripts (no files needed: the webhook reads these too) ----------------------------------


def test_bash_c_inside_a_script_is_read() -> None:
    container = {
        "name": "vllm",
        "image": "example.com/server:1",
        "command": ["bash", "-lc", 'set -e; bash -c "exec vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 2048"'],
    }
    found = inspect_container(0, container)
    assert found is not None and found.style == "shell" and found.command is not None
    assert found.command.model == "Qwen/Qwen2.5-7B-Instruct" and found.words[-1] == "2048"


def test_scripts_within_scripts_stop_at_the_depth_bound() -> None:
    script = "vllm serve Qwen/Qwen2.5-7B-Instruct"
    for _ in range(MAX_DEPTH + 2):
        script = "bash -c " + _quote(script)
    commands = container_commands(["sh", "-c", script], {})
    assert commands is not None
    assert all(c.words[:2] != ["vllm", "serve"] for c in commands)  # too deep: not followed, not hung
    shallow = "bash -c " + _quote("vllm serve Qwen/Qwen2.5-7B-Instruct")
    commands = container_commands(["sh", "-c", shallow], {})
    assert commands is not None and commands[-1].words[:2] == ["vllm", "serve"]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# -- script files from ConfigMaps (planner check) ------------------------------------------------------------


def manifests(script: str, container: dict[str, Any], *, mount: str = "/scripts", configmap: bool = True) -> str:
    docs: list[dict[str, Any]] = []
    if configmap:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "entry", "namespace": "llm"},
                "data": {"start.sh": script},
            }
        )
    pod = {
        "volumes": [{"name": "entry", "configMap": {"name": "entry", "defaultMode": 493}}],
        "containers": [
            {
                "name": "vllm",
                "image": "vllm/vllm-openai:v0.10.1.1",
                "volumeMounts": [{"name": "entry", "mountPath": mount}],
                "resources": GPU,
                **container,
            }
        ],
    }
    docs.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "server", "namespace": "llm", "annotations": {"kv-planner.io/gpu": "L4"}},
            "spec": {
                "selector": {"matchLabels": {"app": "s"}},
                "template": {"metadata": {"labels": {"app": "s"}}, "spec": pod},
            },
        }
    )
    return yaml.safe_dump_all(docs)


def server(text: str) -> WorkloadEntry:
    result = run_check(read_documents(text, "test.yaml"), policy=POLICY, backend=BACKEND)
    (entry,) = [e for e in result.workloads if e.kind == "Deployment"]
    return entry


START = """#!/bin/bash
set -euo pipefail
MODEL=${1:-Qwen/Qwen2.5-7B-Instruct}
ray start --head --port=6379
exec vllm serve "$MODEL" --max-model-len "$2"
"""


@pytest.mark.parametrize(
    "container",
    [
        {"command": ["/bin/bash", "/scripts/start.sh"], "args": [TOO_BIG, "8192"]},
        {"command": ["bash", "-e", "-o", "pipefail", "/scripts/start.sh", TOO_BIG, "8192"]},
        {"command": ["/scripts/start.sh", TOO_BIG, "8192"]},  # run by its path
        {"command": ["tini", "--", "/scripts/start.sh", TOO_BIG, "8192"]},  # behind a launcher
        {"command": ["sh", "-c", f"source /scripts/start.sh {TOO_BIG} 8192"]},
        {"command": ["sh", "-c", f"echo starting; exec bash /scripts/start.sh {TOO_BIG} 8192"]},
    ],
    ids=["bash-file", "bash-options", "path", "tini", "source", "exec-bash"],
)
def test_a_script_file_from_a_configmap_is_read(container: dict[str, Any]) -> None:
    entry = server(manifests(START, container))
    assert entry.decision == "deny" and "KVP001" in entry.codes  # was KVP037: "cannot read", not checked
    (finding,) = [f for f in entry.findings if f.code == "KVP001"]
    assert "weights" in finding.message


def test_production_stack_copies_the_script_then_runs_the_copy() -> None:
    # production-stack's Ray head: the ConfigMap's script is copied to $HOME and run from there.
    script = f"#!/bin/bash\nray start --head\nvllm serve {TOO_BIG} --max-model-len 8192\n"
    copy_and_run = (
        "cp /entrypoint/start.sh $HOME/vllm-entrypoint.sh && chmod +x $HOME/vllm-entrypoint.sh && "
        "$HOME/vllm-entrypoint.sh & echo 'Running vllm in the background.'; wait"
    )
    container = {"command": ["/bin/bash", "-c", copy_and_run], "env": [{"name": "HOME", "value": "/home/ray"}]}
    entry = server(manifests(script, container, mount="/entrypoint"))
    assert entry.decision == "deny" and "KVP001" in entry.codes


def test_the_script_fits_and_its_context_is_planned() -> None:
    script = "#!/bin/sh\nexec vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 4096\n"
    entry = server(manifests(script, {"command": ["sh", "/scripts/start.sh"]}))
    assert entry.decision != "skip" and "KVP037" not in entry.codes
    assert entry.model == "Qwen/Qwen2.5-7B-Instruct" and entry.args.get("max_model_len") == 4096


@pytest.mark.parametrize(
    ("script", "why"),
    [
        ("#!/usr/bin/env python3\nimport os\nos.execvp('vllm', ['vllm', 'serve', 'x'])\n", "another interpreter"),
        ("#!/bin/bash\n" + "# padding\n" * (MAX_FILE_CHARS // 10) + f"vllm serve {TOO_BIG}\n", "too long"),
        ("#!/bin/bash\nexec bash /scripts/start.sh\n", "runs itself"),
    ],
    ids=["python", "too-long", "recursive"],
)
def test_files_it_will_not_read_stay_cannot_read(script: str, why: str) -> None:
    entry = server(manifests(script, {"command": ["bash", "/scripts/start.sh"]}))
    assert entry.decision == "skip" and entry.codes == ["KVP037"], why


def test_without_the_configmap_the_file_stays_cannot_read() -> None:
    # (the webhook's case too: it sees no ConfigMaps)
    entry = server(manifests(START, {"command": ["bash", "/scripts/start.sh", TOO_BIG, "8192"]}, configmap=False))
    assert entry.decision == "skip" and entry.codes == ["KVP037"]


def test_a_file_mounted_elsewhere_is_not_read() -> None:
    entry = server(manifests(START, {"command": ["bash", "/other/start.sh", TOO_BIG, "8192"]}))
    assert entry.codes == ["KVP037"]


def test_a_file_run_over_and_over_is_followed_within_the_character_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each file runs the next one 4,000 times: unbounded, four levels would parse 4,000^4 scripts.
    files = {
        f"/s/{level}.sh": "#!/bin/sh\n" + f"sh /s/{level + 1}.sh\n" * 4_000 + "# " + "x" * 20_000 + "\n"
        for level in range(MAX_DEPTH)
    }
    files[f"/s/{MAX_DEPTH}.sh"] = "vllm serve Qwen/Qwen2.5-7B-Instruct\n"
    parsed: list[int] = []

    def counting_parse(script: str, *args: Any) -> Any:
        parsed.append(len(script))
        return parse_script(script, *args)

    monkeypatch.setattr(script_files, "parse_script", counting_parse)
    commands = container_commands(["sh", "/s/0.sh"], {}, files.get)
    assert commands is not None and len(commands) <= 4_096
    assert sum(parsed) <= MAX_TOTAL_CHARS  # scripts past the bound are not parsed at all
    assert len(parsed) > 1  # (but the first files were followed)


# -- what an independent review of the above found ---------------------------------------------------------


@pytest.mark.parametrize(
    "script",
    [
        'if [ "$FAST" = 1 ]; then exec vllm serve small; fi; exec vllm serve big',
        "test -f /x && exec vllm serve small; exec vllm serve big",
        "test -f /x || exec vllm serve small; exec vllm serve big",
        "exec vllm serve small | cat; exec vllm serve big",
        "exec vllm serve small & exec vllm serve big",
        "( exec vllm serve small ); exec vllm serve big",
    ],
    ids=["if", "and", "or", "pipe", "background", "subshell"],
)
def test_an_exec_that_may_not_run_or_replaces_another_process_does_not_end_the_script(script: str) -> None:
    commands = container_commands(["sh", "-c", script], {})
    assert commands is not None
    from planner.k8s.detect import script_servers

    servers = script_servers(commands)
    assert [s.words[2] for s in servers] == ["small", "big"]  # the last is read; KVP039 names the other


@pytest.mark.parametrize(
    ("script", "args", "model"),
    [
        ('set -- big --max-model-len 8192; exec vllm serve "$@"', ["small"], "big"),
        ('shift; exec vllm serve "$@"', ["small", "big"], "big"),
        ('shift 2; exec vllm serve "$1"', ["a", "b", "big"], "big"),
        ("exec vllm serve ${MODEL:-$1}", ["big"], "big"),
        ("exec vllm serve ${MODEL:-${DEFAULT:-big}}", [], "big"),
    ],
    ids=["set--", "shift", "shift-n", "default-positional", "nested-default"],
)
def test_positional_parameters_follow_set_and_shift_and_defaults(script: str, args: list[str], model: str) -> None:
    found = inspect_container(
        0, {"name": "v", "image": "example.com/x:1", "command": ["sh", "-c", script, "sh", *args]}
    )
    assert found is not None and found.command is not None and found.command.model == model


def test_many_expansions_cost_linear_work() -> None:
    # (a regular expression matched at an offset re-read the whole command each time: quadratic)
    def calls(count: int) -> int:
        script = "vllm serve " + "$a" * count + " ${b:-${c:-x}}" * (count // 8)
        return python_calls(parse_script, script, {"a": ""})

    assert calls(16_000) <= 4.5 * calls(4_000) + 100


@pytest.mark.parametrize(
    "command",
    [
        ["bash", "-eo", "pipefail", "-c", "exec vllm serve big"],
        ["bash", "-c", "-e", "exec vllm serve big"],
        ["bash", "-euxc", "exec vllm serve big"],
        ["tini", "--", "sh", "-c", "exec vllm serve big"],
        ["/usr/bin/env", "bash", "-c", "exec vllm serve big"],
    ],
    ids=["eo-pipefail", "c-then-options", "cluster", "tini", "env"],
)
def test_shell_option_forms_are_read_as_the_shell_reads_them(command: list[str]) -> None:
    found = inspect_container(0, {"name": "v", "image": "example.com/x:1", "command": command})
    assert found is not None and found.command is not None and found.command.model == "big"


def test_file_lookups_are_bounded_even_when_they_find_nothing() -> None:
    # (an empty script run 2,000 times adds no commands: the command bound never stopped the lookups)
    looked: list[str] = []

    def read(path: str) -> str | None:
        looked.append(path)
        return ""

    script = "sh /s/empty.sh\n" * 2_000 + "exec vllm serve big"
    commands = container_commands(["sh", "-c", script], {}, read)
    assert commands is not None and len(looked) <= script_files.MAX_FILE_READS
    assert commands[-1].words[:3] == ["vllm", "serve", "big"]


@pytest.mark.parametrize(
    "env",
    [
        {"env": [{"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "model"}}}]},
        {"envFrom": [{"configMapRef": {"name": "models"}}]},
        {"env": [{"name": "MODEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['model']"}}}]},
    ],
    ids=["valueFrom", "envFrom", "downward"],
)
def test_a_default_is_not_taken_for_a_variable_the_cluster_sets(env: dict[str, Any]) -> None:
    container = {
        "name": "v",
        "image": "example.com/x:1",
        "command": ["sh", "-c", "exec vllm serve ${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}"],
        **env,
    }
    found = inspect_container(0, container)
    assert found is not None and "MODEL" in found.unresolved  # KVP032: not checked, instead of the default
    assert found.command is None or found.command.model != "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.mark.parametrize(
    "env",
    [
        {"env": [{"name": "EXTRA", "valueFrom": {"configMapKeyRef": {"name": "vllm", "key": "extra"}}}]},
        {"envFrom": [{"configMapRef": {"name": "vllm"}}]},
        {"env": [{"name": "EXTRA", "valueFrom": {"secretKeyRef": {"name": "vllm", "key": "extra"}}}]},
    ],
    ids=["valueFrom", "envFrom", "secret"],
)
@pytest.mark.parametrize("written", ["$EXTRA", "${EXTRA}", '"$EXTRA"'])
def test_a_variable_the_cluster_sets_is_not_taken_as_empty(env: dict[str, Any], written: str) -> None:
    """`vllm serve M ... $EXTRA` with EXTRA from a ConfigMap or Secret (a common way to keep vLLM's flags out
    of the Deployment): the flags vLLM gets are not in the manifest, so nothing is checked (KVP032), as for
    `$(EXTRA)` in an argv. Before: $EXTRA expanded to nothing and the plan ignored whatever it holds (an
    annotation recorded for flags vLLM never saw); `vllm serve $MODEL` was "vLLM would reject: no model"."""
    script = f"exec vllm serve {TOO_BIG} --max-model-len 4096 {written}"
    pod = {
        "containers": [
            {"name": "v", "image": "vllm/vllm-openai:v0.11.0", "command": ["sh", "-c", script], "resources": GPU, **env}
        ],
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
    }
    entry = _deployment_entry(pod)
    assert entry.codes == ["KVP032"] and entry.decision == "warn", entry.messages
    assert "EXTRA" in entry.messages[0] and "not checked" in entry.messages[0]
    model = dict(pod["containers"][0], command=["sh", "-c", "exec vllm serve $MODEL --max-model-len 4096"])
    entry = _deployment_entry({**pod, "containers": [{**model, **_renamed(env, "MODEL")}]})
    assert entry.codes == ["KVP032"] and "the model not checked" in entry.messages[0], entry.messages


def test_a_variable_set_nowhere_still_expands_to_nothing() -> None:
    """Without valueFrom or envFrom the shell's unset variable is empty: the server is planned (here denied:
    70B on one L4), as before."""
    script = f"exec vllm serve {TOO_BIG} --max-model-len 4096 $EXTRA"
    pod = {
        "containers": [
            {"name": "v", "image": "vllm/vllm-openai:v0.11.0", "command": ["sh", "-c", script], "resources": GPU}
        ],
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
    }
    entry = _deployment_entry(pod)
    assert "KVP032" not in entry.codes and "KVP001" in entry.codes and entry.decision == "deny", entry.messages


def _with_configmap(pod: dict[str, Any], data: dict[str, str]) -> str:
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "vllm", "namespace": "llm"},
        "data": data,
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "server", "namespace": "llm"},
        "spec": {
            "selector": {"matchLabels": {"app": "s"}},
            "template": {"metadata": {"labels": {"app": "s"}}, "spec": pod},
        },
    }
    return yaml.safe_dump_all([configmap, deployment])


def _checked(text: str) -> WorkloadEntry:
    policy = check_policy({"validationAction": "Enforce", "modelLookup": {"offline": True, "timeoutSeconds": 1}})
    return next(
        e for e in run_check(read_documents(text, "t.yaml"), policy=policy, backend=BACKEND).workloads if e.vllm
    )


@pytest.mark.parametrize(
    ("container", "data"),
    [
        (  # argv with $(VAR) from envFrom
            {
                "args": ["--model", "$(MODEL)", "--max-model-len", "$(LEN)"],
                "envFrom": [{"configMapRef": {"name": "vllm"}}],
            },
            {"MODEL": TOO_BIG, "LEN": "4096"},
        ),
        (  # a script's $EXTRA from envFrom under a prefix
            {
                "command": ["sh", "-c", "exec vllm serve $VLLM_MODEL $VLLM_EXTRA"],
                "envFrom": [{"configMapRef": {"name": "vllm"}, "prefix": "VLLM_"}],
            },
            {"MODEL": TOO_BIG, "EXTRA": "--max-model-len 4096 --gpu-memory-utilization 0.9"},
        ),
        (  # env[].valueFrom.configMapKeyRef, referred to by a later env value
            {
                "args": ["--model", "$(M)", "--max-model-len", "$(LEN)"],
                "env": [
                    {"name": "ORG_MODEL", "valueFrom": {"configMapKeyRef": {"name": "vllm", "key": "model"}}},
                    {"name": "M", "value": "$(ORG_MODEL)"},
                    {"name": "LEN", "valueFrom": {"configMapKeyRef": {"name": "vllm", "key": "len"}}},
                ],
            },
            {"model": TOO_BIG, "len": "4096"},
        ),
    ],
    ids=["envFrom-argv", "envFrom-script-prefix", "configMapKeyRef"],
)
def test_planner_check_reads_flags_kept_in_a_configmap_of_the_input(
    container: dict[str, Any], data: dict[str, str]
) -> None:
    """Flags and the model kept in a ConfigMap of the same input are what vLLM gets: planned (here 70B on one
    L4: denied), not "has no value in the manifest" (KVP032), which the webhook, reading no ConfigMaps, says."""
    pod = {
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
        "containers": [{"name": "v", "image": "vllm/vllm-openai:v0.11.0", "resources": GPU, **container}],
    }
    entry = _checked(_with_configmap(pod, data))
    assert entry.model == TOO_BIG and entry.args["max_model_len"] == 4096, entry.messages
    assert entry.decision == "deny" and "KVP001" in entry.codes and "KVP032" not in entry.codes
    alone = yaml.safe_dump(list(yaml.safe_load_all(_with_configmap(pod, data)))[1])
    assert "KVP032" in _checked(alone).codes  # without the ConfigMap: not checked, as before


def test_a_configmap_value_is_not_expanded_again_and_an_unknown_source_stays_unknown() -> None:
    container = {
        "name": "v",
        "image": "vllm/vllm-openai:v0.11.0",
        "resources": GPU,
        "args": ["--model", "$(MODEL)", "--max-model-len", "4096"],
        "envFrom": [{"configMapRef": {"name": "vllm"}}],
        "env": [{"name": "OTHER", "value": "Qwen/Qwen2.5-0.5B-Instruct"}],
    }
    pod = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}, "containers": [container]}
    entry = _checked(_with_configmap(pod, {"MODEL": "$(OTHER)"}))  # the kubelet puts "$(OTHER)" as it is
    assert entry.model == "$(OTHER)"
    # A Secret beside the ConfigMap may set any name: the environment stays unknown (KVP032).
    secret = {**container, "envFrom": [{"configMapRef": {"name": "vllm"}}, {"secretRef": {"name": "s"}}]}
    entry = _checked(_with_configmap({**pod, "containers": [secret]}, {"MODEL": TOO_BIG}))
    assert entry.codes == ["KVP032"], entry.messages


def test_a_configmap_environment_is_taken_within_bounds() -> None:
    """More keys than a container may have env entries (1,024), or a value past 65,536 characters: the
    environment stays unknown (KVP032), not read in part."""
    from planner.k8s.configfiles import MAX_ENV_FROM_KEYS, MAX_ENV_FROM_VALUE

    container = {
        "name": "v",
        "image": "vllm/vllm-openai:v0.11.0",
        "resources": GPU,
        "args": ["--model", "$(MODEL)"],
        "envFrom": [{"configMapRef": {"name": "vllm"}}],
    }
    pod = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}, "containers": [container]}
    many = {f"K{i}": "x" for i in range(MAX_ENV_FROM_KEYS + 1)} | {"MODEL": TOO_BIG}
    assert _checked(_with_configmap(pod, many)).codes == ["KVP032"]
    long = {"MODEL": TOO_BIG, "PAD": "x" * (MAX_ENV_FROM_VALUE + 1)}
    assert _checked(_with_configmap(pod, long)).codes == ["KVP032"]


def _renamed(env: dict[str, Any], name: str) -> dict[str, Any]:
    if "env" not in env:
        return env
    return {"env": [{**item, "name": name} for item in env["env"]]}


def _deployment_entry(pod: dict[str, Any]) -> WorkloadEntry:
    text = yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "server", "namespace": "llm"},
            "spec": {
                "selector": {"matchLabels": {"app": "s"}},
                "template": {"metadata": {"labels": {"app": "s"}}, "spec": pod},
            },
        }
    )
    policy = check_policy({"validationAction": "Enforce", "modelLookup": {"offline": True, "timeoutSeconds": 1}})
    (entry,) = run_check(read_documents(text, "test.yaml"), policy=policy, backend=BACKEND).workloads
    return entry


def test_the_deepest_mount_wins_and_an_unknown_one_hides_the_file() -> None:
    from planner.k8s.configfiles import file_reader

    configmaps = {("llm", "scripts"): {"start.sh": "benign"}, ("llm", "other"): {"real.sh": "real"}}
    pod = {
        "volumes": [
            {"name": "scripts", "configMap": {"name": "scripts"}},
            {"name": "secret", "secret": {"secretName": "s"}},
            {"name": "other", "configMap": {"name": "other"}},
        ]
    }

    def reader(*mounts: dict[str, Any]) -> Any:
        return file_reader(pod, {"volumeMounts": list(mounts)}, "llm", configmaps)

    base = {"name": "scripts", "mountPath": "/scripts"}
    assert reader(base)("/scripts/start.sh") == "benign"
    # a Secret over the file, listed after or before: the runtime applies the deeper mount last
    secret = {"name": "secret", "mountPath": "/scripts/start.sh", "subPath": "start.sh"}
    assert reader(base, secret)("/scripts/start.sh") is None
    assert reader(secret, base)("/scripts/start.sh") is None
    other = {"name": "other", "mountPath": "/scripts/start.sh", "subPath": "real.sh"}
    assert reader(base, other)("/scripts/start.sh") == "real"
    assert reader({**base, "subPathExpr": "$(POD)"})("/scripts/start.sh") is None


@pytest.mark.parametrize(
    "change",
    ["cat /scripts/other.sh > /tmp/run.sh", "sed -i s/a/b/ /tmp/run.sh", "mv /scripts/x.sh /tmp/run.sh"],
    ids=["redirect", "sed", "mv"],
)
def test_a_copy_changed_after_it_was_made_is_not_read_as_its_source(change: str) -> None:
    files = {"/scripts/start.sh": "exec vllm serve small\n"}
    script = f"cp /scripts/start.sh /tmp/run.sh && {change} && exec bash /tmp/run.sh"
    commands = container_commands(["sh", "-c", script], {}, files.get)
    assert commands is not None and all(c.words[:2] != ["vllm", "serve"] for c in commands)
    unchanged = container_commands(
        ["sh", "-c", "cp /scripts/start.sh /tmp/run.sh && exec bash /tmp/run.sh"], {}, files.get
    )
    assert unchanged is not None and unchanged[-1].words == ["vllm", "serve", "small"]


@pytest.mark.parametrize(
    ("script", "models"),
    [
        # Another shell runs the file: its exec replaces that shell, and the container's script goes on.
        ("bash /s/start.sh; exec vllm serve big", ["small", "big"]),
        ("( bash /s/start.sh ); exec vllm serve big", ["small", "big"]),
        # Sourced in a subshell: the exec replaces the subshell only.
        ("( . /s/start.sh ); exec vllm serve big", ["small", "big"]),
        ("{ . /s/start.sh; } | tee /tmp/log; exec vllm serve big", ["small", "big"]),
        # Sourced on the script's main line (or in a brace group there): the exec replaces the script's shell.
        (". /s/start.sh; exec vllm serve big", ["small"]),
        ("{ . /s/start.sh; }; exec vllm serve big", ["small"]),
    ],
)
def test_an_exec_in_a_followed_script_ends_only_the_process_it_runs_in(script: str, models: list[str]) -> None:
    from planner.k8s.detect import script_servers

    files = {"/s/start.sh": "exec vllm serve small\necho never\n"}
    commands = container_commands(["sh", "-c", script], {}, files.get)
    assert commands is not None
    assert [s.words[2] for s in script_servers(commands)] == models  # the last is read; KVP039 names the others


def test_a_bash_c_subshell_inside_a_script_is_read() -> None:
    container = {
        "name": "vllm",
        "image": "example.com/server:1",
        "command": ["sh", "-c", "set -e; bash -c '(cd /tmp && exec vllm serve Qwen/Qwen2.5-7B-Instruct)' &\nwait"],
    }
    found = inspect_container(0, container)
    assert found is not None and found.command is not None
    assert found.words == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]  # (`)` was vLLM's last argument)


def test_an_unreadable_script_a_script_runs_stays_a_command_as_written() -> None:
    # (bash -c fails on its own script there, and the container's script goes on to its server)
    commands = container_commands(["sh", "-c", "bash -c '(exec vllm serve small'; exec vllm serve big"], {})
    assert commands is not None and commands[-1].words == ["vllm", "serve", "big"]
    assert commands[0].words[:2] == ["bash", "-c"]
