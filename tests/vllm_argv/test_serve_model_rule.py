"""`vllm serve --model X`, release by release, as each release's own parser treats it.

vllm 0.8.5 .. 0.11.0 (vllm/utils: FlexibleArgumentParser.parse_args): ValueError when a word equals
"--model" (``--model=X`` is not that word and passes). vllm 0.11.1 and 0.11.2
(vllm/utils/argparse_utils.py): a deprecation warning, and ``--model X`` / ``--model=X`` become the
positional model. Checked in the wheels of 0.8.5, 0.10.1.1, 0.10.2, 0.11.0, 0.11.1, 0.11.2, 0.12.0.
"""

from __future__ import annotations

import pytest

from planner.vllm.argv import parse_command

MODEL = "Qwen/Qwen2.5-7B-Instruct"


@pytest.mark.parametrize("version", ["0.8.5", "0.10.1.1", "0.10.2", "0.11.0"])
def test_refused_up_to_0_11_0_and_the_message_names_the_release(version: str) -> None:
    command = parse_command(["vllm", "serve", "--model", MODEL], version=version)
    assert command is not None
    refusals = [e for e in command.errors if "refuses `vllm serve --model`" in e]
    assert refusals and refusals[0].startswith(f"vLLM {version} refuses")


@pytest.mark.parametrize("version", ["0.11.1", "0.11.2", "0.12.0", "0.19.0"])
def test_accepted_and_moved_from_0_11_1(version: str) -> None:
    command = parse_command(["vllm", "serve", "-tp", "2", "--model", MODEL, "--enforce-eager"], version=version)
    assert command is not None and command.errors == []
    assert command.model == MODEL and command.model_source == "--model"


def test_equals_form_passes_the_old_check() -> None:
    command = parse_command(["vllm", "serve", f"--model={MODEL}"], version="0.10.1.1")
    assert command is not None and command.errors == [] and command.model == MODEL


def test_unknown_release_does_not_reject() -> None:
    command = parse_command(["vllm", "serve", "--model", MODEL], version=None)
    assert command is not None and command.errors == []
