"""Shell scripts and Kubernetes $(VAR) expansion, as sh and the kubelet do them."""

from __future__ import annotations

import re

import pytest

from planner.errors import InputCapError, UnreadableScriptError
from planner.k8s.envvars import container_env, expand_k8s, new_budget
from planner.k8s.shell import MAX_COMMAND_CHARS, parse_script, shell_script, split_commands, split_with_separators
from planner.k8s.shell_scan import MAX_GROUP_DEPTH
from tests.work import python_calls


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


# -- subshells `( ... )` and brace groups `{ ...; }` -----------------------------------------------------------

M = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (f"(exec vllm serve {M} --max-model-len 131072)", [(f"exec vllm serve {M} --max-model-len 131072", "")]),
        (f"( exec vllm serve {M} --max-model-len 131072 )", [(f"exec vllm serve {M} --max-model-len 131072", "")]),
        (f"{{ vllm serve {M} --max-model-len 8192; }}", [(f"vllm serve {M} --max-model-len 8192", ";")]),
        (f"cd /x && (vllm serve {M})", [("cd /x", "&&"), (f"vllm serve {M}", "")]),
        (f"(cd /x; exec vllm serve {M}) &", [("cd /x", ";"), (f"exec vllm serve {M}", "")]),
        (f"( vllm serve {M} ) | tee log", [(f"vllm serve {M}", ""), ("tee log", "")]),
        ("((cd /x; a) )", [("cd /x", ";"), ("a", "")]),  # `((` that does not close as `))`: two subshells
        ("{ (a) }", [("a", "")]),
        ("{ if x; then a; fi }", [("if x", ";"), ("then a", ";"), ("fi", "")]),
    ],
)
def test_group_parentheses_and_braces_are_operators_not_words(script: str, expected: list[tuple[str, str]]) -> None:
    # `(` and `)` were kept in the words: `(exec` was the program (KVP037), `)` an argument of vLLM (KVP043).
    assert split_with_separators(script) == expected


@pytest.mark.parametrize(
    "script",
    [
        f"(exec vllm serve {M} --max-model-len 131072)",
        f"( exec vllm serve {M} --max-model-len 131072 )",
        f"{{ vllm serve {M} --max-model-len 131072; }}",
        f"{{ vllm serve {M} --max-model-len 131072;}}",
        f"cd /x && (vllm serve {M} --max-model-len 131072)",
        f"(cd /x; exec vllm serve {M} --max-model-len 131072) &",
        f"( vllm serve {M} --max-model-len 131072 ) | tee log",
        f"( ( VLLM_X=1 exec vllm serve {M} --max-model-len 131072 ) ) 2>&1 | tee /tmp/log",
        f"if (nvidia-smi) then {{ exec vllm serve {M} --max-model-len 131072; }}; fi",
        f"case $MODE in (a|b) (exec vllm serve {M} --max-model-len 131072);; esac",
        f"case $MODE in x ) ;; a | b ) vllm serve {M} --max-model-len 131072;; esac",  # (spaces in patterns)
        f"! (false) && (vllm serve {M} --max-model-len 131072)",
        f"start() {{ exec vllm serve {M} --max-model-len 131072; }}\nstart",
        f"function start ( exec vllm serve {M} --max-model-len 131072 )\nstart",
    ],
)
def test_the_command_inside_a_group_is_read_as_in_a_plain_list(script: str) -> None:
    served = [c for c in parse_script(script, {}) if c.words[:2] == ["vllm", "serve"]]
    assert [c.words for c in served] == [["vllm", "serve", M, "--max-model-len", "131072"]]


@pytest.mark.parametrize(
    "script",
    [
        'N="$(nproc)"; T=$(( N / (2) )); exec vllm serve m',
        'echo "${NAME:-(none)}" \\( "a (b)" \'c)\' `date +%s`; exec vllm serve m',
        'GPUS="$(python3 -c "import torch; print(torch.cuda.device_count())")"; exec vllm serve m',
        "case $GPU in a100|h100) A=1;; *) A=2;; esac; exec vllm serve m",
        "ARGS=(--max-model-len 8192 --x '(y)'); declare -a MORE=(a b); exec vllm serve m",
        '[[ "$GPU" =~ ^(A100|H100)$ && -n "$X" ]] && echo ok; exec vllm serve m',
        "shopt -s extglob; rm -f /tmp/!(keep|this).log; exec vllm serve m",
        "(( RETRIES = 3 )); for ((i = 0; i < RETRIES; i++)); do echo $i; done; exec vllm serve m",
        "diff <(sort a) <(sort b) > /dev/null; exec vllm serve m",
        "cat > /tmp/run.py <<'EOF'\nprint(len(')'))\n  (unbalanced\nEOF\nexec vllm serve m",
        "python3 - <<-EOF\n\tprint((1)\n\tEOF\nexec vllm serve m",
    ],
    ids=[
        "arithmetic",
        "quoted",
        "nested-quotes",
        "case",
        "arrays",
        "test",
        "extglob",
        "loop",
        "procsub",
        "heredoc",
        "heredoc-tabs",
    ],
)
def test_parentheses_that_are_not_groups_stay_in_their_words(script: str) -> None:
    commands = parse_script(script, {})
    assert commands[-1].words == ["vllm", "serve", "m"] and commands[-1].execs
    assert all(c.words[:1] != ["print(len(')'))"] for c in commands)  # a here-document's body is not run


@pytest.mark.parametrize(
    ("script", "why"),
    [
        ("(exec vllm serve m", "never closed"),
        ("exec vllm serve m)", "without its `(`"),
        ("{ exec vllm serve m --max-model-len 8192 }", "never closed"),  # `}` is an argument: no `;` before it
        ("{ a; }; }", "without its `{`"),
        ("(cd /x) exec vllm serve m", "a word after a group"),
        ("vllm serve m --chat-template (x)", "in the middle of a command"),
        ("echo a; ()", "empty"),
        ("f() echo; exec vllm serve m", "function"),
    ],
)
def test_what_bash_would_refuse_is_unreadable_not_guessed(script: str, why: str) -> None:
    with pytest.raises(UnreadableScriptError, match=re.escape(why)):
        parse_script(script, {})


def test_groups_nest_up_to_the_bound_and_past_it_the_script_is_unreadable() -> None:
    def nested(levels: int) -> str:
        return "( " * levels + "exec vllm serve m" + " )" * levels

    (command,) = parse_script(nested(MAX_GROUP_DEPTH), {})
    assert command.words == ["vllm", "serve", "m"]
    with pytest.raises(UnreadableScriptError, match=f"deeper than {MAX_GROUP_DEPTH}"):
        parse_script(nested(MAX_GROUP_DEPTH + 1), {})
    with pytest.raises(UnreadableScriptError):
        parse_script("{ " * 10_000 + "vllm serve m", {})


def test_reading_groups_costs_linear_work() -> None:
    # Far past the bound, the scan stops there; side by side, each group costs the same (a subshell's
    # assignments are undone one by one, not by copying every variable at each group).
    deep = python_calls(_unreadable, "( " * 100_000)
    assert deep <= 2 * python_calls(_unreadable, "( " * 1_000)

    def calls(count: int) -> int:
        script = "".join(f"V{i}=x; " for i in range(count)) + "(A=1; exec vllm serve m); " * count
        return python_calls(parse_script, script, {})

    assert calls(2_000) <= 4.5 * calls(500)


def _unreadable(script: str) -> None:
    with pytest.raises(UnreadableScriptError):
        parse_script(script, {})


def test_an_exec_in_a_subshell_ends_the_subshell_only() -> None:
    script = "(exec vllm serve a; vllm serve never); vllm serve b; exec vllm serve c; vllm serve never"
    served = [c for c in parse_script(script, {}) if c.words[:2] == ["vllm", "serve"]]
    assert [(c.words[2], c.execs) for c in served] == [("a", False), ("b", False), ("c", True)]


@pytest.mark.parametrize(
    ("script", "served"),
    [
        # A brace group runs in the script's own shell: its exec ends the script.
        ("{ exec vllm serve a; }; vllm serve never", [("a", True)]),
        # ... unless it may not run, or runs in a pipeline or in the background (a process of its own).
        ("test -f /x && { exec vllm serve a; vllm serve never; }; vllm serve b", [("a", False), ("b", False)]),
        ("{ exec vllm serve a; vllm serve never; } | tee log; vllm serve b", [("a", False), ("b", False)]),
        ("{ exec vllm serve a; vllm serve never; } & vllm serve b", [("a", False), ("b", False)]),
        # A group in line in a subshell: the exec ends the subshell, the script goes on.
        ("( { exec vllm serve a; }; vllm serve never ); vllm serve b", [("a", False), ("b", False)]),
        ("f() { exec vllm serve a; }; vllm serve b", [("a", False), ("b", False)]),  # a body runs when called
        ("exec > /tmp/log 2>&1; (vllm serve a); exec vllm serve b", [("a", False), ("b", True)]),
    ],
)
def test_an_exec_in_a_group_ends_what_runs_in_its_process(script: str, served: list[tuple[str, bool]]) -> None:
    commands = [c for c in parse_script(script, {}) if c.words[:2] == ["vllm", "serve"]]
    assert [(c.words[2], c.execs) for c in commands] == served


def test_an_array_assignment_is_not_a_command() -> None:
    # (its words were read as a command: `A=(exec vllm serve m)` started a "server" named `m)`)
    commands = parse_script("CMD=(exec vllm serve m --x '(y)'); \"${CMD[@]}\"; exec vllm serve n $CMD", {"CMD": "z"})
    # The array is the command that runs (its first element `exec`: it ends the script), and `$CMD` would
    # have been its element 0. (Before arrays were read, `"${CMD[@]}"` was a command named `${CMD[@]}`.)
    assert [(c.words, c.execs) for c in commands] == [(["vllm", "serve", "m", "--x", "(y)"], True)]


def test_a_subshell_keeps_its_assignments_and_parameters_to_itself() -> None:
    script = (
        "MODEL=small; (MODEL=big; export LEN=1; set -- x; shift; exec vllm serve $MODEL); "
        'exec vllm serve "$MODEL" --max-model-len "${LEN:-4096}" "$@"'
    )
    inside, outside = parse_script(script, {}, positional=["sh", "--enforce-eager"])
    assert inside.words == ["vllm", "serve", "big"]
    assert outside.words == ["vllm", "serve", "small", "--max-model-len", "4096", "--enforce-eager"]
    # A brace group is the script's own shell: what it sets stays set.
    (command,) = parse_script("{ MODEL=big; }; exec vllm serve $MODEL", {})
    assert command.words == ["vllm", "serve", "big"]
