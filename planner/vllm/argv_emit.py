"""Edit vLLM argv lists minimally: replace the winning occurrence in place, or append in the user's style."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from planner.vllm.argv_values import option_name

if TYPE_CHECKING:
    from planner.vllm.argv import VllmCommand


class Style(BaseModel):
    """How the user writes flags, so added flags look like theirs."""

    model_config = ConfigDict(frozen=True)

    underscores: bool = False
    equals: bool = False


def detect_style(argv: Sequence[str], command: VllmCommand) -> Style:
    long_written = [f for f in command.flags if f.source == "argv" and f.written.startswith("--")]
    with_value = [f for f in long_written if f.inline or f.value_index is not None]
    underscores = sum("_" in argv[f.index] for f in long_written if f.index is not None)
    dashes = sum("-" in argv[f.index][2:].split("=")[0] for f in long_written if f.index is not None)
    equals = sum(f.inline for f in with_value)
    return Style(underscores=underscores > dashes, equals=bool(with_value) and equals * 2 > len(with_value))


class ArgEdit(BaseModel):
    """One minimal change to an argv list: replace one word, or insert words (``index`` None = append)."""

    model_config = ConfigDict(frozen=True)

    op: Literal["replace", "insert"]
    index: int | None
    words: list[str]


def flag_edits(
    argv: Sequence[str],
    command: VllmCommand,
    changes: Mapping[str, str],
    *,
    style: Style | None = None,
) -> list[ArgEdit]:
    """The edits that set each ``dest`` in ``changes`` to its value, in order.

    The winning occurrence of a flag is edited in place, keeping the user's spelling
    (``--max_model_len=8k`` stays ``--max_model_len=<v>``, ``-tp 2`` stays ``-tp <v>``); a missing flag is
    appended in the user's style (underscores, ``=``), before a ``--`` separator if there is one. Flags
    that only come from ``--config`` are overridden by an appended CLI flag (vLLM: CLI > config).
    """
    edits: list[ArgEdit] = []
    style = style or detect_style(argv, command)
    tail = list(argv[command.args_start :])
    insert_at = command.args_start + tail.index("--") if "--" in tail else None
    for dest, value in changes.items():
        flag = command.last(dest)
        if flag is not None and flag.source == "argv" and flag.index is not None and not flag.dotted:
            if flag.inline:
                edits.append(
                    ArgEdit(op="replace", index=flag.index, words=[f"{argv[flag.index].split('=', 1)[0]}={value}"])
                )
                continue
            if flag.value_index is not None:
                edits.append(ArgEdit(op="replace", index=flag.value_index, words=[value]))
                continue
        option = "--" + dest if style.underscores else option_name(dest)
        words = [f"{option}={value}"] if style.equals else [option, value]
        edits.append(ArgEdit(op="insert", index=insert_at, words=words))
        if insert_at is not None:
            insert_at += len(words)
    return edits


def apply_edits(argv: Sequence[str], edits: Sequence[ArgEdit]) -> list[str]:
    result = list(argv)
    for edit in edits:
        if edit.op == "replace" and edit.index is not None:
            result[edit.index] = edit.words[0]
        elif edit.index is None:
            result += edit.words
        else:
            result[edit.index : edit.index] = edit.words
    return result


def set_flag(
    argv: Sequence[str], command: VllmCommand, dest: str, value: str, *, style: Style | None = None
) -> list[str]:
    """``argv`` with ``dest`` set to ``value`` (see :func:`flag_edits`)."""
    return apply_edits(argv, flag_edits(argv, command, {dest: value}, style=style))


def format_args(values: Mapping[str, str]) -> list[str]:
    """Canonical ``--flag value`` words for a dest -> value mapping (for messages and plans)."""
    words: list[str] = []
    for dest, value in values.items():
        words += [option_name(dest), value]
    return words
