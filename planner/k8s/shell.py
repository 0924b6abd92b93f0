"""Read the commands of a shell script the way ``sh -c`` would, far enough to find ``vllm serve``.

Kubernetes manifests often start vLLM through a shell (``command: [sh, -c]``, ``args: ["exec vllm serve
$MODEL \\ ..."]``). :mod:`planner.k8s.shell_scan` splits a script into simple commands at ``;``, ``&&``,
``||``, ``|``, ``&`` and newlines, and into the subshells ``( ... )`` and brace groups ``{ ...; }`` around
them (respecting quotes, ``\\``-newline continuations and ``#`` comments). This module reads them in order
as the shell runs them: it expands ``$VAR`` / ``${VAR}`` / ``${VAR:-default}`` (:mod:`planner.k8s.shell_expand`)
from the container's environment and from assignments made earlier in the script (a subshell's own are gone
after it), splits
each command into words with :func:`shlex.split` (quote removal), and follows which ``exec`` ends which
process.

Bash indexed arrays are modelled: ``NAME=(...)`` and ``NAME+=(...)`` (quoted elements, expansions that
split into several elements, ``[i]=v``, backslash-newline continuations, newlines and ``#`` comments inside the
parentheses), ``declare -a``/``local -a``/``readonly -a``/``typeset -a`` operands, ``NAME[i]=v`` and
``NAME+=v``; and their expansions ``"${NAME[@]}"`` (each element one word, none when empty),
``${NAME[@]}``/``${NAME[*]}`` (split at blanks), ``"${NAME[*]}"`` (one word), ``${NAME[i]}`` (``i`` a
number, a variable holding one, or negative), ``$NAME``/``${NAME}`` (element 0) and ``${#NAME[@]}``. Their
assignments are read from the command's text as written (:meth:`_ScriptReader._assignments`): the
parentheses and quotes of an element do not survive word splitting. A subshell's arrays are undone after
it, as its variables are. Arrays are bounded (:data:`MAX_ARRAY_ELEMENTS`) and charged to the expansion
budget, copies included.

What only the running script knows stays as written, one unit of its word, and is listed in
:attr:`ShellCommand.runtime`: command substitutions (``$(...)``, backticks, ``$(( ))``, ``<( )``, with
their nested quotes and substitutions; :mod:`planner.k8s.shell_words` finds their ends), also through a
variable that holds one (``L=$(cat /cfg/len); ... $L``), and the array forms not modelled (``declare -A``
associative arrays, ``"--x=${A[@]}"``, slices and defaults on elements, arithmetic subscripts, arrays
``mapfile``/``readarray``/``read -a`` fill from their input).
planner.policy.container turns one found in the model, a sizing flag, vLLM's unrecognised arguments or a
parser error into KVP032 ("not checked"), never a rejection.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import re2
from pydantic import BaseModel, ConfigDict

from planner.errors import InputCapError
from planner.k8s.envvars import ExpansionBudget, new_budget
from planner.k8s.shell_expand import (
    MAX_RUNTIME_TEXTS,
    Array,
    check_array_size,
    closing_bracket,
    expand,
    shell_name_end,
    subscript_index,
)
from planner.k8s.shell_scan import Piece, scan
from planner.k8s.shell_words import array_words, part_end, skip_blanks, word_end
from planner.vllm.launchers import unwrap

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
# A command that assigns an array, an element or appends (`A=(`, `A[i]=`, `A+=`), or declares an array
# (`declare -a`, `local -A`): its assignments are read from the text as written (_ScriptReader._assignments).
_ARRAY_SYNTAX = re2.compile(
    r"=\(|\]\+?=|^\s*[A-Za-z_][A-Za-z0-9_]*\+=|(^|\s)(declare|typeset|local|readonly|export)\s+(\S+\s+)*[-+][A-Za-z]*[aA]"
)
_DECLARATION_WORDS = frozenset({"declare", "typeset", "local", "readonly", "export"})
# Reserved words that may stand before an assignment in one command's text (`then ARGS=(a)`, `do A+=(x)`).
_PREFIX_WORDS = frozenset({"then", "else", "elif", "do", "!", "if", "while", "until", "time", "{", ")"})
_ASSIGNMENT = re2.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_REDIRECT = re2.compile(r"^(\d*|&)(>>?|<<<|<<-?|<>|<|>\|)(&\d*-?)?(?P<target>.*)$")
# Reserved words before a simple command are control flow, not the command: `if x; then vllm serve ...`,
# `while true; do vllm serve ...; done`, `{ vllm serve ...; }`, `! cmd`. Openers and closers also track
# whether a command sits inside a conditional or a loop.
_OPENERS = frozenset({"if", "while", "until", "for", "select", "case"})
_CLOSERS = frozenset({"fi", "done", "esac"})
_RESERVED = frozenset({"then", "else", "elif", "do", "{", "}", "!", "(", ")"})
# One simple command after expansion is at most this many characters (a vLLM command line is a few
# thousand). Variables doubling each other (A=$B$B...) make a 271-character script expand to 10 million,
# and shlex splits a long word in time that grows with its square (1 M characters: 33 s); 64 Ki: < 0.1 s.
# Past it (or the container's expansion budget, envvars.MAX_EXPANSION_CHARS, over all of its commands):
# KVP074, as for the kubelet's $(VAR).
MAX_COMMAND_CHARS = 65_536


class ShellCommand(BaseModel):
    """One simple command of a script, after expansion and quote removal."""

    model_config = ConfigDict(frozen=True)

    words: list[str]
    text: str  # the command as written (before expansion)
    unresolved: list[str] = []  # variables that had no value (expanded to "")
    # Text kept as written in ``words`` whose value only the running script knows: command substitutions
    # (``$(cat /cfg/len)``, backticks), and array expansions not modelled (``declare -A``, ``"--x=${A[@]}"``).
    runtime: list[str] = []
    execs: bool = False  # run with `exec` by the script's own shell: it is replaced, nothing after it runs
    conditional: bool = False  # inside `if`/`case`/`while`/`until`/`for`: it may not run, or run alone
    # Runs in the script's own shell, in sequence, unconditionally (not in a subshell, a pipeline, the
    # background or a branch): where an `exec` ends the script. A script it sources shares that.
    main_line: bool = True


def shell_script(argv: Sequence[str]) -> str | None:
    """The script of ``sh -c SCRIPT`` / ``bash -lc SCRIPT`` / ``/bin/bash -ec SCRIPT``, else None."""
    if not argv:
        return None
    if argv[0].rsplit("/", 1)[-1] not in SHELLS:
        return None
    for i, word in enumerate(argv[1:], start=1):
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            # `bash -lc -- SCRIPT` (KubeRay's samples): `--` ends the options, the script follows it.
            at = i + 2 if i + 1 < len(argv) and argv[i + 1] == "--" else i + 1
            return argv[at] if at < len(argv) else None
        if not word.startswith("-"):
            return None  # `bash script.sh`: a file we cannot read
    return None


def split_commands(script: str) -> list[str]:
    """Split a script into simple commands at unquoted ``; && || | & newline`` (comments dropped)."""
    return [text for text, _ in split_with_separators(script)]


def split_with_separators(script: str) -> list[tuple[str, str]]:
    """:func:`split_commands` with the separator after each command (``;``, ``\n``, ``&&``, ``||``, ``|``,
    ``&``; ``""`` at the end of the script or of a group): whether an ``exec`` ends the script depends on it.
    The commands inside subshells and brace groups are listed in order, without the groups (see
    :func:`planner.k8s.shell_scan.scan` for those). Raises UnreadableScriptError where bash would refuse
    the script."""
    return [(piece.text, piece.separator) for piece in scan(script) if piece.kind == "command"]


# Separators after which (and before which) a command runs unconditionally, in the script's own shell.
_SEQUENTIAL = frozenset({"", ";", "\n", ";;"})


def parse_script(
    script: str,
    env: Mapping[str, str],
    budget: ExpansionBudget | None = None,
    positional: Sequence[str] | None = None,
    unknown: frozenset[str] = frozenset(),
) -> list[ShellCommand]:
    """The simple commands of ``script`` that may run, in order, expanded with ``env``, the script's own
    assignments and, when given, its positional parameters (``$0`` first).

    Commands inside subshells ``( ... )`` and brace groups ``{ ...; }`` are read as the shell runs them: an
    assignment, ``set --`` or ``shift`` in a subshell is gone after it, and an ``exec`` ends the process it
    runs in (a subshell's, or the script's), so the commands after it in that process never run and are
    not listed.

    Raises InputCapError (KVP074) when the expansions pass ``budget`` (one per container) or a command
    :data:`MAX_COMMAND_CHARS`, and UnreadableScriptError where bash would refuse the script or its groups
    nest deeper than planner.k8s.shell_scan.MAX_GROUP_DEPTH."""
    reader = _ScriptReader(env, budget or new_budget(), positional, unknown)
    for piece in scan(script):
        if piece.kind == "open":
            reader.open_group(piece)
        elif piece.kind == "close":
            reader.close_group(piece)
        else:
            reader.command(piece)
    return reader.commands


def _runs_apart(before: str, after: str) -> bool:
    """A group in a pipeline (``{ ...; } | tee log``) or in the background (``{ ...; } &``) runs in a
    process of its own, as a subshell does."""
    return after == "&" or before in ("|", "|&") or after in ("|", "|&")


def _chained(before: str, after: str) -> bool:
    """``a && b``, ``a || b``: each side may run or not (as far as a reader of the script can tell)."""
    return before in ("&&", "||") or after in ("&&", "||")


_ABSENT: Any = object()  # (in _Saved: the name was no array)


@dataclass(slots=True)
class _Saved:
    """What a name was before an assignment inside a group (None / _ABSENT: it had none)."""

    name: str
    value: str | None
    array: Any  # Array | None, or _ABSENT
    runtime: tuple[str, ...] | None


def _restore(mapping: dict[str, Any], name: str, value: Any) -> None:
    """Set ``mapping[name]``, or remove it for None (a variable, runtime texts) or _ABSENT (an array)."""
    if value is None or value is _ABSENT:
        mapping.pop(name, None)
    else:
        mapping[name] = value


@dataclass(slots=True)
class _Group:
    """A list of commands being read: the script itself, a subshell, a brace group or a function's body."""

    own_process: bool  # the script, a subshell, a group in a pipeline or in the background
    in_line: bool  # runs where it is written, once, in sequence with the commands around it (unconditionally)
    conditional: bool  # its commands may not run: in a branch, a loop, after `&&`/`||`, in a function's body
    base_depth: int  # if/case/loop constructs open around it: deeper ones are branches inside it
    undo_mark: int  # own_process: where its assignments start in the reader's undo log
    params: list[str] | None  # own_process: the positional parameters it started with
    ended: bool = False  # an `exec` ran in it (or in a group in line in it): nothing after runs


class _ScriptReader:
    """The state of a script as :func:`parse_script` reads it, piece by piece (planner.k8s.shell_scan)."""

    def __init__(
        self,
        env: Mapping[str, str],
        budget: ExpansionBudget,
        positional: Sequence[str] | None,
        unknown: frozenset[str],
    ) -> None:
        self.env = env
        self.budget = budget
        self.unknown = unknown
        self.variables = dict(env)
        # The script's indexed arrays (None: one kv-planner does not model, such as `declare -A`). Never
        # changed in place: an assignment makes a new one, so the undo log keeps the old by reference.
        self.arrays: dict[str, Array | None] = {}
        # The texts kept as written (command substitutions ...) that a variable's value holds: expanding it
        # puts them in the command (`LEN=$(cat /cfg/len); vllm serve M --max-model-len $LEN`).
        self.runtime_of: dict[str, tuple[str, ...]] = {}
        self.params = list(positional) if positional is not None else None
        # What a name was before each assignment made inside a group: a subshell's are undone when it ends
        self.undo: list[_Saved] = []
        self.depth = 0  # open if/case/loop constructs
        self.groups = [_Group(True, True, False, 0, 0, self.params)]  # the script first
        self.before = ""  # the separator before the next piece
        self.commands: list[ShellCommand] = []

    # -- groups ------------------------------------------------------------------------------------------------

    def open_group(self, piece: Piece) -> None:
        parent = self.groups[-1]
        before, after = self.before, piece.separator  # (an opening piece carries its group's separator)
        self.before = ""
        # The reserved words before the group (`if (`, `then {`, `case x in a) (`) open or are inside constructs.
        prefix = [*_plain_words(piece.text), piece.group]
        _, self.depth, in_construct = _control_flow(prefix, self.depth, parent.base_depth)
        sequential = before in _SEQUENTIAL and after in _SEQUENTIAL
        chained = _chained(before, after)
        self.groups.append(
            _Group(
                own_process=piece.group == "(" or _runs_apart(before, after),
                in_line=sequential and not (in_construct or chained or piece.function),
                conditional=parent.conditional or in_construct or chained or piece.function,
                base_depth=self.depth,
                undo_mark=len(self.undo),
                params=self.params,
                ended=parent.ended,
            )
        )

    def close_group(self, piece: Piece) -> None:
        group = self.groups.pop()
        self.depth = group.base_depth  # (constructs left open inside a group end with it)
        self.before = piece.separator
        if group.own_process:  # what the subshell set is gone
            while len(self.undo) > group.undo_mark:
                saved = self.undo.pop()
                _restore(self.variables, saved.name, saved.value)
                if saved.array is _ABSENT:
                    self.arrays.pop(saved.name, None)
                else:
                    self.arrays[saved.name] = saved.array
                _restore(self.runtime_of, saved.name, saved.runtime)
            self.params = group.params

    def _save(self, name: str) -> None:
        """Inside a group, remember what ``name`` was (its value, array and runtime texts), to undo."""
        if len(self.groups) > 1:
            self.undo.append(
                _Saved(
                    name,
                    self.variables.get(name),
                    self.arrays.get(name, _ABSENT),
                    self.runtime_of.get(name),
                )
            )

    def _assign(self, name: str, value: str | None, runtime: Sequence[str] = (), index: int = 0) -> None:
        """Set (or, with None, unset) a variable, or element ``index`` of an array; ``runtime``: the texts kept
        as written that the value holds."""
        self._save(name)
        _restore(self.runtime_of, name, tuple(runtime[:MAX_RUNTIME_TEXTS]) if runtime else None)
        if value is None:
            self.variables.pop(name, None)
            self.arrays.pop(name, None)
        elif name in self.arrays and self.arrays[name] is None:
            pass  # an array kv-planner does not model stays so
        elif name in self.arrays or index:  # `A[1]=x`, and `A=x` on an array: one element
            self._set_array(name, {**self._array(name), index: value})
        else:
            self.variables[name] = value

    def _array(self, name: str) -> Array:
        """``name`` as an array: its elements, or its value as element 0 (empty when it has none)."""
        array = self.arrays.get(name)
        if array is not None:
            return array
        value = self.variables.get(name)
        return {} if value is None else {0: value}

    def _set_array(self, name: str, array: Array | None) -> None:
        """Make ``name`` an array (already saved for undo). The new array is charged to the expansion budget
        (a copy of the old one included: `A+=(x)` in a long run copies it each time) and bounded in size."""
        if array is not None:
            check_array_size(len(array))
            self.budget.spend(len(array) + sum(len(element) for element in array.values()))
        self.arrays[name] = array
        first = array.get(0) if array is not None else None
        _restore(self.variables, name, first)  # (`$A` is element 0)

    def _end_process(self) -> bool:
        """An ``exec`` on the main line of the innermost group replaces the process that runs it: nothing after
        it runs in that group, nor in the groups around it that run in line in the same process. True when
        that process is the script's own (the exec ends the script)."""
        for group in reversed(self.groups):
            group.ended = True
            if group.own_process or not group.in_line:
                return group is self.groups[0]
        return True  # (the script's group is its own process: not reached)

    def _in_script_shell(self) -> bool:
        """Every group around the current command runs in line in the script's own process."""
        return all(group.in_line and not group.own_process for group in self.groups[1:])

    # -- commands ----------------------------------------------------------------------------------------------

    def command(self, piece: Piece) -> None:
        group = self.groups[-1]
        before, after = self.before, piece.separator
        self.before = after
        if group.ended:
            return  # after an `exec` in the same process: it never runs
        text = piece.text
        missing: list[str] = []
        # Array assignments (`ARGS=(...)`, `A+=(...)`, `A[i]=v`, `declare -a A=(...)`) are read from the text
        # as written: their parentheses and quotes do not survive word splitting.
        rest = self._assignments(text, missing) if _ARRAY_SYNTAX.search(text) else text
        runtime: list[str] = []
        words = self._split(rest, missing, runtime)
        words, self.depth, in_construct = _control_flow(words, self.depth, group.base_depth)
        chained = _chained(before, after)
        conditional = group.conditional or in_construct or chained
        # `a && exec b`, `exec b | c`, `exec b &`, `if x; then exec b; fi`: the exec may not run, or replaces
        # only a pipeline's or a background job's process; the group goes on after it.
        main_line = before in _SEQUENTIAL and after in _SEQUENTIAL and not (in_construct or chained)
        if self._shell_state(words, runtime):
            return
        words = _drop_redirections(words)
        execs = False
        if words[:1] == ["exec"] and len(words) > 1 and main_line:  # (`exec >log 2>&1` replaces nothing)
            execs = self._end_process()
        # Launchers (`exec -a x`, `env A=1`, `nohup`, `timeout 1h`, `env -S '...'` ...): the command they run,
        # read with each one's grammar (planner.vllm.launchers); one that runs nothing, or whose form is not
        # read, stays as written (and is then not vLLM). `${NAME}` in an `env -S` string takes the
        # container's environment (env reads its own environment, not the script's unexported variables).
        unwrapped = unwrap(words, self.env) if words else None
        if unwrapped is not None:
            words = list(unwrapped.words)
        if words:
            self.commands.append(
                ShellCommand(
                    words=words,
                    text=text,
                    unresolved=missing,
                    runtime=runtime,
                    execs=execs,
                    conditional=conditional,
                    main_line=main_line and self._in_script_shell() and not group.conditional,
                )
            )

    def _expand(self, text: str, missing: list[str], runtime: list[str] | None) -> str:
        expanded, names = expand(
            text,
            self.variables,
            self.budget,
            self.params,
            self.unknown,
            arrays=self.arrays,
            runtime=runtime,
            runtime_of=self.runtime_of,
        )
        missing.extend(names)
        if len(expanded) > MAX_COMMAND_CHARS:
            raise InputCapError(
                f"a command of the shell script expands to {len(expanded)} characters (limit {MAX_COMMAND_CHARS})",
                code="KVP074",
                limit=MAX_COMMAND_CHARS,
            )
        return expanded

    def _split(self, text: str, missing: list[str], runtime: list[str] | None) -> list[str]:
        """``text`` expanded and split into words, quotes removed."""
        expanded = self._expand(text, missing, runtime)
        try:
            return shlex.split(expanded, comments=False, posix=True)
        except ValueError:
            return expanded.split()

    # -- arrays (and the assignments written with them) -----------------------------------------------------------

    def _assignments(self, text: str, missing: list[str]) -> str:
        """Apply the assignments at the start of ``text`` (after reserved words: ``then ARGS=(a b)``) and, for
        ``declare``/``local``/... , its operands; the text that is left to run (the reserved words and the
        command after the assignments; none after a declaration). Assignments are applied left to right,
        as bash does (``A=1 B=($A)``); one not read here (an unclosed parenthesis) and all after it are left
        in the text, for the plain reading."""
        i = skip_blanks(text, 0)
        while i < len(text):  # reserved words: kept for planner.k8s.shell._control_flow
            end = word_end(text, i)
            word = text[i:end]
            if word == "case":  # `case WORD in ) cmd` (shell_scan leaves a pattern as a lone `)`)
                while end < len(text) and word != ")":
                    i = skip_blanks(text, end)
                    end = word_end(text, i)
                    word = text[i:end]
            elif word not in _PREFIX_WORDS:
                break
            i = skip_blanks(text, end)
        prefix = text[:i]
        while i < len(text):
            after = self._assignment(text, i, missing, None)
            if after is None:
                break
            i = skip_blanks(text, after)
        end = word_end(text, i)
        if text[i:end] not in _DECLARATION_WORDS:
            return prefix + text[i:]
        options = ""
        i = skip_blanks(text, end)
        while i < len(text) and text[i] in "-+" and (end := word_end(text, i)) > i + 1:
            options += text[i + 1 : end]  # (`+a` removes an attribute: not told apart, both are arrays here)
            i = skip_blanks(text, end)
        while i < len(text):
            after = self._assignment(text, i, missing, options)
            if after is None:  # `declare -a NAME`: an array (with what NAME held as element 0)
                after = word_end(text, i)
                name = text[i:after]
                if ("a" in options or "A" in options) and name and shell_name_end(name, 0) == len(name):
                    self._save(name)
                    self._set_array(name, None if "A" in options else self._array(name))
            i = skip_blanks(text, max(after, i + 1))
        return prefix

    def _assignment(self, text: str, at: int, missing: list[str], options: str | None) -> int | None:
        """Apply the assignment word at ``text[at]`` (``A=v``, ``A+=v``, ``A[i]=v``, ``A=(...)``,
        ``A+=(...)``); where it ends, or None when the word is not one. ``options``: a declaration's."""
        name_end = shell_name_end(text, at)
        if name_end == at:
            return None
        name, i, subscript = text[at:name_end], name_end, None
        if text[i : i + 1] == "[":
            close = closing_bracket(text, i + 1)
            if close == -1:
                return None
            subscript, i = text[i + 1 : close], close + 1
        append = text.startswith("+=", i)
        if not append and text[i : i + 1] != "=":
            return None
        i += 2 if append else 1
        associative = options is not None and "A" in options
        runtime: list[str] = []
        if text[i : i + 1] == "(" and subscript is None:
            end = part_end(text, i, comments=True)
            if end == -1:
                return None
            self._save(name)
            if associative:
                self._set_array(name, None)  # `declare -A M=([k]=v)`: keys are not modelled
            else:
                self._array_assignment(name, text[i + 1 : end - 1], append, missing, runtime)
            return end
        end = word_end(text, i)
        value = " ".join(self._split(text[i:end], missing, runtime))  # (no splitting in an assignment)
        if associative or (name in self.arrays and self.arrays[name] is None):
            self._save(name)
            self._set_array(name, None)
            return end
        index: int | None = 0
        if subscript is not None:
            index = subscript_index(self._expand(subscript, missing, None).strip(), self.variables, self._array(name))
        if index is None:  # `A[i+1]=v`: arithmetic is not evaluated, so the array is not known
            self._save(name)
            self._set_array(name, None)
            return end
        if append:
            value = self._array(name).get(index, "") + value
        self._assign(name, value, runtime, index)
        return end

    def _array_assignment(self, name: str, inner: str, append: bool, missing: list[str], runtime: list[str]) -> None:
        """``NAME=( inner )`` / ``NAME+=( inner )`` (``name`` already saved for undo): each word of ``inner``
        expanded and split into elements (``[i]=v`` sets element i)."""
        array = dict(self._array(name)) if append else {}
        runtime.extend(self.runtime_of.get(name, ()) if append else ())
        following = max(array) + 1 if array else 0
        total = 0
        for written in array_words(inner):
            index: int | None = None
            word = written
            if written.startswith("[") and "]=" in written:
                close = written.index("]=")
                index = subscript_index(self._expand(written[1:close], missing, None).strip(), self.variables, array)
                if index is None:
                    self._set_array(name, None)
                    return
                word = written[close + 2 :]
            expanded = self._expand(word, missing, runtime)
            total += len(expanded)
            if total > MAX_COMMAND_CHARS:
                self._expand("x" * total, missing, None)  # (raises the command bound's KVP074)
            try:
                parts = shlex.split(expanded, comments=False, posix=True)
            except ValueError:
                parts = expanded.split()
            if index is not None:
                array[index] = " ".join(parts)
                following = index + 1
                check_array_size(len(array))
                continue
            for part in parts:
                array[following] = part
                following += 1
                check_array_size(len(array))
        _restore(self.runtime_of, name, tuple(runtime[:MAX_RUNTIME_TEXTS]) if runtime else None)
        self._set_array(name, array)

    def _shell_state(self, words: list[str], runtime: Sequence[str] = ()) -> bool:
        """Apply what ``words`` changes in the shell itself: ``shift``, ``set --``, ``export A=1`` (True: nothing
        is run), and leading ``A=1`` assignments (removed from ``words``). ``runtime``: the texts kept as written
        in the command (an assignment's value may hold them)."""
        if words[:1] == ["shift"] and self.params is not None:  # `shift [n]`: "$@" loses its first n
            count = int(words[1]) if len(words) > 1 and words[1].isdigit() and len(words[1]) < 6 else 1
            self.params = [self.params[0], *self.params[1 + count :]]
            return True
        if words[:1] == ["set"] and "--" in words:  # `set -- a b`: new positional parameters
            self.params = [self.params[0] if self.params else "sh", *words[words.index("--") + 1 :]]
            return True
        # Leading assignments (`A=1 B=2 cmd`) and `export A=1`: remember them for later commands.
        while words and _ASSIGNMENT.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            if value.startswith("("):  # `ARGS=(a b` not closed (_assignments read the others): not known
                while words and not value.endswith(")"):
                    value = words.pop(0)
                self._save(name)
                self._set_array(name, None)
                continue
            self._assign(name, value, runtime)
        read_into = _read_array_name(_drop_redirections(words))
        if read_into is not None:  # `mapfile -t ARGS < /cfg/args`: filled at run time, not known here
            self._save(read_into)
            self._set_array(read_into, None)
        if words and words[0] in ("export", "declare", "local", "readonly"):
            for word in words[1:]:
                if _ASSIGNMENT.match(word):
                    name, _, value = word.partition("=")
                    self._assign(name, value, runtime)
            return True
        return False


_MAPFILE_VALUED = frozenset({"-d", "-n", "-O", "-s", "-u", "-C", "-c"})  # mapfile's options that take a value


def _read_array_name(words: list[str]) -> str | None:
    """The array ``mapfile``/``readarray`` (``MAPFILE`` by default) or ``read -a NAME`` fills from its input:
    its elements are only known when the script runs."""
    if words[:1] in (["mapfile"], ["readarray"]):
        last = words[-1]
        named = len(words) > 1 and words[-2] not in _MAPFILE_VALUED and shell_name_end(last, 0) == len(last) > 0
        return last if named else "MAPFILE"
    if words[:1] == ["read"]:
        for option, name in pairwise(words[1:]):
            if option.startswith("-") and "a" in option[1:] and shell_name_end(name, 0) == len(name) > 0:
                return name
    return None


def _plain_words(text: str) -> list[str]:
    """The words of reserved words and a case pattern written before a group (no expansion needed)."""
    try:
        return shlex.split(text, comments=False, posix=True)
    except ValueError:
        return text.split()


def _control_flow(words: list[str], depth: int, base: int = 0) -> tuple[list[str], int, bool]:
    """``words`` without the reserved words and case patterns in front of the command, the open
    constructs after them, and whether the command runs inside one opened since ``base`` constructs were
    open (the group it is in)."""
    conditional = depth > base
    while words:
        head = words[0]
        if head in _OPENERS:
            depth, conditional = depth + 1, True
            if head == "case":  # `case WORD in PATTERN) cmd`: the command follows the pattern
                words = words[words.index("in") + 1 :] if "in" in words else []
                continue
        elif head in _CLOSERS:
            depth = max(base, depth - 1)
        elif head not in _RESERVED and not (head.endswith(")") and len(words) > 1 and "$(" not in head):
            break  # (a case pattern `a|b)`, a function's `name()`: the command comes after it)
        words = words[1:]
    return words, depth, conditional


def _drop_redirections(words: list[str]) -> list[str]:
    """Remove ``2>&1``, ``> log``, ``>>/tmp/x``, ``&>f``: the shell does not pass them to the program."""
    kept: list[str] = []
    skip_next = False
    for word in words:
        if skip_next:
            skip_next = False
            continue
        match = _REDIRECT.match(word)
        if match and word[:1] not in ("-",) and ("<" in word or ">" in word):
            if not match.group("target") and not match.group(3):
                skip_next = True  # `> file`: the target is the next word
            continue
        kept.append(word)
    return kept
