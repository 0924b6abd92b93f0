"""Bash arrays and command substitutions in `bash -c` scripts, read as bash runs them.

Before: `ARGS=(...)` was dropped and `"${ARGS[@]}"` left as written, so vLLM's parser was said to reject
`${ARGS}` (KVP043) and the array's flags were not planned; `$(python3 -c "print(4096)")` was split at its
blanks into junk arguments (KVP043 again). A value only the running script gives is KVP032 ("not
checked"), never a rejection."""

from __future__ import annotations

import pytest

from planner.errors import InputCapError, UnreadableScriptError
from planner.k8s.envvars import MAX_EXPANSION_CHARS
from planner.k8s.shell import ShellCommand, parse_script, split_with_separators
from planner.k8s.shell_expand import MAX_ARRAY_ELEMENTS
from planner.k8s.shell_scan import MAX_WORD_NESTING
from tests.k8s.test_unreadable_commands import a100_server, enforced
from tests.work import python_calls

M = "meta-llama/Llama-3.1-8B-Instruct"


def served(script: str, env: dict[str, str] | None = None) -> ShellCommand:
    """The last `vllm serve` command of ``script``."""
    return [c for c in parse_script(script, env or {}) if c.words[:2] == ["vllm", "serve"]][-1]


def args(script: str, env: dict[str, str] | None = None) -> list[str]:
    return served(script, env).words[2:]


# -- arrays ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (
            'ARGS=(--max-model-len 131072 --gpu-memory-utilization 0.95)\nexec vllm serve m "${ARGS[@]}"',
            ["m", "--max-model-len", "131072", "--gpu-memory-utilization", "0.95"],
        ),
        # quoted elements, elements with expansions (an unquoted one splits into elements), `\` continuations
        (
            'X=8192; E="--a 1"; ARGS=("--max-model-len" "$X" --name "a b" $E) \\\n  && vllm serve m "${ARGS[@]}"',
            ["m", "--max-model-len", "8192", "--name", "a b", "--a", "1"],
        ),
        ('ARGS=(--x 1 \\\n  --y 2)\nvllm serve m "${ARGS[@]}"', ["m", "--x", "1", "--y", "2"]),
        # newlines and comments inside the parentheses (a `)` or a quote in the comment included)
        (
            "ARGS=(\n  --max-model-len 8192  # the context (tokens)\n  # don't\n  --enforce-eager\n)\n"
            'vllm serve m "${ARGS[@]}"',
            ["m", "--max-model-len", "8192", "--enforce-eager"],
        ),
        ('A=(--x 1); A+=(--y "2 3"); A+=(); vllm serve m "${A[@]}"', ["m", "--x", "1", "--y", "2 3"]),
        ('declare -a A=(--x 1); readonly -a B=(--y); vllm serve m "${A[@]}" "${B[@]}"', ["m", "--x", "1", "--y"]),
        ('f() {\n  local -a A=(--x 1)\n  vllm serve m "${A[@]}"\n}\nf', ["m", "--x", "1"]),
        (
            'declare -a A; A[0]=--x; A[1]=1; i=3; A[$i]=--y; A[${#A[@]}]=z; vllm serve m "${A[@]}"',
            ["m", "--x", "1", "z"],  # (`${#A[@]}` is 3: z replaces --y, as in bash)
        ),
        ('A=([2]=c [0]=a b); vllm serve m "${A[@]}" ${#A[@]}', ["m", "a", "b", "c", "3"]),
        ('if true; then A=(--x 1); fi; vllm serve m "${A[@]}"', ["m", "--x", "1"]),
        # the expansions
        ('A=("a b" c); vllm serve m ${A[@]}', ["m", "a", "b", "c"]),  # unquoted: split
        ('A=("a b" c); vllm serve m ${A[*]}', ["m", "a", "b", "c"]),
        ('A=("a b" c); vllm serve m "${A[*]}"', ["m", "a b c"]),  # one word
        ('A=("a b" c); vllm serve m "${A[1]}" "${A[-1]}" $A ${A} "${A[7]}"', ["m", "c", "c", "a", "b", "a", "b", ""]),
        ('E=(); vllm serve m "${E[@]}" x "${E[@]}"', ["m", "x"]),  # none when empty
        ('A=(""); vllm serve m "${A[@]}"', ["m", ""]),  # an empty element is a word
        ('A=(a); A=b; vllm serve m "${A[@]}" "${#A[@]}"', ["m", "b", "1"]),  # `A=v` sets element 0
        ('A=(a b); A+=c; vllm serve m "${A[@]}"', ["m", "ac", "b"]),
        ('vllm serve m "${MODEL[@]}" ${MODEL[0]}', ["m", "x", "x"]),  # a variable is an array of one
    ],
)
def test_indexed_arrays_expand_as_bash_expands_them(script: str, expected: list[str]) -> None:
    assert args(script, {"MODEL": "x"}) == expected


def test_an_array_set_in_a_subshell_is_gone_after_it() -> None:
    script = (
        'A=(--x); (A+=(--y); A[5]=z; B=(1); exec vllm serve a "${A[@]}" "${B[@]}"); '
        'exec vllm serve b "${A[@]}" "${B[@]}"'
    )
    inside, outside = [c.words for c in parse_script(script, {}) if c.words[:2] == ["vllm", "serve"]]
    assert inside == ["vllm", "serve", "a", "--x", "--y", "z", "1"]
    assert outside == ["vllm", "serve", "b", "--x"]
    # A brace group is the script's own shell: what it sets stays set.
    assert args('A=(--x); { A+=(--y); }; vllm serve m "${A[@]}"') == ["m", "--x", "--y"]


def test_newlines_inside_an_array_assignment_are_not_separators_or_subshells() -> None:
    script = "ARGS=(\n  --x '(y)'\n  --z \")\"\n)\nexec vllm serve m"
    assert split_with_separators(script) == [("ARGS=(\n  --x '(y)'\n  --z \")\"\n)", "\n"), ("exec vllm serve m", "")]
    assert args(script.replace("exec vllm serve m", 'exec vllm serve m "${ARGS[@]}"')) == [
        "m",
        "--x",
        "(y)",
        "--z",
        ")",
    ]


@pytest.mark.parametrize(
    ("script", "kept"),
    [
        ('declare -A O=([max]=8192); vllm serve m --max-model-len "${O[max]}"', "${O[max]}"),  # associative
        ('declare -A O; O[max]=8192; vllm serve m "${O[@]}"', "${O[@]}"),
        ('A=(1 2); vllm serve m "--x=${A[@]}"', "${A[@]}"),  # words joined to the text around them
        ('A=(1 2); vllm serve m "${A[@]:1}"', "${A[@]:1}"),  # slices, defaults on elements
        ('A=(1 2); A[i+1]=3; vllm serve m "${A[@]}"', "${A[@]}"),  # arithmetic in a subscript
        ('mapfile -t ARGS < /cfg/args; vllm serve m "${ARGS[@]}"', "${ARGS[@]}"),  # filled from input
        ('readarray ARGS < /cfg/args; vllm serve m "${ARGS[@]}"', "${ARGS[@]}"),
        ('read -ra ARGS <<< "$EXTRA"; vllm serve m "${ARGS[@]}"', "${ARGS[@]}"),
    ],
)
def test_what_arrays_do_that_is_not_modelled_stays_as_written_and_unknown(script: str, kept: str) -> None:
    command = served(script)
    assert kept in " ".join(command.words) and kept in command.runtime


# -- command substitutions ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "word"),
    [
        ('$(python3 -c "print(4096)")', '$(python3 -c "print(4096)")'),
        ('"$(cat /cfg/len)"', "$(cat /cfg/len)"),
        ("`cat /cfg/len`", "`cat /cfg/len`"),
        ('"$(echo "$(cat "/a b")")"', '$(echo "$(cat "/a b")")'),  # nested, with quotes inside
        ("$(( (1 + 2) * 1024 ))", "$(( (1 + 2) * 1024 ))"),
        ("x$(printf '%s' 'a )')y", "x$(printf '%s' 'a )')y"),
        ('"${LEN:-$(cat "/cfg/a b")}"', '$(cat "/cfg/a b")'),  # in a default inside double quotes
    ],
)
def test_a_command_substitution_is_one_unit_of_its_word(written: str, word: str) -> None:
    command = served(f"exec vllm serve m --max-model-len {written} --enforce-eager")
    assert command.words[2:] == ["m", "--max-model-len", word, "--enforce-eager"]
    assert command.runtime and all(part in word for part in command.runtime)


def test_a_variable_holding_a_substitution_carries_it() -> None:
    command = served('L=$(cat /cfg/len); A=(--y "$(hostname -s)"); exec vllm serve m --max-model-len $L "$L" "${A[@]}"')
    assert command.words[3:] == ["--max-model-len", "$(cat /cfg/len)", "$(cat /cfg/len)", "--y", "$(hostname -s)"]
    assert command.runtime == ["$(cat /cfg/len)", "$(hostname -s)"]


# -- what planner check says ---------------------------------------------------------------------------------------


def test_an_array_of_flags_is_planned_not_rejected() -> None:
    script = f'ARGS=(--max-model-len 131072 --gpu-memory-utilization 0.95)\nexec vllm serve {M} "${{ARGS[@]}}"'
    entry = enforced(a100_server(script))
    assert "KVP043" not in entry.codes, entry.messages  # was: unrecognized arguments: ${ARGS}
    assert entry.model == M and entry.args.get("max_model_len") == 131072
    assert entry.args.get("gpu_memory_utilization") == 0.95


@pytest.mark.parametrize(
    ("written", "what"),
    [
        ('--max-model-len $(python3 -c "print(4096)")', "--max-model-len"),  # was KVP043: '$(python3'
        ('--max-model-len "$(cat /cfg/len)"', "--max-model-len"),  # was KVP043: invalid value
        ("--max-model-len=`cat /cfg/len`", "--max-model-len"),
        ('--gpu-memory-utilization "$(cat /cfg/util)"', "--gpu-memory-utilization"),
        ("$(cat /cfg/extra-args)", "vLLM's arguments"),  # words vLLM receives are not known
        ('--port 8000 "${O[@]}"', "vLLM's arguments"),  # (O is associative: `declare -A O=(...)` first)
        ('"${FILLED[@]}"', "vLLM's arguments"),  # (`mapfile -t FILLED < /cfg/args` first)
    ],
)
def test_a_value_only_the_running_script_gives_is_not_checked_never_rejected(written: str, what: str) -> None:
    script = f"declare -A O=([max-model-len]=1)\nmapfile -t FILLED < /cfg/args\nexec vllm serve {M} {written}"
    entry = enforced(a100_server(script))
    assert entry.codes == ["KVP032"], entry.messages
    (finding,) = entry.findings
    assert (
        finding.severity == "warn"
        and f"{what} not checked" in finding.message
        and "when the script runs" in finding.message
    )


def test_a_substitution_in_a_flag_that_does_not_size_is_planned() -> None:
    entry = enforced(a100_server(f'exec vllm serve {M} --max-model-len 8192 --served-model-name "$(hostname)"'))
    assert not {"KVP032", "KVP043"} & set(entry.codes), entry.messages
    assert entry.args.get("max_model_len") == 8192


# -- bounds on hostile scripts --------------------------------------------------------------------------------------


def _cap(script: str) -> InputCapError:
    with pytest.raises(InputCapError) as raised:
        parse_script(script, {})
    assert raised.value.code == "KVP074"
    return raised.value


def test_a_huge_array_is_bounded_and_costs_no_more_past_the_bound() -> None:
    def huge(elements: int) -> str:
        return "A=(" + "x " * elements + ')\nexec vllm serve m "${A[@]}"'

    assert _cap(huge(MAX_ARRAY_ELEMENTS + 1)).limit == MAX_ARRAY_ELEMENTS
    # Ten times the elements: the scan of the text grows with it (linear), the reading stops at the bound.
    assert python_calls(_cap, huge(100_000)) <= 6 * python_calls(_cap, huge(10_000))
    assert args(huge(100).replace("x ", "x ", 100)) == ["m"] + ["x"] * 100


def test_arrays_doubling_themselves_hit_the_expansion_bound() -> None:
    def doubling(lines: int) -> str:
        return "A=(0123456789)\n" + 'A=("${A[@]}" "${A[@]}")\n' * lines + 'exec vllm serve m "${A[@]}"'

    assert _cap(doubling(40)).limit in (MAX_EXPANSION_CHARS, MAX_ARRAY_ELEMENTS)
    # A hundred times the lines: the reading stops at the bound, only the scan of the text grows.
    assert python_calls(_cap, doubling(4_000)) <= 4 * python_calls(_cap, doubling(40))
    # Empty elements cost no characters: the element bound stops those.
    assert _cap(doubling(40).replace("0123456789", '""')).limit == MAX_ARRAY_ELEMENTS
    assert enforced(a100_server(doubling(40))).codes == ["KVP074"]  # as for variables doubling themselves
    # Appending one element in each of many subshells copies the array each time: charged, so bounded too.
    many = "A=(" + "0123456789 " * 1_000 + ")\n" + "(A+=(x))\n" * 1_000 + "exec vllm serve m"
    _cap(many)


def test_deeply_nested_substitutions_are_unreadable_with_linear_work() -> None:
    def nested(levels: int) -> str:
        return "exec vllm serve m --x " + "$(echo " * levels + "1" + ")" * levels

    assert served(nested(MAX_WORD_NESTING - 1)).words[-1] == "$(echo " * (MAX_WORD_NESTING - 1) + "1" + ")" * (
        MAX_WORD_NESTING - 1
    )

    def unreadable(script: str) -> None:
        with pytest.raises(UnreadableScriptError, match=f"nested deeper than {MAX_WORD_NESTING}"):
            parse_script(script, {})

    unreadable(nested(MAX_WORD_NESTING + 1))
    assert python_calls(unreadable, nested(100_000)) <= 1.2 * python_calls(unreadable, nested(1_000))
    entry = enforced(a100_server(nested(100)))
    assert entry.decision == "skip" and entry.codes == ["KVP037"]


def test_many_substitutions_cost_linear_work_and_name_a_bounded_few() -> None:
    def calls(count: int) -> int:
        script = "L=" + "$(a)" * count + "; X=$L; exec vllm serve m " + "$(b) " * (count // 2)
        return python_calls(parse_script, script, {})

    assert calls(12_000) <= 4.5 * calls(3_000) + 100
    assert len(served("exec vllm serve m " + " ".join(f"$(c{i})" for i in range(100))).runtime) == 16
