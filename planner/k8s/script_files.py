"""The commands a container's command line runs, through shell scripts and the script files they run.

``sh -c SCRIPT`` is read by :mod:`planner.k8s.shell`. Scripts also run other scripts: a ``bash -c "..."``
inside a script, ``bash /scripts/start.sh ARG``, ``. /scripts/env.sh``, or a file run by its path. A file
is only known when it comes from a ConfigMap of the same manifest stream (``planner check``:
:mod:`planner.k8s.configfiles`); the webhook makes no API calls and sees no files, so there such a
container stays "cannot read" (KVP037). production-stack's Ray head, for one, copies its entrypoint
script out of a ConfigMap and runs the copy: ``cp SRC DST`` is remembered so that ``DST`` reads as ``SRC``.

Every path is bounded: scripts are followed at most :data:`MAX_DEPTH` deep (a script that runs itself stops
there), a file longer than :data:`MAX_FILE_CHARS` is not read, the scripts followed for one container hold
at most :data:`MAX_TOTAL_CHARS` (a script that runs a 64 KiB file ten thousand times stops being followed
there), at most :data:`MAX_FILE_READS` files are looked up, and all expansions share the container's budget
(KVP074 past it, as for one script).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence

from planner.errors import UnreadableScriptError
from planner.k8s.envvars import new_budget
from planner.k8s.shell import SHELLS, ShellCommand, parse_script
from planner.vllm.launchers import unwrap

ReadFile = Callable[[str], str | None]

MAX_DEPTH = 4  # scripts within scripts (a container's own `sh -c` is the first)
MAX_FILE_CHARS = 65_536  # as one argument or env value (policy caps' max_value_chars)
MAX_TOTAL_CHARS = 1 << 20  # all the scripts followed for one container, the container's own included
MAX_FILE_READS = 64  # files looked up for one container, found or not (each lookup walks its mounts)
_MAX_COMMANDS = 4_096  # simple commands over all the scripts of one container

# Shell options that take the next word as their value (bash/dash/zsh: `-o pipefail`, `--rcfile F`).
_OPTIONS_WITH_VALUE = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


class _Walk:
    """What following one container's scripts has used, and the files ``cp`` copied (DST -> SRC)."""

    def __init__(self, read_file: ReadFile | None, unknown: frozenset[str] = frozenset()) -> None:
        self.read_file = read_file
        self.unknown = unknown  # names set from Secrets, ConfigMaps or envFrom (envvars.unknown_env_names)
        self.budget = new_budget()
        self.chars_left = MAX_TOTAL_CHARS
        self.reads_left = MAX_FILE_READS
        self.copies: dict[str, str] = {}

    def take(self, script: str) -> bool:
        """Charge ``script`` to the container's characters; False (not followed) past them."""
        if len(script) > self.chars_left:
            return False
        self.chars_left -= len(script)
        return True


class _Run:
    """What a command runs in a shell: an inline script (``-c``) or a file, with its ``$0 $1 ...``."""

    def __init__(self, script: str | None, path: str | None, positional: list[str]) -> None:
        self.script = script
        self.path = path
        self.positional = positional


def container_commands(
    words: Sequence[str],
    env: Mapping[str, str],
    read_file: ReadFile | None = None,
    unknown: frozenset[str] = frozenset(),
) -> list[ShellCommand] | None:
    """The simple commands ``words`` (a container's expanded command line) runs, scripts followed; None
    when ``words`` runs neither a shell script nor a script file ``read_file`` can read.

    Raises InputCapError (KVP074) when the expansions pass the container's budget, and UnreadableScriptError
    when the container's own script is one kv-planner does not read (a script it runs that is not read
    stays a command as written)."""
    walk = _Walk(read_file, unknown)
    run = _shell_run(words)
    if run is not None and run.script is not None:
        walk.take(run.script)  # (the container's own script: within the policy's caps already)
        commands = parse_script(run.script, env, walk.budget, run.positional, walk.unknown)
        return _follow(commands, env, walk, 1)
    if read_file is None:
        return None
    unwrapped = unwrap(words, env)  # (`tini -- /scripts/start.sh`)
    if unwrapped is None or not unwrapped.words:
        return None
    # (the container's process itself runs the file: as if exec'd, its exec is the container's last)
    whole = ShellCommand(words=list(unwrapped.words), text=" ".join(words), execs=True)
    followed = _follow([whole], env, walk, 0)
    return None if followed == [whole] else followed


def _follow(commands: list[ShellCommand], env: Mapping[str, str], walk: _Walk, depth: int) -> list[ShellCommand]:
    """``commands`` with each command that runs a script replaced by that script's commands."""
    out: list[ShellCommand] = []
    for command in commands:
        if len(out) >= _MAX_COMMANDS:
            break
        inner = _inner_commands(command, env, walk, depth) if depth < MAX_DEPTH else None
        _remember_copy(command, walk.copies)  # (after running it: running a copy does not change it)
        if inner is None:
            out.append(command)
            continue
        shares_shell = command.execs or (command.main_line and _sourced(command.words) is not None)
        for found in inner[: _MAX_COMMANDS - len(out)]:
            out.append(_as_run_by(found, command, shares_shell))
        if command.execs:
            break  # `exec` replaced the shell: nothing after it runs
    return out


def _as_run_by(found: ShellCommand, command: ShellCommand, shares_shell: bool) -> ShellCommand:
    """A command of the script ``command`` runs, as the container runs it. A script run in a branch runs in
    that branch. An ``exec`` in it ends the container's script only when the script runs in the script's own
    shell: sourced on its main line (``. FILE``), or exec'd (``exec bash FILE``: the file's commands are the
    shell's last; the loop stops after them). Run by another shell (``bash FILE``), or sourced in a subshell
    or a pipeline, its exec replaces that process only, and the container's script goes on after it."""
    update: dict[str, bool] = {}
    if command.conditional:
        update["conditional"] = True
    if not shares_shell and (found.execs or found.main_line):
        update["execs"] = update["main_line"] = False
    return found.model_copy(update=update) if update else found


def _inner_commands(
    command: ShellCommand, env: Mapping[str, str], walk: _Walk, depth: int
) -> list[ShellCommand] | None:
    run = _shell_run(command.words) or _sourced(command.words) or _path_run(command.words)
    if run is None:
        return None
    script = run.script
    if script is None:
        if walk.read_file is None or run.path is None or walk.reads_left <= 0:
            return None
        walk.reads_left -= 1
        script = _script_text(walk.read_file, _resolve(run.path, walk.copies))
    if script is None or not walk.take(script):
        return None
    try:
        commands = parse_script(script, env, walk.budget, run.positional, walk.unknown)
    except UnreadableScriptError:
        return None  # (the command stays as written: a script that fails to run, or one not read)
    return _follow(commands, env, walk, depth + 1)


def _shell_run(words: Sequence[str]) -> _Run | None:
    """``sh [OPTIONS] -c [OPTIONS] SCRIPT [NAME ARG...]`` or ``bash [OPTIONS] FILE [ARG...]``; None for a
    shell reading its standard input (``-s``, no operand) and for anything that is not a shell. Options are
    read as the shells read them: clusters (``-eux``), ``-o``/``-O`` taking a value wherever they sit in a
    cluster (``-eo pipefail``), and options after ``-c`` before its script (``bash -c -e SCRIPT``)."""
    if not words or words[0].rsplit("/", 1)[-1] not in SHELLS:
        return None
    i, inline = 1, False
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if word in _OPTIONS_WITH_VALUE:
            i += 2
            continue
        if word[:1] in ("-", "+") and len(word) > 1 and not word.startswith("--"):
            cluster = word[1:]
            if word[0] == "-" and "s" in cluster:
                return None  # commands from standard input
            inline = inline or (word[0] == "-" and "c" in cluster)
            i += 2 if ("o" in cluster or "O" in cluster) else 1
            continue
        if word.startswith("--"):
            i += 1  # --login, --norc, --posix ...
            continue
        break
    if i >= len(words):
        return None
    if inline:
        # `bash -lc -- SCRIPT` (KubeRay's samples): `--` ended the options; the script is the next word.
        return _Run(words[i], None, list(words[i + 1 :]) or [words[0]])
    return _Run(None, words[i], list(words[i:]))


def _sourced(words: Sequence[str]) -> _Run | None:
    """``. FILE [ARG...]`` / ``source FILE [ARG...]`` (the file's commands run in this shell)."""
    if len(words) < 2 or words[0] not in (".", "source"):
        return None
    return _Run(None, words[1], list(words[1:]))


def _path_run(words: Sequence[str]) -> _Run | None:
    """``/scripts/start.sh ARG...``: a file run by its path (a bare name is a program on PATH)."""
    if not words or "/" not in words[0]:
        return None
    return _Run(None, words[0], list(words))


def _script_text(read_file: ReadFile, path: str) -> str | None:
    """The file at ``path`` when it is a shell script kv-planner may read: known, short enough, and
    without a ``#!`` line naming another interpreter (``#!/usr/bin/env python3``)."""
    text = read_file(path)
    if text is None or len(text) > MAX_FILE_CHARS:
        return None
    if text.startswith("#!"):
        interpreter = text[2:].split("\n", 1)[0].split()
        if interpreter and interpreter[0].rsplit("/", 1)[-1] == "env":
            interpreter = [w for w in interpreter[1:] if not w.startswith("-")]
        if not interpreter or interpreter[0].rsplit("/", 1)[-1] not in SHELLS:
            return None
    return text


def _remember_copy(command: ShellCommand, copies: dict[str, str]) -> None:
    """``cp [-OPTIONS] SRC DST``: DST holds what SRC holds (one source, a file name as destination). Any other
    command that names a copy (``sed -i``, ``cat x > DST``, ``mv``) may have changed it: forgotten."""
    words = command.words
    if not words:
        return
    program = words[0].rsplit("/", 1)[-1]
    if program != "cp":
        if (program in _KEEPS_CONTENT or program in SHELLS) and ">" not in command.text:
            return  # `chmod +x DST`, `bash DST`: the file is the same afterwards
        named = {posixpath.normpath(word.lstrip(">")) for word in words[1:] if "/" in word}
        for target in [t for t in copies if t in named or t in command.text]:
            del copies[target]
        return
    operands = [word for word in words[1:] if not word.startswith("-")]
    if len(operands) == 2 and len(copies) < _MAX_COMMANDS:
        source, target = (posixpath.normpath(word) for word in operands)
        copies[target] = copies.get(source, source)


# Commands that leave a file's content as it was (without a redirection in the command).
_KEEPS_CONTENT = frozenset({"chmod", "chown", "chgrp", "ls", "stat", "test", "[", "file", "head", "tail", "wc", "echo"})


def _resolve(path: str, copies: Mapping[str, str]) -> str:
    normal = posixpath.normpath(path)
    return copies.get(normal, normal)
