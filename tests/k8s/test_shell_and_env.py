"""Shell scripts and Kubernetes $(VAR) expansion, as sh and the kubelet do them."""

from __future__ import annotations

import pytest

from planner.errors import InputCapError
from planner.k8s.envvars import container_env, expand_k8s, new_budget
from planner.k8s.shell import MAX_COMMAND_CHARS, parse_script, shell_script, split_commands


def test_kubelet_expansion_rules() -> None:
    env = {"MODEL": "Qwen/Qwen2.5-7B-Instruct", "EMPTY": ""}
    assert expand_k8s("$(MODEL)", env) == "Qwen/Qwen2.5-7B-Instruct"
    assert expand_k8s("--model=$(MODEL)", env) == "--model=Qwen/Qwen2.5-7B-Instruct"
    assert expand_k8s("$(UNDEFINED)", env) == "$(UNDEFINED)"  # left as written
    assert expand_k8s("$$(MODEL)", env) == "$(MODEL)"  # escaped
    assert expand_k8s("$(EMPTY)x", env) == "x"
    assert expand_k8s("cost: $5", env) == "cost: $5"


def test_container_env_expands_in_order_and_drops_value_from() -> None:
    container = {
        "env": [
            {"name": "ORG", "value": "meta-llama"},
            {"name": "MODEL", "value": "$(ORG)/Llama-3.1-8B-Instruct"},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
            {"name": "LATE", "value": "$(AFTER)"},
            {"name": "AFTER", "value": "x"},
        ]
    }
    env = container_env(container, {"LWS_GROUP_SIZE": "2"})
    assert env["MODEL"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert "HF_TOKEN" not in env
    assert env["LATE"] == "$(AFTER)"  # only variables defined before are expanded
    assert env["LWS_GROUP_SIZE"] == "2"


@pytest.mark.parametrize(
    ("argv", "script"),
    [
        (["sh", "-c", "vllm serve x"], "vllm serve x"),
        (["/bin/bash", "-lc", "vllm serve x"], "vllm serve x"),
        (["bash", "-ec", "vllm serve x", "arg0"], "vllm serve x"),
        (["/bin/sh", "-x", "-c", "vllm serve x"], "vllm serve x"),
        (["bash", "run.sh"], None),
        (["python3", "-c", "print()"], None),
    ],
)
def test_shell_script_extraction(argv: list[str], script: str | None) -> None:
    assert shell_script(argv) == script


def test_split_respects_quotes_continuations_and_comments() -> None:
    script = (
        "set -e # strict\n"
        "pip install x && \\\n  echo 'a; b' ; "
        'python3 -c "import sys; print(1)" || true\n'
        "vllm serve m 2>&1 | tee /tmp/log &\nwait"
    )
    assert split_commands(script) == [
        "set -e",
        "pip install x",
        "echo 'a; b'",
        'python3 -c "import sys; print(1)"',
        "true",
        "vllm serve m 2>&1",
        "tee /tmp/log",
        "wait",
    ]
    commands = [c.words for c in parse_script(script, {})]
    assert ["vllm", "serve", "m"] in commands
    assert ["echo", "a; b"] in commands
    assert ["python3", "-c", "import sys; print(1)"] in commands


def test_expansion_assignments_exports_and_defaults() -> None:
    script = (
        'MODEL="${MODEL_ID:-meta-llama/Llama-3.1-8B-Instruct}"\n'
        "export CTX=${CONTEXT}\n"
        "exec vllm serve $MODEL --max-model-len $CTX --served-model-name '$MODEL' --api-key ${KEY}"
    )
    commands = parse_script(script, {"CONTEXT": "8192"})
    assert commands[-1].words == [
        "vllm",
        "serve",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--max-model-len",
        "8192",
        "--served-model-name",
        "$MODEL",
        "--api-key",
    ]
    assert commands[-1].unresolved == ["KEY"]


def test_values_with_spaces_split_unquoted_and_stay_whole_quoted() -> None:
    commands = parse_script('vllm serve $M "$M"', {"M": "a b"})
    assert commands[0].words == ["vllm", "serve", "a", "b", "a b"]


def test_prefix_commands_and_leading_assignments_are_dropped() -> None:
    commands = parse_script("env -i A=1 VLLM_X=1 nohup vllm serve m > /tmp/out", {})
    assert commands[0].words == ["vllm", "serve", "m"]  # the redirection is the shell's, not vLLM's


def test_an_assignment_after_a_launcher_other_than_env_is_its_program() -> None:
    # nohup (like timeout, nice, tini ...) runs its first operand: `nohup VLLM_X=1 vllm serve` fails with
    # "nohup: failed to run command 'VLLM_X=1'". Only env and sudo take NAME=VALUE words.
    (command,) = parse_script("nohup VLLM_X=1 vllm serve m", {})
    assert command.words[0] == "VLLM_X=1"


def _doubling(levels: int, times: int) -> str:
    # A0=0123456789; A1=$A0$A0...; A2=$A1$A1...: each level `times` the one before.
    lines = ["A0=0123456789"] + [f"A{i}=" + f"$A{i - 1}" * times for i in range(1, levels + 1)]
    return "; ".join(lines) + f"; exec vllm serve m --served-model-name $A{levels}"


def test_shell_expansion_is_bounded_per_container() -> None:
    # 271 characters that expand to 14 million: 81 s in planner check before the bound (shlex on long words).
    with pytest.raises(InputCapError) as raised:
        parse_script(_doubling(5, 14), {})
    assert raised.value.code == "KVP074"
    # Under the bound, the same shape reads as before.
    (command,) = [c for c in parse_script(_doubling(2, 3), {}) if c.words[0] == "vllm"]
    assert command.words[-1] == "0123456789" * 9


def test_one_command_is_bounded_even_within_the_budget() -> None:
    long = "x" * (MAX_COMMAND_CHARS + 1)
    with pytest.raises(InputCapError) as raised:
        parse_script(f"A={long}; exec vllm serve $A", {})
    assert raised.value.limit == MAX_COMMAND_CHARS
    budget = new_budget(100)
    with pytest.raises(InputCapError):  # the container's budget counts every command's expansions
        parse_script("; ".join(["echo $V"] * 11), {"V": "0123456789"}, budget)


@pytest.mark.parametrize(
    "script",
    [
        'if [ -n "$T" ]; then vllm serve m; fi',
        "if true\nthen\n  vllm serve m\nfi",
        "while true; do vllm serve m; sleep 5; done",
        "until vllm serve m; do sleep 1; done",
        "case $MODE in serve) vllm serve m;; esac",
        "{ vllm serve m; }",
        "f() { vllm serve m; }; f",
        "! vllm serve m",
    ],
)
def test_reserved_words_before_a_command_are_not_the_command(script: str) -> None:
    # Each of these ran `vllm serve` at the command position; read as `then`, `do`, `{` ... it was skipped.
    commands = [c for c in parse_script(script, {}) if c.words[:2] == ["vllm", "serve"]]
    assert commands and commands[0].words == ["vllm", "serve", "m"]


def test_commands_in_branches_and_loops_are_marked_and_a_branch_exec_does_not_end_the_script() -> None:
    # (an exec in a branch may not run: what follows the construct still may, so it is no final server)
    script = 'if [ "$Q" = 1 ]; then\n  exec vllm serve a\nelse\n  vllm serve b\nfi\nvllm serve c'
    served = {c.words[-1]: c for c in parse_script(script, {}) if c.words[:2] == ["vllm", "serve"]}
    assert served["a"].conditional and not served["a"].execs
    assert served["b"].conditional and not served["b"].execs
    assert not served["c"].conditional  # after `fi`: the construct is closed
