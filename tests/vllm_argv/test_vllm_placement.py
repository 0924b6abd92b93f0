"""Where vLLM puts the words of ``--config`` and which ``--model`` it serves, release by release, and
which command lines start vLLM at all (the command itself, not ``vllm serve`` among another program's
arguments).

``--config`` (``FlexibleArgumentParser._pull_args_from_config``, read in the wheels of 0.8.5, 0.10.1.1,
0.10.2, 0.11.0, 0.11.1, 0.12.0, 0.19.0 and 0.20.2): with ``vllm serve`` a first word that does not start
with ``-`` stays first and the config's words follow it; otherwise they go first, and a config without
``model:`` is refused. The api_server's words (no sub command): from 0.10.2 a first word starting with
``-`` puts the config first, otherwise (and always up to 0.10.1.1) the config follows the first word.

``vllm serve --model A --model B`` (0.11.1+, ``parse_args``: ``next(i for i, arg in enumerate(args) if
...)``) moves the FIRST ``--model`` to the positional model, which ``serve.py`` makes win
(``args.model = args.model_tag``). The api_server is plain argparse: the last ``--model`` wins.
The 0.19.0 cases were also run through vLLM 0.19.0's own FlexibleArgumentParser.
"""

from __future__ import annotations

import pytest

from planner.vllm.argv import locate, parse_args, parse_command

BIG = "meta-llama/Llama-3.1-70B-Instruct"
SMALL = "Qwen/Qwen2.5-0.5B-Instruct"
API = "vllm.entrypoints.openai.api_server"
LIST_CONFIG = {"c.yaml": f"model: {SMALL}\nserved-model-name: [chat]\n"}
OPTIONAL_CONFIG = {"c.yaml": f"model: {SMALL}\nhf-token: true\n"}
NO_MODEL_CONFIG = {"c.yaml": "max-num-seqs: 3\n"}


@pytest.mark.parametrize("version", ["0.8.5", "0.10.1.1", "0.11.0", "0.12.0", "0.19.0", "0.33.0"])
@pytest.mark.parametrize("files", [LIST_CONFIG, OPTIONAL_CONFIG])
def test_config_words_follow_the_positional_model(version: str, files: dict[str, str]) -> None:
    argv = [BIG, "--config", "c.yaml", "--max-model-len", "32768"]
    for command in (
        parse_command(["vllm", "serve", *argv], version=version, read_config=files.get),
        parse_args(argv, version=version, read_config=files.get),
    ):
        assert command is not None
        assert command.model == BIG and command.model_source == "positional"
        assert command.errors == []
        assert command.value("max_model_len") == "32768"


def test_config_first_when_the_first_word_is_an_option() -> None:
    command = parse_command(
        ["vllm", "serve", "-tp", "2", BIG, "--config", "c.yaml"], version="0.19.0", read_config=LIST_CONFIG.get
    )
    assert command is not None and command.errors == []
    assert command.model == BIG and command.value("served_model_name") == ["chat"]
    # `--config` first: the config's model, then the positional swallowed by its `served-model-name` list
    command = parse_command(["vllm", "serve", "--config", "c.yaml", BIG], version="0.19.0", read_config=LIST_CONFIG.get)
    assert command is not None and command.model == SMALL and command.value("served_model_name") == ["chat", BIG]


def test_serve_config_without_model_and_no_positional_first_is_refused() -> None:
    command = parse_command(
        ["vllm", "serve", "--config", "c.yaml", BIG], version="0.19.0", read_config=NO_MODEL_CONFIG.get
    )
    assert command is not None and any(e.startswith("No model specified!") for e in command.errors)
    command = parse_command(
        ["vllm", "serve", BIG, "--config", "c.yaml"], version="0.19.0", read_config=NO_MODEL_CONFIG.get
    )
    assert command is not None and command.errors == [] and command.value("max_num_seqs") == "3"


@pytest.mark.parametrize(("version", "model", "errors"), [("0.10.1.1", None, True), ("0.10.2", BIG, False)])
def test_api_server_config_placement_per_release(version: str, model: str | None, errors: bool) -> None:
    # Up to 0.10.1.1 the config's words follow the first word even when it is `--model`: `--model` then
    # meets the config's `--served-model-name` and has no value.
    argv = ["python3", "-m", API, "--model", BIG, "--config", "c.yaml"]
    command = parse_command(argv, version=version, read_config={"c.yaml": "served-model-name: [chat]\n"}.get)
    assert command is not None
    assert bool(command.errors) is errors
    if model:
        assert command.model == model and command.value("served_model_name") == ["chat"]


@pytest.mark.parametrize("version", ["0.11.1", "0.12.0", "0.19.0", "0.33.0"])
@pytest.mark.parametrize(
    "argv",
    [
        ["--model", BIG, "--model", SMALL],
        [f"--model={BIG}", "--model", SMALL],
        ["-tp", "2", "--model", BIG, f"--model={SMALL}"],
        ["--config", "c.yaml", "--model", BIG],
        ["--model", BIG, "--config", "c.yaml"],
    ],
)
def test_serve_first_model_option_wins_from_0_11_1(version: str, argv: list[str]) -> None:
    command = parse_command(["vllm", "serve", *argv], version=version, read_config=LIST_CONFIG.get)
    assert command is not None and command.errors == []
    assert command.model == BIG and command.model_source == "--model"


def test_serve_moved_model_leaves_a_positional_unrecognized() -> None:
    command = parse_command(["vllm", "serve", SMALL, "--model", BIG], version="0.19.0")
    assert command is not None and command.model == BIG and command.errors == [f"unrecognized arguments: {SMALL}"]


def test_api_server_last_model_option_wins() -> None:
    command = parse_command(["python3", "-m", API, "--model", SMALL, "--model", BIG], version="0.19.0")
    assert command is not None and command.model == BIG and command.errors == []


@pytest.mark.parametrize(
    "argv",
    [
        ["python3", "-W", "ignore", "-m", API],
        ["python3", "-X", "utf8", "-m", API],
        ["python3", "-Wignore", "-Xutf8", "-m", API],
        ["python3", "-OO", "-u", "-B", "-E", "-I", "-s", "-S", "-m", API],
        ["python3", "-uBW", "ignore", "-m", API],
        ["python3", "-um", API],
        ["python3", f"-m{API}"],
        ["python3", "--check-hash-based-pycs", "never", "-m", API],
        ["exec", "env", "-u", "X", "A=1", "nohup", "python3", "-m", API],
        ["timeout", "-s", "KILL", "1h", "nice", "-n", "5", "stdbuf", "-o", "L", "python3", "-m", API],
        ["taskset", "-c", "0-7", "numactl", "--cpunodebind=0", "-m", "0", "python3", "-m", API],
        ["tini", "--", "uv", "run", "--with", "vllm", "python3", "-m", API],
        ["conda", "run", "-n", "serve", "--no-capture-output", "python", "-m", API],
    ],
)
def test_python_options_and_launchers_before_the_api_server(argv: list[str]) -> None:
    found = locate([*argv, "--model", BIG])
    assert found is not None and found[0] == "api_server"
    command = parse_command([*argv, "--model", BIG], version="0.19.0")
    assert command is not None and command.model == BIG and command.errors == []


@pytest.mark.parametrize(
    "argv",
    [
        ["echo", "vllm", "serve", SMALL],
        ["printf", "%s", "vllm", "serve", SMALL],
        [":", "vllm", "serve", SMALL],
        ["test", "vllm", "serve", SMALL],
        ["grep", "vllm serve", "log", "vllm", "serve"],
        ["python3", "-c", "print(1)", "-m", API],
        ["python3", "script.py", "-m", API],
        ["command", "-v", "vllm", "serve"],
        ["uv", "sync", "vllm", "serve"],
    ],
)
def test_vllm_among_another_programs_arguments_is_not_vllm(argv: list[str]) -> None:
    assert locate(argv) is None


def test_python_running_the_vllm_script() -> None:
    assert locate(["python3", "-u", "/usr/local/bin/vllm", "serve", BIG]) == ("serve", 4)


# An image's args: its entrypoint (`vllm serve` or the api_server module) is not in the manifest, and
# only --model given twice with no positional model reads differently under the two.
@pytest.mark.parametrize(
    ("version", "served", "names"),
    [
        ("0.19.0", BIG, ["`vllm serve`", "first", SMALL]),  # 0.11.1+: vllm serve starts with --model
        ("0.11.1", BIG, ["`vllm serve`", "first", SMALL]),
        ("0.11.0", SMALL, ["api_server", "last", "does not start"]),  # only the api_server starts
        ("0.8.5", SMALL, ["api_server", "last"]),
        (None, BIG, ["`vllm serve`", "first"]),  # the newest table
    ],
)
def test_image_args_with_two_models_say_which_entrypoint_is_assumed(
    version: str | None, served: str, names: list[str]
) -> None:
    command = parse_args(["--model", BIG, "--max-model-len", "8192", "--model", SMALL], version=version)
    assert command.entrypoint == "image" and command.model == served and command.errors == []
    assert command.assumed is not None and all(name in command.assumed for name in names)


@pytest.mark.parametrize(
    "args",
    [
        ["--model", BIG],
        ["--model", BIG, "--model", BIG],  # the same model either way
        [BIG, "--max-model-len", "8192"],
        ["--model=" + BIG, "--max-model-len", "8192"],
    ],
)
def test_image_args_that_read_the_same_under_both_entrypoints(args: list[str]) -> None:
    command = parse_args(args, version="0.19.0")
    assert command.model == BIG and command.assumed is None


def test_a_command_never_assumes_an_entrypoint() -> None:
    for argv in (
        ["vllm", "serve", "--model", BIG, "--model", SMALL],
        ["python3", "-m", API, "--model", BIG, "--model", SMALL],
    ):
        command = parse_command(argv, version="0.19.0")
        assert command is not None and command.assumed is None
