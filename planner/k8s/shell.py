"""Read the commands of a shell script the way ``sh -c`` would, far enough to find ``vllm serve``.

Kubernetes manifests often start vLLM through a shell (``command: [sh, -c]``, ``args: ["exec vllm serve
$MODEL \\ ..."]``). :mod:`planner.k8s.shell_scan` splits a script into simple commands at ``;``, ``&&``,
``||``, ``|``, ``&`` and newlines, and into the subshells ``( ... )`` and brace groups ``{ ...; }`` around
them (respecting quotes, ``\\``-newline continuations and ``#`` comments). This module reads them in order
as the shell runs them: it expands ``$VAR`` / ``${VAR}`` / ``${VAR:-default}`` from the container's
environment and from assignments made earlier in the script (a subshell's own are gone after it), splits
each command into words with :func:`shlex.split` (quote removal), and follows which ``exec`` ends which
process. Command substitutions (``$(...)``, backticks) cannot be known statically and are kept as written.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import re2
from pydantic import BaseModel, ConfigDict

from planner.errors import InputCapError
from planner.k8s.envvars import ANY_NAME, ExpansionBudget, new_budget
from planner.k8s.shell_scan import Piece, scan
from planner.vllm.launchers import unwrap

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
_ASSIGNMENT = re2.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_REDIRECT = re2.compile(r"^(\d*|&)(>>?|<<<|<<-?|<>|<|>\|)(&\d*-?)?(?P<target>.*)$")
_SPECIAL_OUTSIDE = set("'\"\\;&|()<>$`#")
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


class _Positional:
    """A script's positional parameters (``$0`` first) for :func:`expand`."""

    _NAME = re2.compile(r"^([0-9]+|[@*#])")

    def __init__(self, values: Sequence[str]) -> None:
        self.values = list(values)

    def name(self, body: str) -> Any:  # (a re2 match, or None)
        return self._NAME.match(body)

    def owns(self, name: str) -> bool:
        return name.isdigit() or name in ("@", "*", "#")

    def get(self, name: str) -> str:
        """``$N`` (empty past the last), ``$#``, and ``$@``/``$*`` as one string (the shell splits it
        on blanks outside quotes, and keeps it one word inside, as for ``"$*"``)."""
        if name == "#":
            return str(max(0, len(self.values) - 1))
        if name in ("@", "*"):
            return " ".join(self.values[1:])
        index = int(name) if len(name) <= 6 else len(self.values)
        return self.values[index] if index < len(self.values) else ""

    def words(self) -> str:
        """``"$@"``: the arguments quoted one by one (no word when there are none)."""
        return " ".join(shlex.quote(value) for value in self.values[1:])


# A parameter expansion's body is a name and perhaps a short default: one longer than this is not read as
# one (its text stays as written), so finding the closing brace costs at most this much per `${`.
_MAX_PARAMETER_CHARS = 4_096
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_CHARS = _NAME_START | frozenset("0123456789")


def _name_end(text: str, start: int) -> int:
    """The end of the shell name at ``text[start:]`` (``start`` itself when there is none). Plain string
    code: a regular expression matched at an offset re-reads the whole command each time (google-re2's
    wrapper encodes its input per call), which made 32,000 `$a` take seconds."""
    if start >= len(text) or text[start] not in _NAME_START:
        return start
    end = start + 1
    while end < len(text) and text[end] in _NAME_CHARS:
        end += 1
    return end


def _closing_brace(text: str, start: int) -> int:
    """The index of the ``}`` that closes the ``${`` whose body starts at ``start``, nested ``${...}``
    counted (``${A:-${B:-x}}``); -1 when there is none within :data:`_MAX_PARAMETER_CHARS`."""
    limit = min(len(text), start + _MAX_PARAMETER_CHARS)
    at, opened = start, 0
    while True:
        close = text.find("}", at, limit)
        if close == -1:
            return -1
        opened += text.count("${", at, close)
        if opened == 0:
            return close
        opened -= 1
        at = close + 1


def _escape(value: str, in_double: bool) -> str:
    """Escape an expanded value so shlex splits it like the shell would (no quote removal inside)."""
    if in_double:
        return "".join("\\" + c if c in '"\\$`' else c for c in value)
    return "".join("\\" + c if c in _SPECIAL_OUTSIDE else c for c in value)


def expand(
    text: str,
    variables: Mapping[str, str],
    budget: ExpansionBudget | None = None,
    positional: Sequence[str] | None = None,
    unknown: frozenset[str] = frozenset(),
) -> tuple[str, list[str]]:
    """Expand ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}`` outside single quotes.

    With ``positional`` (``$0`` first: ``sh -c SCRIPT NAME ARG...``, ``bash FILE ARG...``) also ``$1``,
    ``${10}``, ``${1:-default}``, ``$#``, ``$*``, ``$@`` and ``"$@"`` (each argument one word); without
    it those stay as written. Returns the text (still quoted, ready for :func:`shlex.split`) and the
    names that had no value. Each value put in is charged to ``budget`` (InputCapError KVP074 past it)
    before it is added.
    """
    budget = budget or new_budget()
    params = _Positional(positional) if positional is not None else None
    out: list[str] = []
    missing: list[str] = []
    i = 0
    quote: str | None = None
    while i < len(text):
        ch = text[i]
        if quote == "'":
            out.append(ch)
            if ch == "'":
                quote = None
            i += 1
            continue
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i : i + 2])
            i += 2
            continue
        if ch in ("'", '"') and (quote is None or quote == ch):
            if ch == "'" and quote == '"':
                out.append(ch)
                i += 1
                continue
            quote = None if quote == ch else ch
            out.append(ch)
            i += 1
            continue
        if ch == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "{":
                end = _closing_brace(text, i + 2)
                if end != -1:
                    body = text[i + 2 : end]
                    name_len = _name_end(body, 0)
                    name_match = body[:name_len] if name_len else (params.name(body) if params else None)
                    if name_match:
                        name = name_match if isinstance(name_match, str) else name_match.group(0)
                        rest = body[len(name) :]
                        value = params.get(name) if params and params.owns(name) else variables.get(name)
                        if rest.startswith(":-") or rest.startswith("-"):
                            default = rest[2:] if rest.startswith(":-") else rest[1:]
                            if value is None and (name in unknown or ANY_NAME in unknown):
                                # set from a Secret, a ConfigMap or envFrom: the default may not be what runs
                                missing.append(name)
                                out.append(text[i : end + 1])
                                i = end + 1
                                continue
                            if value is None or (rest.startswith(":-") and value == ""):
                                value, _ = expand(
                                    default, variables, budget, params.values if params else None, unknown
                                )
                                out.append(value)
                                i = end + 1
                                continue
                        elif rest:
                            out.append(text[i : end + 1])  # ${X:+...}, ${#X} ...: leave as written
                            i = end + 1
                            continue
                        if value is None:
                            missing.append(name)
                            value = ""
                        budget.spend(len(value))
                        out.append(_escape(value, quote == '"'))
                        i = end + 1
                        continue
            if params is not None and (nxt.isdigit() or nxt in "@*#"):
                if nxt == "@" and quote == '"' and out[-1:] == ['"'] and text[i + 2 : i + 3] == '"':
                    # `"$@"`: every argument one word, however many words it holds.
                    words = params.words()
                    budget.spend(len(words))
                    out[-1] = words
                    quote = None
                    i += 3
                    continue
                value = params.get(nxt)
                budget.spend(len(value))
                out.append(_escape(value, quote == '"'))
                i += 2
                continue
            name_end = _name_end(text, i + 1)
            if name_end > i + 1:
                name = text[i + 1 : name_end]
                value = variables.get(name)
                if value is None:
                    missing.append(name)
                    value = ""
                budget.spend(len(value))
                out.append(_escape(value, quote == '"'))
                i = name_end
                continue
        out.append(ch)
        i += 1
    return "".join(out), missing


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
        self.params = list(positional) if positional is not None else None
        # (name, value before) of each assignment made inside a group: a subshell's are undone when it ends
        self.undo: list[tuple[str, str | None]] = []
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
                name, value = self.undo.pop()
                if value is None:
                    self.variables.pop(name, None)
                else:
                    self.variables[name] = value
            self.params = group.params

    def _assign(self, name: str, value: str | None) -> None:
        """Set (or, with None, unset) a variable; inside a group, remember what it was."""
        if len(self.groups) > 1:
            self.undo.append((name, self.variables.get(name)))
        if value is None:
            self.variables.pop(name, None)
        else:
            self.variables[name] = value

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
        expanded, missing = expand(text, self.variables, self.budget, self.params, self.unknown)
        if len(expanded) > MAX_COMMAND_CHARS:
            raise InputCapError(
                f"a command of the shell script expands to {len(expanded)} characters (limit {MAX_COMMAND_CHARS})",
                code="KVP074",
                limit=MAX_COMMAND_CHARS,
            )
        try:
            words = shlex.split(expanded, comments=False, posix=True)
        except ValueError:
            words = expanded.split()
        words, self.depth, in_construct = _control_flow(words, self.depth, group.base_depth)
        chained = _chained(before, after)
        conditional = group.conditional or in_construct or chained
        # `a && exec b`, `exec b | c`, `exec b &`, `if x; then exec b; fi`: the exec may not run, or replaces
        # only a pipeline's or a background job's process; the group goes on after it.
        main_line = before in _SEQUENTIAL and after in _SEQUENTIAL and not (in_construct or chained)
        if self._shell_state(words):
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
                    execs=execs,
                    conditional=conditional,
                    main_line=main_line and self._in_script_shell() and not group.conditional,
                )
            )

    def _shell_state(self, words: list[str]) -> bool:
        """Apply what ``words`` changes in the shell itself: ``shift``, ``set --``, ``export A=1`` (True: nothing
        is run), and leading ``A=1`` assignments (removed from ``words``)."""
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
            if value.startswith("("):  # `ARGS=(a b)`: an array, to its `)`; not read, so `$ARGS` stays unknown
                while words and not value.endswith(")"):
                    value = words.pop(0)
                self._assign(name, None)
                continue
            self._assign(name, value)
        if words and words[0] in ("export", "declare", "local", "readonly"):
            for word in words[1:]:
                if _ASSIGNMENT.match(word):
                    name, _, value = word.partition("=")
                    self._assign(name, value)
            return True
        return False


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
