"""Read the commands of a shell script the way ``sh -c`` would, far enough to find ``vllm serve``.

Kubernetes manifests often start vLLM through a shell (``command: [sh, -c]``, ``args: ["exec vllm serve
$MODEL \\ ..."]``). This module splits a script into simple commands at ``;``, ``&&``, ``||``, ``|``,
``&`` and newlines (respecting quotes, ``\\``-newline continuations and ``#`` comments), expands
``$VAR`` / ``${VAR}`` / ``${VAR:-default}`` from the container's environment and from assignments made
earlier in the script, then splits each command into words with :func:`shlex.split` (quote removal).
Command substitutions (``$(...)``, backticks) cannot be known statically and are kept as written.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import re2
from pydantic import BaseModel, ConfigDict

from planner.errors import InputCapError
from planner.k8s.envvars import ANY_NAME, ExpansionBudget, new_budget
from planner.vllm.launchers import unwrap

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
_ASSIGNMENT = re2.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_REDIRECT = re2.compile(r"^(\d*|&)(>>?|<|>\|)(&\d*-?)?(?P<target>.*)$")
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
    execs: bool = False  # run with `exec`: the shell is replaced by it, nothing after it runs
    conditional: bool = False  # inside `if`/`case`/`while`/`until`/`for`: it may not run, or run alone


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
    ``&``; ``""`` at the end): whether an ``exec`` ends the script depends on it."""
    commands: list[str] = []
    separators: list[str] = []
    current: list[str] = []
    i = 0
    quote: str | None = None
    depth = 0  # inside $( ... )
    while i < len(script):
        ch = script[i]
        if quote == "'":
            current.append(ch)
            if ch == "'":
                quote = None
            i += 1
            continue
        if ch == "\\" and i + 1 < len(script):
            if script[i + 1] == "\n":  # line continuation
                i += 2
                continue
            current.append(script[i : i + 2])
            i += 2
            continue
        if quote == '"':
            current.append(ch)
            if ch == '"':
                quote = None
            i += 1
            continue
        if ch in ("'", '"'):
            quote = ch
            current.append(ch)
            i += 1
            continue
        if ch == "$" and script[i + 1 : i + 2] == "(":
            depth += 1
            current.append("$(")
            i += 2
            continue
        if ch == ")" and depth:
            depth -= 1
            current.append(ch)
            i += 1
            continue
        if depth:
            current.append(ch)
            i += 1
            continue
        if ch == "#" and (not current or current[-1][-1:].isspace()):
            while i < len(script) and script[i] != "\n":
                i += 1
            continue
        redirect = ch == "&" and (
            (current and current[-1][-1:] in "<>") or script[i + 1 : i + 2] == ">"
        )  # 2>&1, &>file: part of a redirection, not a separator
        if ch in ";&|\n" and not redirect:
            commands.append("".join(current))
            current = []
            start = i
            while i < len(script) and script[i] in ";&|":
                i += 1
            separator = script[start:i]
            if i < len(script) and script[i] == "\n":
                i += 1
                separator = separator or "\n"
            separators.append(separator)
            continue
        current.append(ch)
        i += 1
    commands.append("".join(current))
    separators.append("")
    return [(c.strip(), sep) for c, sep in zip(commands, separators, strict=True) if c.strip()]


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
    """The simple commands of ``script``, expanded with ``env``, the script's own assignments and, when
    given, its positional parameters (``$0`` first).

    Raises InputCapError (KVP074) when the expansions pass ``budget`` (one per container) or a command
    :data:`MAX_COMMAND_CHARS`."""
    budget = budget or new_budget()
    variables = dict(env)
    commands: list[ShellCommand] = []
    depth = 0  # open if/case/loop constructs
    params = list(positional) if positional is not None else None
    before = ""
    for text, after in split_with_separators(script):
        # `a && exec b`, `exec b | c`, `exec b &`, `( exec b )`: the exec may not run, or replaces only a
        # pipeline's, a background job's or a subshell's process; the script goes on after it.
        sequential = before in _SEQUENTIAL and after in _SEQUENTIAL and not text.startswith("(")
        chained = before in ("&&", "||") or after in ("&&", "||")
        before = after
        expanded, missing = expand(text, variables, budget, params, unknown)
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
        words, depth, conditional = _control_flow(words, depth)
        conditional = conditional or chained
        if words[:1] == ["shift"] and params is not None:  # `shift [n]`: "$@" loses its first n
            count = int(words[1]) if len(words) > 1 and words[1].isdigit() and len(words[1]) < 6 else 1
            params = [params[0], *params[1 + count :]]
            continue
        if words[:1] == ["set"] and "--" in words:  # `set -- a b`: new positional parameters
            params = [params[0] if params else "sh", *words[words.index("--") + 1 :]]
            continue
        # Leading assignments (`A=1 B=2 cmd`) and `export A=1`: remember them for later commands.
        while words and _ASSIGNMENT.match(words[0]):
            name, _, value = words[0].partition("=")
            variables[name] = value
            words = words[1:]
        if words and words[0] in ("export", "declare", "local", "readonly"):
            for word in words[1:]:
                if _ASSIGNMENT.match(word):
                    name, _, value = word.partition("=")
                    variables[name] = value
            continue
        words = _drop_redirections(words)
        execs = bool(words) and words[0] == "exec" and sequential and not conditional
        # Launchers (`exec -a x`, `env A=1`, `nohup`, `timeout 1h`, `env -S '...'` ...): the command they run,
        # read with each one's grammar (planner.vllm.launchers); one that runs nothing, or whose form is not
        # read, stays as written (and is then not vLLM). `${NAME}` in an `env -S` string takes the
        # container's environment (env reads its own environment, not the script's unexported variables).
        unwrapped = unwrap(words, env) if words else None
        if unwrapped is not None:
            words = list(unwrapped.words)
        if words:
            commands.append(
                ShellCommand(words=words, text=text, unresolved=missing, execs=execs, conditional=conditional)
            )
    return commands


def _control_flow(words: list[str], depth: int) -> tuple[list[str], int, bool]:
    """``words`` without the reserved words and case patterns in front of the command, the open
    constructs after them, and whether the command runs inside one."""
    conditional = depth > 0
    while words:
        head = words[0]
        if head in _OPENERS:
            depth, conditional = depth + 1, True
            if head == "case":  # `case WORD in PATTERN) cmd`: the command follows the pattern
                words = words[words.index("in") + 1 :] if "in" in words else []
                continue
        elif head in _CLOSERS:
            depth = max(0, depth - 1)
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
