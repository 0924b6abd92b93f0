"""Launchers in front of vLLM, each read with its own option grammar (planner.vllm.launchers).

Every form here was checked against the launcher's source (coreutils env.c/timeout.c/nice.c/stdbuf.c/
chroot.c, util-linux taskset.c/chrt.c/ionice.c/setpriv.c/su-common.c, numactl.c, tini.c, dumb-init.c,
catatonit.c, sudo parse_args.c, uv-cli lib.rs and tool/mod.rs, conda main_run.py, micromamba run.cpp,
pixi run.rs, poetry application.py, pipenv options.py, pipx main.py). A form that is not understood
(an option the table does not list, a launcher that runs no command, a form whose meaning depends on
what the command line does not say) is unreadable: None, never a guess.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.vllm.argv import find, locate, parse_command
from planner.vllm.launchers import MAX_SPLITS, split_string, unwrap
from tests.work import python_calls

M = "Qwen/Qwen2.5-7B-Instruct"
API = "vllm.entrypoints.openai.api_server"
SERVE = ["vllm", "serve", M, "--max-model-len", "4096"]


def _serve_start(prefix: list[str]) -> tuple[str, int]:
    return "serve", len(prefix) + 2


# Launcher prefixes in front of `vllm serve M --max-model-len 4096`, with their option grammar.
READ = [
    # bash builtins
    ["exec"],
    ["exec", "-a", "vllm-server"],
    ["exec", "-cl", "-a", "x", "--"],
    ["command", "-p"],
    # coreutils
    ["env"],
    ["env", "-i", "HOME=/root", "A=1"],
    ["env", "-iu", "X", "-C", "/work", "A=b=c"],
    ["env", "--unset=X", "--chdir", "/w", "--block-signal", "--default-signal=PIPE"],
    ["env", "--uns", "X"],  # getopt_long: an unambiguous prefix
    ["env", "-", "A=1"],  # `env -` is `env -i`
    ["env", "--", "A=1"],
    ["nohup"],
    ["nohup", "--"],
    ["nice"],
    ["nice", "-n", "5"],
    ["nice", "-n5"],
    ["nice", "--adjustment=-5"],
    ["nice", "-10"],
    ["nice", "--5"],
    ["timeout", "1h"],
    ["timeout", "-s", "KILL", "-k", "10s", "--preserve-status", "1h"],
    ["timeout", "--sig", "TERM", "--foreground", "30m"],
    ["stdbuf", "-oL", "-e", "L", "--input=0"],
    ["chroot", "/newroot"],
    ["chroot", "--userspec=1000:1000", "--skip-chdir", "/"],
    # GNU time / bash's `time -p`
    ["time"],
    ["time", "-p"],
    ["time", "-v", "-o", "/tmp/t", "-a", "--format=%M"],
    # util-linux
    ["setsid"],
    ["setsid", "-f", "-w"],
    ["taskset", "-c", "0-7"],
    ["taskset", "0xff"],
    ["taskset", "-ac", "0,2"],
    ["chrt", "-f", "50"],
    ["chrt", "--rr", "10"],
    ["chrt", "-o", "0"],
    ["chrt", "-d", "--sched-runtime", "5000000", "--sched-deadline=10000000", "0"],
    ["ionice", "-c", "2", "-n", "0"],
    ["ionice", "-c3", "-t"],
    ["setpriv", "--reuid=1000", "--regid=1000", "--init-groups"],
    ["setpriv", "--nnp", "--inh-caps", "-all", "--reset-env"],
    ["runuser", "-u", "vllm", "--"],
    ["runuser", "-u", "vllm", "-g", "video", "-m", "--"],
    # numactl
    ["numactl", "--cpunodebind=0", "--membind=0"],
    ["numactl", "-N", "0", "-m", "0", "-l"],
    ["numactl", "--interleave=all"],
    ["numactl", "--physcpubind", "0-15", "--localalloc"],
    ["numactl", "--cpunode", "1"],
    # inits and user switches
    ["tini", "--"],
    ["/usr/bin/tini", "-s", "-g", "--"],
    ["tini", "-e", "143", "-p", "SIGTERM", "--"],
    ["dumb-init"],
    ["dumb-init", "--"],
    ["dumb-init", "--single-child", "-r", "15:2", "--"],
    ["catatonit", "-g", "--"],
    ["gosu", "vllm"],
    ["gosu", "1000:1000"],
    ["su-exec", "vllm"],
    ["sudo", "-u", "vllm"],
    ["sudo", "-E", "-u", "vllm", "HF_HOME=/data", "-H"],
    ["sudo", "--user=vllm", "--preserve-env=PATH,HF_TOKEN", "-D", "/work"],
    ["sudo", "-nu", "vllm", "--"],
    ["sudo", "-Eu", "vllm"],  # -E takes no value (only --preserve-env=LIST does)
    # environment managers
    ["uv", "run"],
    ["uv", "run", "--with", "vllm==0.19.0", "--no-project", "--"],
    ["uv", "run", "--frozen", "-p", "3.12", "--with=vllm"],
    ["uv", "run", "-p3.12", "-qq"],
    ["uv", "--directory", "/app", "run", "--locked"],
    ["uvx"],
    ["uvx", "--from", "vllm==0.19.0"],
    ["uvx", "--python", "3.12", "--with", "flashinfer-python"],
    ["uv", "tool", "run"],
    ["uv", "tool", "run", "--from", "vllm[audio]"],
    ["conda", "run", "-n", "serve"],
    ["conda", "run", "-n", "serve", "--no-capture-output", "--cwd", "/w"],
    ["conda", "run", "-p", "/opt/env", "--live-stream", "--"],
    ["conda", "run", "--name=serve", "-s", "-v"],
    ["conda", "run", "--no-capture", "-n", "serve"],  # argparse: an unambiguous prefix
    ["mamba", "run", "-n", "serve"],
    ["micromamba", "run", "-n", "serve"],
    ["micromamba", "run", "-r", "/opt/mamba", "-n", "serve", "-a", "", "--clean-env", "-e", "A=1"],
    ["pixi", "run"],
    ["pixi", "run", "-e", "cuda", "--frozen", "-x"],
    ["pixi", "run", "--manifest-path", "/app/pixi.toml", "--environment=gpu"],
    ["pixi", "-v", "run", "--locked"],
    ["poetry", "run"],
    ["poetry", "run", "--"],
    ["poetry", "-C", "/app", "run", "--no-interaction", "--"],
    ["poetry", "--directory=/app", "run"],
    ["pipenv", "run"],
    ["pipenv", "run", "--python", "3.12"],
    ["pipx", "run"],
    ["pipx", "run", "--spec", "vllm==0.19.0"],
    ["pipx", "run", "--python", "python3.12", "--no-cache"],
    # chains
    ["tini", "--", "gosu", "vllm", "env", "A=1", "numactl", "--cpunodebind=0", "--", "nice", "-n", "5"],
    ["dumb-init", "--", "uv", "run", "--with", "vllm", "timeout", "1d"],
]


@pytest.mark.parametrize("prefix", READ, ids=[" ".join(p) or "bare" for p in READ])
def test_launchers_in_front_of_vllm_serve_are_read(prefix: list[str]) -> None:
    argv = [*prefix, *SERVE]
    assert locate(argv) == _serve_start(prefix)
    command = parse_command(argv, version="0.19.0")
    assert command is not None and command.model == M and command.values == {"max_model_len": "4096"}
    assert command.model_index == len(prefix) + 2 and command.errors == []


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        # `uv run -m MODULE` is `python -m MODULE` (uv-cli RunArgs.module: "Equivalent to `python -m <module>`").
        (["uv", "run", "-m", API, "--model", M], 4),
        (["uv", "run", "--module", API, "--model", M], 4),
        (["uv", "run", "--with", "vllm", "-m", API, "--model", M], 6),
        (["uv", "run", "-m", "--with", "vllm", API, "--model", M], 6),  # -m is a flag: options may follow it
        (["uv", "run", "-qm", API, "--model", M], 4),
        (["uv", "run", "--frozen", "-m", "--", API, "--model", M], 6),
        (["uv", "run", "python", "-m", API, "--model", M], 5),
        (["uv", "run", "--with", "vllm", "python3.12", "-u", "-m", API, "--model", M], 8),
        (["uv", "run", "-m", "vllm.entrypoints.grpc_server", "--model", M], 4),
        (["pixi", "run", "python", "-m", API, "--model", M], 5),
        (["conda", "run", "-n", "x", "python", "-m", API, "--model", M], 7),
    ],
)
def test_uv_run_module_and_python_forms_reach_the_api_server(argv: list[str], start: int) -> None:
    assert locate(argv) == ("api_server", start)
    command = parse_command(argv, version="0.19.0")
    assert command is not None and command.model == M and command.model_index == start + 1


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        # uvx TARGET: uv's Target::parse runs NAME for NAME[extras]@VERSION and NAME@latest.
        (["uvx", "vllm", "serve", M], 3),
        (["uvx", "vllm@0.19.0", "serve", M], 3),
        (["uvx", "vllm@latest", "serve", M], 3),
        (["uvx", "vllm[audio,tensorizer]@0.19.0", "serve", M], 3),
        (["uv", "tool", "run", "vllm@0.19.0", "serve", M], 5),
        (["uvx", "--from", "vllm", "vllm", "serve", M], 5),
        (["uvx", "--from", "git+https://github.com/vllm-project/vllm@main", "vllm", "serve", M], 5),
    ],
)
def test_uvx_targets_name_the_executable(argv: list[str], start: int) -> None:
    assert locate(argv) == ("serve", start)
    command = parse_command(argv)
    assert command is not None and command.model == M


@pytest.mark.parametrize(
    "argv",
    [
        ["uvx", "vllm[audio]", "serve", M],  # without @VERSION the word is the executable's name: not found
        ["uvx", "vllm==0.19.0", "serve", M],  # a version range needs --from
        ["uvx", "vllm@not-a-version", "serve", M],
        ["uvx", "--from", "vllm", "vllm@0.19.0", "serve", M],  # with --from the word is the executable, as is
    ],
)
def test_uvx_targets_that_do_not_run_vllm(argv: list[str]) -> None:
    assert find(argv) is None


@pytest.mark.parametrize(
    ("module", "entrypoint", "start"),
    [
        ("vllm.entrypoints.openai.api_server", "api_server", 3),
        ("vllm.entrypoints.api_server", "api_server", 3),  # the demo server: engine args (0.8.5-0.20)
        ("vllm.entrypoints.grpc_server", "api_server", 3),  # 0.19+
        ("vllm.entrypoints.launchers.api_server.entry", "api_server", 3),  # 0.33
        ("vllm.entrypoints.launchers.grpc_server", "api_server", 3),  # 0.33
    ],
)
def test_vllm_modules_that_take_engine_arguments(module: str, entrypoint: str, start: int) -> None:
    assert locate(["python3.12", "-m", module, "--model", M]) == (entrypoint, start)


@pytest.mark.parametrize(
    "argv",
    [
        ["python3.12", "-u", "-m", "vllm.entrypoints.cli.main", "serve", M],
        ["/opt/venv/bin/python3", "-X", "faulthandler", "-m", "vllm.entrypoints.cli.main", "serve", M],
    ],
)
def test_the_cli_module_with_serve(argv: list[str]) -> None:
    found = locate(argv)
    assert found is not None and found[0] == "serve" and argv[found[1]] == M


@pytest.mark.parametrize(
    "argv",
    [
        ["python3", "-m", "vllm", "serve", M],  # vllm has no __main__ (0.8.5-0.33.0)
        ["python3", "-m", "vllm.entrypoints.openai.run_batch", "-i", "in.jsonl", "-o", "out.jsonl", "--model", M],
        ["vllm", "run-batch", "-i", "in.jsonl", "-o", "out.jsonl", "--model", M],
        ["vllm", "launch", "render", M],  # GPU-less render server (0.19+)
    ],
)
def test_vllm_programs_that_are_not_a_server(argv: list[str]) -> None:
    assert find(argv) is None


# Forms that are not read: the launcher runs no command, or its form is not understood. The old reader
# took unknown options for flags and read several of these as `vllm serve` with the wrong words.
UNREAD = [
    # options the launcher's table does not list (a value-taking one would shift every word after it)
    ["timeout", "--frobnicate", "5", "1h"],
    ["nohup", "--detach"],
    ["numactl", "--no-such-option"],
    ["uv", "run", "--no-such-option"],
    ["env", "--i"],  # ambiguous prefix: --ignore-environment, --ignore-signal
    ["numactl", "--pref", "0"],  # --preferred, --preferred-many: ambiguous though both take a value
    ["conda", "run", "--n", "x"],  # argparse: --name, --no-capture-output
    ["env", "-x"],
    ["gosu", "--preserve-env", "vllm"],
    # no command runs
    ["taskset", "-p", "0xff"],  # taskset -p MASK PID: sets a running process's affinity
    ["taskset", "-cp", "0-7"],
    ["chrt", "-p", "0"],
    ["chrt", "-m"],
    ["ionice", "-c", "3", "-p", "1"],
    ["numactl", "--show"],
    ["numactl", "--shm", "/dev/shm/x", "--membind=0"],
    ["command", "-v"],
    ["env", "--version"],
    ["sudo", "-l"],
    ["sudo", "-e"],
    ["setpriv", "--dump"],
    ["uv", "sync"],
    ["uv", "pip", "install"],
    ["conda", "activate", "x", "&&"],
    ["tini", "-l"],
    ["catatonit", "-P"],
    # forms whose meaning the command line does not settle
    ["sudo", "-h"],  # -h alone is help, or takes the next word as a host
    ["chrt", "-o"],  # newer util-linux: no priority; older: "vllm" is an invalid priority
    ["runuser", "vllm", "-c"],  # su mode: the command is a shell string
    ["runuser", "-u", "vllm", "-l", "--"],  # -l is refused with -u
    ["runuser", "vllm"],
    ["pixi", "run", "--script", "x.py"],
    ["pipx", "run", "--"],
    ["uvx", "--python", "-x"],  # clap: a value never starts with "-"
    ["conda", "run", "-n", "-x"],
]


@pytest.mark.parametrize("prefix", UNREAD, ids=[" ".join(p) for p in UNREAD])
def test_launcher_forms_that_are_not_read(prefix: list[str]) -> None:
    argv = [*prefix, *SERVE]
    assert unwrap(argv) is None or find(argv) is None
    assert locate(argv) is None and parse_command(argv) is None


@pytest.mark.parametrize(
    "argv",
    [
        # GNU getopt without "+" (tini, catatonit, runuser) takes every later "-x" for its own option.
        ["tini", *SERVE],
        ["catatonit", *SERVE],
        ["runuser", "-u", "vllm", *SERVE],
        # poetry: a `--` later on the line makes cleo read options anywhere (only `run [opts] -- CMD` is read).
        ["poetry", "run", *SERVE, "--", "x"],
        # an assignment after a launcher other than env/sudo is the program it runs
        ["nohup", "VLLM_USE_V1=1", *SERVE],
        ["timeout", "1h", "A=1", *SERVE],
    ],
)
def test_launchers_whose_options_may_follow_the_command(argv: list[str]) -> None:
    assert locate(argv) is None


def test_permuting_launchers_without_options_after_the_command_are_read() -> None:
    assert locate(["tini", "vllm", "serve", M]) == ("serve", 3)
    assert locate(["runuser", "-u", "vllm", "vllm", "serve", M]) == ("serve", 5)


def test_chrt_priority_must_be_a_number() -> None:
    assert locate(["chrt", "-f", "99", *SERVE]) == ("serve", 5)
    assert locate(["chrt", "-f", "high", *SERVE]) is None


def test_sudo_reads_environment_assignments_between_options() -> None:
    argv = ["sudo", "A=1", "-u", "vllm", "B=2", "--", *SERVE]
    assert locate(argv) == ("serve", 8)
    assert locate(["sudo", "-u", "vllm", "--", "A=1", *SERVE]) is None  # after `--` it is the program


# env -S / --split-string: GNU env splits the string into words and reads options from them again.
@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["env", "-S", "vllm serve M --max-model-len 4096"], ["vllm", "serve", "M", "--max-model-len", "4096"]),
        (["env", "-Svllm serve M"], ["vllm", "serve", "M"]),
        (["env", "--split-string=vllm serve M"], ["vllm", "serve", "M"]),
        (["env", "--split", "vllm serve M"], ["vllm", "serve", "M"]),
        (["env", "-iS", "A=1 vllm serve M"], ["vllm", "serve", "M"]),
        (["env", "-S", "-i A=1 vllm serve M"], ["vllm", "serve", "M"]),  # options inside the string
        (["env", "-S", "env -S 'vllm serve M'"], ["vllm", "serve", "M"]),  # nested
        (["env", "-S", "vllm serve 'my model' \"-tp\" 2"], ["vllm", "serve", "my model", "-tp", "2"]),
        (["env", "-S", "vllm\\_serve\\_M"], ["vllm", "serve", "M"]),  # \_ separates outside double quotes
        (["env", "-S", "vllm serve M # a comment"], ["vllm", "serve", "M"]),
        (["env", "-S", "vllm serve M \\c ignored"], ["vllm", "serve", "M"]),
        (["env", "-S", "vllm serve ${MODEL}"], ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]),
        (["tini", "--", "env", "-S", "nice -n 5 vllm serve M"], ["vllm", "serve", "M"]),
    ],
)
def test_env_split_string_is_read(argv: list[str], words: list[str]) -> None:
    found = find(argv, {"MODEL": M})
    assert found is not None and found.entrypoint == "serve"
    assert list(found.words) == words
    assert found.argv_start is None  # vLLM's words come from the string: no argv position to edit
    assert locate(argv) is None  # ... so the argv-only reader does not claim them


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["env", "-S", "A=1 nice -n 5", *SERVE], 5),
        (["env", "-S", "vllm serve", M, "--max-model-len", "4096"], 3),  # vLLM's own words are argv's
    ],
)
def test_env_split_string_in_front_of_argv_words_keeps_their_positions(argv: list[str], start: int) -> None:
    found = find(argv)
    assert found is not None and found.argv_start == start
    assert locate(argv) == ("serve", start)
    command = parse_command(argv, version="0.19.0")
    assert command is not None and command.model == M and command.model_index == start


@pytest.mark.parametrize(
    "text",
    [
        "vllm serve 'unterminated",
        'vllm serve "unterminated',
        "vllm serve \\q",  # invalid sequence
        "vllm serve \\",  # backslash at the end
        'vllm serve "\\c"',  # \c inside double quotes
        "vllm serve $MODEL",  # only ${NAME} is expanded
        "vllm serve ${UNKNOWN}",  # a value not known here
        "vllm serve ${1x}",
    ],
)
def test_env_split_strings_env_refuses_or_that_depend_on_unknown_values(text: str) -> None:
    assert find(["env", "-S", text], {"MODEL": M}) is None


def test_split_string_follows_gnu_env() -> None:
    assert split_string("a  'b c'  \"d e\" ''") == ["a", "b c", "d e", ""]
    assert split_string("\"a\\_b\" 'c\\'d' 'e\\nf' \\t") == ["a b", "c'd", "e\\nf", "\t"]
    assert split_string("a#b #c d") == ["a#b"]
    assert split_string("${A}${B}x", {"A": "1", "B": ""}) == ["1x"]
    assert split_string("'${A}'", {"A": "1"}) == ["${A}"]
    assert split_string("") == [] and split_string("   ") == []


def _nested(depth: int) -> list[str]:
    """`env -S "env -S \\"... vllm serve M\\""` nested ``depth`` times, escaped with \\_ and \\\\."""
    text = "vllm serve M"
    for _ in range(depth - 1):
        text = "env -S " + text.replace("\\", "\\\\").replace(" ", "\\_")
    return ["env", "-S", text]


def test_nested_split_strings_are_read_up_to_the_bound() -> None:
    found = find(_nested(MAX_SPLITS))
    assert found is not None and list(found.words) == ["vllm", "serve", "M"]
    assert find(_nested(MAX_SPLITS + 1)) is None


def test_split_strings_in_a_chain_count_towards_the_bound() -> None:
    chain = ["env", "-S", "nohup"] * MAX_SPLITS
    assert locate([*chain, *SERVE]) == ("serve", len(chain) + 2)
    assert locate(["env", "-S", "nohup", *chain, *SERVE]) is None


# Bounds: every path stays linear in the command line (a manifest author chooses it). Work is counted, not
# timed (the machines are shared: speed belongs in benchmarks): the Python calls one reading makes.
def _calls(argv: list[str]) -> int:
    return python_calls(find, argv, {"X": "y"})


@pytest.mark.parametrize(
    "unit",
    [
        ["nohup"],
        ["tini"],  # the permuting check looks at the words after each tini
        ["env", "A=1"],
        ["timeout", "1h"],
        ["numactl", "--cpunodebind=0"],
        ["uv", "run"],
        ["poetry", "run"],  # the `--`-later check
        ["gosu", "u"],
        ["sudo", "-u", "u", "A=1"],
        ["env", "--unset", "X"],
    ],
)
def test_a_long_chain_of_launchers_is_linear(unit: list[str]) -> None:
    small, large = unit * 2_000, unit * 8_000
    assert find([*large, *SERVE]) is not None or unit in (["tini"], ["poetry", "run"])
    calls_small, calls_large = _calls([*small, *SERVE]), _calls([*large, *SERVE])
    assert calls_large <= 4.5 * calls_small + 100  # 4x the words: about 4x the work, never 16x


def test_huge_and_hostile_split_strings_are_linear() -> None:
    huge = "vllm serve M " + "--served-model-name x " * 30_000  # 660 kB, 60k words
    found = find(["env", "-S", huge])
    assert found is not None and len(found.words) == 3 + 60_000
    for hostile in ("$" * 200_000, "\\_" * 200_000, "'" * 200_001, "${X}" * 100_000, "#" + "a" * 500_000):
        small, large = hostile[: len(hostile) // 4], hostile
        calls_small = _calls(["env", "-S", small, *SERVE])
        calls_large = _calls(["env", "-S", large, *SERVE])
        assert calls_large <= 4.5 * calls_small + 100, hostile[:8]


def test_many_split_strings_stop_at_the_bound_in_linear_work() -> None:
    def argv(words: int) -> list[str]:
        return ["env", "-S", "-S -S -S -S -S -S -S -S -S -S -S x"] + ["x"] * words

    assert find(argv(50_000)) is None
    assert _calls(argv(50_000)) <= 4.5 * _calls(argv(12_500)) + 100


WORDS = st.sampled_from(
    [
        "env", "-S", "-i", "-u", "A=1", "--", "-", "nohup", "tini", "gosu", "u", "timeout", "1h", "uv", "run",
        "-m", "uvx", "tool", "vllm", "serve", "M", "python", "--model", "sudo", "-h", "x y", "'", "\\_", "${X}",
        "conda", "-n", "numactl", "--cpunodebind=0", "chrt", "5", "poetry", "vllm@0.19.0", API,
    ]
)  # fmt: skip


@given(st.lists(WORDS, max_size=30))
def test_unwrap_never_raises_and_keeps_argv_positions(argv: list[str]) -> None:
    unwrapped = unwrap(argv, {"X": "y z"})
    if unwrapped is None:
        return
    assert len(unwrapped.words) == len(unwrapped.origins) >= 1
    for word, origin in zip(unwrapped.words[1:], unwrapped.origins[1:], strict=True):
        assert origin is None or argv[origin] == word  # a word with an argv position is that argv word
    found = find(argv, {"X": "y z"})
    if found is not None and found.argv_start is not None:
        assert list(found.words[found.start :]) == argv[found.argv_start :]
