"""Read the commands of a shell script the way ``sh -c`` would, far enough to find ``vllm serve``.

Kubernetes manifests often start vLLM through a shell (``command: [sh, -c]``, ``args: ["exec vllm serve
$MODEL \\ ..."]``). :mod:`planner.k8s.shell_scan` splits a script into simple commands at ``;``, ``&&``,
``||``, ``|``, ``&`` and newlines, and into the subshells ``( ... )`` and brace groups ``{ ...; }`` around
them (respecting quotes, ``\\``-newline continuations and ``#`` comments). This module reads them in order
as the shell runs them: it expands ``$VAR`` / ``${VAR}`` / ``${VAR:-default}`` from the container's
environment and from assignments made earlier in the script (a subshell's own are gone after it), splits
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
from planner.k8s.envvars import ANY_NAME, ExpansionBudget, new_budget
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
    if in_double:  # (shlex keeps the backslash of `\$` inside double quotes: only `"` and `\` are escaped)
        return "".join("\\" + c if c in '"\\' else c for c in value)
    return "".join("\\" + c if c in _SPECIAL_OUTSIDE else c for c in value)


def _escape_holding(value: str, texts: Sequence[str]) -> str:
    """:func:`_escape` outside quotes, but each of ``texts`` (kept as written: `$(cat /cfg/len)`) in
    ``value`` stays one unit of its word: the shell splits what the substitution outputs, which is not
    known, not the text of it. Linear: each text's next occurrence is looked for once per occurrence."""
    found = {text: value.find(text) for text in texts if text}
    out: list[str] = []
    at = 0
    while True:
        for text, where in found.items():
            if -1 < where < at:
                found[text] = value.find(text, at)
        live = [(where, text) for text, where in found.items() if where != -1]
        if not live:
            out.append(_escape(value[at:], False))
            return "".join(out)
        where, text = min(live)
        out.append(_escape(value[at:where], False))
        out.append(_verbatim(text, False))
        at = where + len(text)


def _verbatim(text: str, in_double: bool) -> str:
    """Escape ``text`` so that :func:`shlex.split` gives it back exactly, as (part of) one word: a command
    substitution kept as written must not be split at the blanks and quotes inside it."""
    if in_double:  # (shlex keeps a backslash inside double quotes unless it escapes `"` or `\`)
        return "".join("\\" + c if c in '"\\' else c for c in text)
    return "".join("\\" + c if c in _SPLIT_AT else c for c in text)


_SPLIT_AT = frozenset(" \t\n'\"\\")
# A script's array holds at most this many elements (vLLM's command line is a few hundred words). An array
# assigned from itself twice over (`A=("${A[@]}" "${A[@]}")`) doubles with each line; the expansion budget
# bounds its characters, this its elements (empty ones cost no characters). Past it: KVP074.
MAX_ARRAY_ELEMENTS = 4_096
# The texts kept as written (command substitutions, arrays not modelled) remembered per command and per
# variable: enough to name them in a finding; past it the rest are not named (a hostile `$(a)` x 20,000 would
# otherwise cost a list that long per variable that holds them).
_MAX_RUNTIME_TEXTS = 16
_INDEX = re2.compile(r"^-?[0-9]{1,9}$")

Array = Mapping[int, str]  # an indexed array: index -> element (sparse, as bash's)


def _array_check(elements: int) -> None:
    if elements > MAX_ARRAY_ELEMENTS:
        raise InputCapError(
            f"an array of the shell script holds {elements} elements (limit {MAX_ARRAY_ELEMENTS})",
            code="KVP074",
            limit=MAX_ARRAY_ELEMENTS,
        )


def _note(runtime: list[str] | None, texts: Sequence[str]) -> None:
    """Add ``texts`` (kept as written: their values are only known when the script runs) to ``runtime``."""
    if runtime is None:
        return
    for text in texts:
        if len(runtime) >= _MAX_RUNTIME_TEXTS:
            return
        if text not in runtime:
            runtime.append(text)


def _alone_in_quotes(text: str, out: list[str], end: int) -> bool:
    """``"${A[@]}"`` / ``"$@"`` is a whole word: its double quotes (the last chunk of ``out``, and
    ``text[end]``) have nothing else inside, nor next to them (``"--x=${A[@]}"``, ``x"$@"`` are not)."""
    before = out[-2][-1:] if len(out) > 1 else ""
    return (
        out[-1:] == ['"']
        and text[end : end + 1] == '"'
        and before in ("", " ", "\t", "\n")
        and text[end + 1 : end + 2] in ("", " ", "\t", "\n")
    )


def _closing_bracket(text: str, start: int) -> int:
    """The ``]`` that closes a subscript whose text starts at ``start`` (``A[${#A[@]}]=x``: a ``${...}``
    inside is skipped whole); -1 when there is none within :data:`_MAX_PARAMETER_CHARS`."""
    limit = min(len(text), start + _MAX_PARAMETER_CHARS)
    at = start
    while at < limit:
        if text.startswith("${", at):
            end = _closing_brace(text, at + 2)
            if end == -1:
                return -1
            at = end + 1
        elif text[at] == "]":
            return at
        else:
            at += 1
    return -1


def _subscript(sub: str, variables: Mapping[str, str], array: Array) -> int | None:
    """The index ``sub`` names: a number, a variable holding one, or from the end (``-1``); None when it is
    arithmetic kv-planner does not evaluate."""
    if not _INDEX.match(sub):
        name = sub[1:] if sub.startswith("$") else sub
        sub = variables.get(name, "") if name and _name_end(name, 0) == len(name) else ""
        if not _INDEX.match(sub):
            return None
    index = int(sub)
    if index < 0:
        index += max(array) + 1 if array else 0
    return index if index >= 0 else None


def expand(
    text: str,
    variables: Mapping[str, str],
    budget: ExpansionBudget | None = None,
    positional: Sequence[str] | None = None,
    unknown: frozenset[str] = frozenset(),
    *,
    arrays: Mapping[str, Array | None] | None = None,
    runtime: list[str] | None = None,
    runtime_of: Mapping[str, Sequence[str]] | None = None,
    in_double: bool = False,
) -> tuple[str, list[str]]:
    """Expand ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}`` outside single quotes.

    With ``positional`` (``$0`` first: ``sh -c SCRIPT NAME ARG...``, ``bash FILE ARG...``) also ``$1``,
    ``${10}``, ``${1:-default}``, ``$#``, ``$*``, ``$@`` and ``"$@"`` (each argument one word); without
    it those stay as written. With ``arrays`` (the script's indexed arrays; None for one not modelled) also
    ``"${A[@]}"`` (each element one word, none when empty), ``${A[@]}``/``${A[*]}`` (split), ``"${A[*]}"``
    (one word), ``${A[i]}`` and ``${#A[@]}``; ``$A`` is element 0 (``variables`` holds it).

    Command substitutions (``$( )``, backticks, ``$(( ))``, ``<( )``), and array expansions that are not
    modelled (an array that is not, ``"--x=${A[@]}"``, ``${A[@]:1}``), stay as written, each one unit of its
    word, and are added to ``runtime``; so are the ones ``runtime_of`` says a variable expanded here holds.
    Returns the text (still quoted, ready for :func:`shlex.split`) and the names that had no value. Each
    value put in is charged to ``budget`` (InputCapError KVP074 past it) before it is added. ``in_double``:
    ``text`` is inside double quotes (a default in ``"${X:-...}"``), so what is put in is escaped as there.
    """
    budget = budget or new_budget()
    params = _Positional(positional) if positional is not None else None
    out: list[str] = []
    missing: list[str] = []

    def held(name: str) -> None:  # the runtime texts a variable's value holds
        if runtime_of is not None and name in runtime_of:
            _note(runtime, runtime_of[name])

    def put(name: str, value: str) -> None:  # a variable's value, its runtime texts kept whole
        held(name)
        texts = runtime_of.get(name) if runtime_of is not None and quote != '"' else None
        out.append(_escape_holding(value, texts) if texts else _escape(value, quote == '"'))

    def as_written(start: int, end: int) -> None:  # a part whose value only the running script knows
        part = text[start:end]
        _note(runtime, [part])
        out.append(_verbatim(part, quote == '"'))

    i = 0
    quote: str | None = '"' if in_double else None
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
        nxt = text[i + 1 : i + 2]
        if (ch == "$" and nxt == "(") or ch == "`" or (ch in "<>" and nxt == "(" and quote is None):
            # A command substitution (or `<( )`): one unit of its word, nested quotes and all.
            end = part_end(text, i + (ch != "`"))
            if end != -1:
                as_written(i, end)
                i = end
                continue
        if ch == "$" and nxt:
            if nxt == "{":
                end = _closing_brace(text, i + 2)
                if end != -1:
                    body = text[i + 2 : end]
                    name_len = _name_end(body, 0)
                    if arrays is not None and (body[name_len : name_len + 1] == "[" or body[:1] == "#"):
                        found = _array_expansion(body, variables, arrays, unknown, quote)
                        if found is not None:
                            if found.missing:
                                missing.append(found.name)
                            if found.elements is None:  # not modelled: as written
                                held(found.name)
                                as_written(i, end + 1)
                                i = end + 1
                                continue
                            if found.each and _alone_in_quotes(text, out, end + 1):
                                # `"${A[@]}"`: each element one word, and no word for an empty array.
                                held(found.name)
                                words = " ".join(shlex.quote(element) for element in found.elements)
                                budget.spend(len(words))
                                out[-1] = words
                                quote = None
                                i = end + 2
                                continue
                            if found.each and quote == '"' and len(found.elements) > 1:
                                held(found.name)
                                as_written(i, end + 1)  # `"--x=${A[@]}"`: words joined to the text around them
                                i = end + 1
                                continue
                            # `${A[@]}`, `${A[*]}` (split at blanks, as the shell splits them), `"${A[*]}"`
                            # (one word: IFS's first character is a blank), `${A[i]}`, `${#A[@]}`.
                            joined = " ".join(found.elements)
                            budget.spend(len(joined))
                            put(found.name, joined)
                            i = end + 1
                            continue
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
                                    default,
                                    variables,
                                    budget,
                                    params.values if params else None,
                                    unknown,
                                    arrays=arrays,
                                    runtime=runtime,
                                    runtime_of=runtime_of,
                                    in_double=quote == '"',
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
                        put(name, value)
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
                put(name, value)
                i = name_end
                continue
        out.append(ch)
        i += 1
    return "".join(out), missing


@dataclass(slots=True)
class _ArrayExpansion:
    name: str
    elements: list[str] | None  # what it expands to (joined by blanks unless `each`); None: not modelled
    each: bool = False  # `${A[@]}`: each element a word of its own inside double quotes
    missing: bool = False  # no such variable (it expands to nothing, as an unset one)


def _array_expansion(
    body: str,
    variables: Mapping[str, str],
    arrays: Mapping[str, Array | None],
    unknown: frozenset[str],
    quote: str | None,
) -> _ArrayExpansion | None:
    """``${BODY}`` read as an array expansion (``A[@]``, ``A[*]``, ``A[i]``, ``#A[@]``); None when it is no
    array expansion (``${#X}``, an unclosed ``[``)."""
    count = body[:1] == "#"
    name_end = _name_end(body, int(count))
    name = body[int(count) : name_end]
    if not name or body[name_end : name_end + 1] != "[":
        return None
    close = body.find("]", name_end)
    if close == -1:
        return None
    sub, tail = body[name_end + 1 : close], body[close + 1 :]
    if tail or (count and sub not in ("@", "*")):
        return _ArrayExpansion(name, None)  # `${A[@]:1}`, `${A[0]:-x}`, `${#A[0]}`: not modelled
    array: Array | None
    if name in arrays:
        array = arrays[name]
    elif name in variables:
        array = {0: variables[name]}  # a plain variable is an array of one element
    elif name in unknown or ANY_NAME in unknown:
        array = None  # (from a Secret, a ConfigMap or envFrom)
    else:
        return _ArrayExpansion(name, ["0"] if count else [], each=sub in "@*", missing=True)
    if array is None:
        return _ArrayExpansion(name, None)
    if count:
        return _ArrayExpansion(name, [str(len(array))])
    if sub in ("@", "*"):
        return _ArrayExpansion(name, [array[index] for index in sorted(array)], each=sub == "@")
    index = _subscript(sub, variables, array)
    if index is None:
        return _ArrayExpansion(name, None)  # (arithmetic in the subscript)
    return _ArrayExpansion(name, [array.get(index, "")])


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
        _restore(self.runtime_of, name, tuple(runtime[:_MAX_RUNTIME_TEXTS]) if runtime else None)
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
            _array_check(len(array))
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
                if ("a" in options or "A" in options) and name and _name_end(name, 0) == len(name):
                    self._save(name)
                    self._set_array(name, None if "A" in options else self._array(name))
            i = skip_blanks(text, max(after, i + 1))
        return prefix

    def _assignment(self, text: str, at: int, missing: list[str], options: str | None) -> int | None:
        """Apply the assignment word at ``text[at]`` (``A=v``, ``A+=v``, ``A[i]=v``, ``A=(...)``,
        ``A+=(...)``); where it ends, or None when the word is not one. ``options``: a declaration's."""
        name_end = _name_end(text, at)
        if name_end == at:
            return None
        name, i, subscript = text[at:name_end], name_end, None
        if text[i : i + 1] == "[":
            close = _closing_bracket(text, i + 1)
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
            index = _subscript(self._expand(subscript, missing, None).strip(), self.variables, self._array(name))
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
                index = _subscript(self._expand(written[1:close], missing, None).strip(), self.variables, array)
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
                _array_check(len(array))
                continue
            for part in parts:
                array[following] = part
                following += 1
                _array_check(len(array))
        _restore(self.runtime_of, name, tuple(runtime[:_MAX_RUNTIME_TEXTS]) if runtime else None)
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
        named = len(words) > 1 and words[-2] not in _MAPFILE_VALUED and _name_end(last, 0) == len(last) > 0
        return last if named else "MAPFILE"
    if words[:1] == ["read"]:
        for option, name in pairwise(words[1:]):
            if option.startswith("-") and "a" in option[1:] and _name_end(name, 0) == len(name) > 0:
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
