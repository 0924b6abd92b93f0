"""Where the parts of a shell word end: quotes, ``$( )``, backticks, ``${ }``, an array's ``( )``.

:mod:`planner.k8s.shell` reads a simple command's text (as :mod:`planner.k8s.shell_scan` cut it out of the
script) and needs to know, without running anything, where a command substitution ``$(...)`` ends (its
text, quotes and nested substitutions included, is one unit of its word: its value is only known when the
script runs), where an array assignment's ``NAME=( ... )`` ends, and where a word ends. These functions
find those ends the way bash does, as far as that takes: single quotes, double quotes (with substitutions
inside them), ``\\`` escapes, nested ``$(``/``${``/backticks and ``( )``, and ``#`` comments inside an
array's parentheses.

Every function here is linear in the text it reads, and nesting is bounded by
:data:`planner.k8s.shell_scan.MAX_WORD_NESTING` (the scanner refuses a deeper script before this module
sees it; here a deeper one is "no end found").
"""

from __future__ import annotations

from collections.abc import Iterator

from planner.k8s.shell_scan import MAX_WORD_NESTING

_CLOSERS = {"(": ")", "{": "}", '"': '"', "`": "`"}
_BLANKS = frozenset(" \t\n")


def part_end(text: str, at: int, *, comments: bool = False) -> int:
    """The index just past the part of a word that ``text[at]`` opens (``(`` of ``$(``, ``<(`` or an
    array, ``{`` of ``${``, a double quote, a backtick); -1 when it does not close in ``text`` or nests
    deeper than :data:`MAX_WORD_NESTING`. With ``comments`` (an array's parentheses), a ``#`` at a word's
    start comments out the rest of its line, as in bash (``ARGS=(--x 1  # why)``)."""
    opener = text[at]
    stack = [_CLOSERS[opener]]
    i = at + 1
    end = len(text)
    while i < end:
        ch = text[i]
        top = stack[-1]
        if ch == "\\":
            i += 2
            continue
        if ch == top:
            stack.pop()
            i += 1
            if not stack:
                return i
            continue
        if top == "`":
            i += 1  # (inside backticks only an escape or the closing backtick matter here)
            continue
        nxt = text[i + 1 : i + 2]
        if ch == "$" and nxt in ("(", "{"):
            stack.append(_CLOSERS[nxt])
            i += 2
        elif ch == "`" or (ch == '"' and top != '"'):
            stack.append(ch)
            i += 1
        elif top == '"':
            i += 1
        elif ch == "'":
            close = text.find("'", i + 1)
            if close == -1:
                return -1
            i = close + 1
        elif ch == "(" and top == ")":
            stack.append(")")  # `$( (cd /x; pwd) )`, `$(( (1 + 2) ))`
            i += 1
        elif ch == "#" and comments and len(stack) == 1 and (i == at + 1 or text[i - 1] in _BLANKS):
            newline = text.find("\n", i)
            if newline == -1:
                return -1
            i = newline
        else:
            i += 1
        if len(stack) > MAX_WORD_NESTING:
            return -1
    return -1


def word_end(text: str, at: int) -> int:
    """The index just past the word that starts at ``text[at]`` (an unquoted blank ends it): quotes,
    escapes, substitutions and ``${ }`` are parts of it. A part that does not close runs to the end."""
    i = at
    end = len(text)
    while i < end:
        ch = text[i]
        if ch in _BLANKS:
            return i
        if ch == "\\":
            i += 2
            continue
        if ch == "'":
            close = text.find("'", i + 1)
            i = end if close == -1 else close + 1
            continue
        nxt = text[i + 1 : i + 2]
        if ch in '"`':
            closed = part_end(text, i)
        elif (ch in "$<>" and nxt == "(") or (ch == "$" and nxt == "{"):
            closed = part_end(text, i + 1)
        else:
            i += 1
            continue
        i = end if closed == -1 else closed
    return min(i, end)


def skip_blanks(text: str, at: int) -> int:
    """The index of the first character at or after ``at`` that is not a blank or a newline."""
    while at < len(text) and text[at] in _BLANKS:
        at += 1
    return at


def array_words(text: str) -> Iterator[str]:
    """The words written inside an array assignment's parentheses (as written: still quoted, unexpanded),
    blanks, newlines and ``#`` comments between them dropped. One at a time: a reader that stops at its
    bound on elements does not pay for the words after it."""
    i = skip_blanks(text, 0)
    while i < len(text):
        if text[i] == "#":
            newline = text.find("\n", i)
            i = len(text) if newline == -1 else newline
        else:
            end = max(word_end(text, i), i + 1)
            yield text[i:end]
            i = end
        i = skip_blanks(text, i)
