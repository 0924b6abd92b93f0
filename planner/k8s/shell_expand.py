"""Parameter expansion for :mod:`planner.k8s.shell`: ``$VAR``, ``${VAR:-default}``, positional parameters and
bash indexed arrays (``"${NAME[@]}"`` ...), as ``bash`` expands them in a command's text, with what only the
running script knows (command substitutions, array forms not modelled) kept whole and named. Every value put
in is charged to the container's expansion budget (planner/k8s/envvars.py); arrays are bounded by
:data:`MAX_ARRAY_ELEMENTS`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import re2

from planner.errors import InputCapError
from planner.k8s.envvars import ANY_NAME, ExpansionBudget, new_budget
from planner.k8s.shell_words import part_end

_SPECIAL_OUTSIDE = set("'\"\\;&|()<>$`#")


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


def shell_name_end(text: str, start: int) -> int:
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
MAX_RUNTIME_TEXTS = 16
_INDEX = re2.compile(r"^-?[0-9]{1,9}$")

Array = Mapping[int, str]  # an indexed array: index -> element (sparse, as bash's)


def check_array_size(elements: int) -> None:
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
        if len(runtime) >= MAX_RUNTIME_TEXTS:
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


def closing_bracket(text: str, start: int) -> int:
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


def subscript_index(sub: str, variables: Mapping[str, str], array: Array) -> int | None:
    """The index ``sub`` names: a number, a variable holding one, or from the end (``-1``); None when it is
    arithmetic kv-planner does not evaluate."""
    if not _INDEX.match(sub):
        name = sub[1:] if sub.startswith("$") else sub
        sub = variables.get(name, "") if name and shell_name_end(name, 0) == len(name) else ""
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

    def reference(name: str, value: str | None, start: int, end: int) -> None:  # `$NAME` / `${NAME}`
        if value is None:
            missing.append(name)
            if name in unknown or ANY_NAME in unknown:
                # Set from a Secret, a ConfigMap or envFrom: a value the manifest does not show, not an empty
                # one. Kept as written, like a command substitution, so that what it may hold (`vllm serve
                # $MODEL $EXTRA_ARGS`, flags from a ConfigMap) is not checked as if absent.
                as_written(start, end)
                return
            value = ""  # unset anywhere: empty, as bash expands it
        budget.spend(len(value))
        put(name, value)

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
                    name_len = shell_name_end(body, 0)
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
                        reference(name, value, i, end + 1)
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
            name_end = shell_name_end(text, i + 1)
            if name_end > i + 1:
                name = text[i + 1 : name_end]
                reference(name, variables.get(name), i, name_end)
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
    name_end = shell_name_end(body, int(count))
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
    index = subscript_index(sub, variables, array)
    if index is None:
        return _ArrayExpansion(name, None)  # (arithmetic in the subscript)
    return _ArrayExpansion(name, [array.get(index, "")])
