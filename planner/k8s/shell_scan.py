"""Split a shell script into its simple commands and the groups around them, as bash reads it.

:func:`scan` reads a script once, left to right, and returns its pieces in order: each simple command's
text (as written, still quoted and unexpanded: :mod:`planner.k8s.shell` expands and splits it) with the
separator after it, and each subshell ``( list )`` and brace group ``{ list; }`` as an opening and a
closing piece around the pieces inside it. It follows bash's grammar as far as finding commands needs:

- ``;`` ``&`` ``|`` ``&&`` ``||`` and newlines separate commands; ``(`` and ``)`` are operators wherever
  they are unquoted (``(exec vllm serve M)`` is a subshell, with or without spaces), while ``{`` and ``}``
  are reserved words only at a command's start (``echo }`` prints a brace);
- quotes, ``\\`` escapes, ``$( )``, ``$(( ))``, ``${ }``, backticks and ``<( )`` are parts of a word (their
  parentheses are not groups), ``#`` starts a comment at a word's start, ``\\``-newline joins lines;
- what else uses parentheses keeps them: case patterns (``a|b)``), function definitions (``f() { ...; }``:
  the body is read as a group that may run), arithmetic commands (``(( i++ ))``, ``for ((...))``), array
  assignments (``ARGS=(a b)``: newlines inside are blanks and ``#`` starts a comment, as in bash),
  extended globs (``@(a|b)``) and ``[[ ... ]]`` tests;
- here-document bodies (``<<EOF`` ... ``EOF``) are data, not commands.

What bash would reject (an unbalanced ``(``, a word after a group, an empty group), a form this module
does not read (a function whose body is not a group), groups nested deeper than :data:`MAX_GROUP_DEPTH`
and quotes or substitutions nested deeper than :data:`MAX_WORD_NESTING` raise
:class:`UnreadableScriptError`: the script's commands stay unknown rather than guessed. The scan
is linear in the script's length: every character is looked at a bounded number of times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import re2

from planner.errors import UnreadableScriptError

# Subshells and brace groups (function bodies included) open at once. Scripts written by hand nest two or
# three; the bound keeps what one review reads, and the frames it keeps, in proportion to real scripts.
MAX_GROUP_DEPTH = 32
# An arithmetic command `(( ... ))` is looked for within this many characters after its `((`; a longer one
# is read as two subshells (and is then most likely unbalanced: "cannot read").
_MAX_ARITHMETIC_CHARS = 4_096
# Quotes, `$( )`, `${ }`, backticks and array parentheses open inside one another at once (`"$(a "$(b)")"`
# is 4). Hand-written scripts nest a handful; without a bound, `$(` repeated 100,000 times made frames and
# work in planner.k8s.shell_words grow with it. Past it: unreadable (KVP037 with a GPU).
MAX_WORD_NESTING = 32

_BLANKS = frozenset(" \t")
_SEPARATOR_CHARS = frozenset(";&|")
# Characters that end a word (bash's metacharacters); `<` and `>` stay in words here (`2>&1` is one word for
# the redirection filter downstream).
_WORD_ENDS = frozenset(" \t\n;&|()")
# Reserved words after which a command (or a group) still starts: `if (cd /x; make)`, `then { ...; }`,
# `! (false)`. The closing words are here too, so that a group may close right after them (`{ if x; then
# y; fi }`): the words themselves stay in the command's text, where planner.k8s.shell reads them.
_BEFORE_A_COMMAND = frozenset({"!", "time", "if", "then", "else", "elif", "while", "until", "do", "fi", "done", "esac"})
# After a group's `)` or `}` only these may follow before a separator (`if (x) then ...`, `{ (a) }`).
_AFTER_A_GROUP = frozenset({"then", "else", "elif", "do", "fi", "done", "esac", "}"})
# Builtins whose NAME=(...) operands are array assignments (`declare -a ARGS=(a b)`).
_DECLARATIONS = frozenset({"declare", "typeset", "local", "readonly", "export"})
_CASE_SEPARATORS = frozenset({";;", ";&", ";;&"})
_ASSIGNMENT_START = re2.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=$")  # `NAME=` / `NAME+=` right before `(`
_ASSIGNMENT = re2.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
_FUNCTION_NAME = re2.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]*$")
# (longest first: a bare operator, whose target is the next word, is told by the match's end)
_REDIRECTION = re2.compile(r"^[0-9]*(&>>|<<<|<<-|<<|>>|<&|>&|<>|>\||&>|<|>)")
_EXTGLOB_MARKS = "?*+@!"  # `@(a|b)`: an extended glob is one word
_MAX_NAME_CHUNKS = 256  # a variable's name in `NAME=(` is shorter than this
_ARRAY = "=)"  # (in _Scanner.nesting: an array assignment's parentheses, closed by `)`; comments inside)


@dataclass(slots=True)
class Piece:
    """One piece of a script, in order: a simple command, or the opening or closing of a group."""

    kind: Literal["command", "open", "close"]
    text: str = ""  # command: as written; open: the reserved words (and case pattern) before the opener
    separator: str = ""  # after a command or a group (";" "\n" "&&" "||" "|" "&" ";;", "" at the end)
    group: str = ""  # open/close: "(" (a subshell) or "{" (a brace group)
    function: bool = False  # open: a function's body (it runs where the function is called, if it is)


@dataclass(slots=True)
class _Open:
    """A construct open while scanning: a group, or a ``case`` (whose patterns end with ``)``)."""

    kind: Literal["(", "{", "case"]
    phase: Literal["subject", "in", "pattern", "body"] = "subject"  # a case: what comes next
    empty: bool = True  # a group: nothing in it yet (bash rejects `()` and `{ }`)


def scan(script: str) -> list[Piece]:
    """The pieces of ``script`` in order; each opening piece's separator is that of its group's close.

    Raises UnreadableScriptError for what bash would reject and for groups nested past
    :data:`MAX_GROUP_DEPTH`."""
    scanner = _Scanner(script)
    scanner.run()
    opened: list[Piece] = []
    for piece in scanner.pieces:  # (a group's separator is known only after its close)
        if piece.kind == "open":
            opened.append(piece)
        elif piece.kind == "close":
            opened.pop().separator = piece.separator
    return scanner.pieces


@dataclass(slots=True)
class _Scanner:
    script: str
    at: int = 0
    pieces: list[Piece] = field(default_factory=list)
    open: list[_Open] = field(default_factory=list)
    groups: int = 0  # groups among `open`
    # The command being read: its text as chunks (a character, or an escape's two), where its current word
    # starts, where the command proper starts (after reserved words and a case pattern), its words so far.
    text: list[str] = field(default_factory=list)
    word_at: int = 0
    command_at: int = 0
    words: int = 0
    first_word: str = ""
    pattern_at: int = 0  # in a case: where the pattern being read starts
    assigning: bool = True  # every word so far is NAME=value: `NAME=(` starts an array
    declaring: bool = False  # the command is declare/local/...: its NAME=( operands are arrays too
    test: bool = False  # inside `[[ ... ]]`: parentheses, `&&`, `||`, `<`, `>` are the test's own
    after_group: bool = False  # right after a group's `)` or `}`: only redirections, then a separator
    redirect_target: bool = False  # after a group, a bare `>` takes the next word
    # open parts of a word: '"', '`', ')' ($( or <( ), '}', and _ARRAY for an array assignment's `(`
    nesting: list[str] = field(default_factory=list)
    heredocs: list[tuple[str, bool]] = field(default_factory=list)  # (delimiter, strip tabs) for the next line

    # -- the loop ---------------------------------------------------------------------------------------------

    def run(self) -> None:
        script = self.script
        while self.at < len(script):
            if self.nesting:
                self._in_word_part()
                continue
            ch = script[self.at]
            if ch == "\\":
                self._escape()
            elif ch == "'":
                self._single_quoted()
            elif ch in '"`' or (ch in "$<>" and script[self.at + 1 : self.at + 2] == "(") or self._parameter():
                self._enter_word_part()
            elif ch == "<" and script.startswith("<<", self.at) and not script.startswith("<<<", self.at):
                self._heredoc_operator()
            elif ch in _BLANKS:
                self._blank()
            elif ch == "\n":
                self._separator()
            elif ch == "#" and self.word_at == len(self.text):
                self._comment()
            elif ch == "(":
                self._open_parenthesis()
            elif ch == ")":
                self._close_parenthesis()
            elif ch in _SEPARATOR_CHARS:
                self._operator_char()
            else:
                if ch in "<>" and self._short_word(1) in ("{", "}"):
                    self._end_word()  # `{ a; }>log`: the brace is a word of its own
                self._take(1)
        self._finish()

    def _take(self, count: int) -> None:
        """Add the next ``count`` characters to the current word."""
        self.text.append(self.script[self.at : self.at + count])
        self.at += count

    def _word(self) -> str:
        return "".join(self.text[self.word_at :])

    def _short_word(self, chunks: int) -> str | None:
        """The current word when it has at most ``chunks`` chunks, else None: what is asked of it at every
        `(` or `&` is asked of short words only (a long one read again at each would be quadratic)."""
        return self._word() if len(self.text) - self.word_at <= chunks else None

    def _word_ends_with(self, chars: str) -> bool:
        return len(self.text) > self.word_at and self.text[-1][-1] in chars  # (chunks are never empty)

    # -- words: quotes, escapes, $( ) ${ } ` ` <( ) -----------------------------------------------------------

    def _escape(self) -> None:
        if self.script[self.at + 1 : self.at + 2] == "\n":
            self.at += 2  # a line continuation
        else:
            self._take(2)

    def _single_quoted(self) -> None:
        end = self.script.find("'", self.at + 1)
        self._take((end if end != -1 else len(self.script) - 1) - self.at + 1)

    def _parameter(self) -> bool:
        return self.script.startswith("${", self.at)

    def _enter_word_part(self) -> None:
        """A quote, backtick, ``$(``, ``<(``, ``>(`` or ``${`` opens a part of the word that runs to its own end."""
        ch = self.script[self.at]
        if ch in '"`':
            self._nest(ch)
            self._take(1)
        elif self.script[self.at + 1] == "{":
            self._nest("}")
            self._take(2)
        else:
            self._nest(")")
            self._take(2)

    def _nest(self, closer: str) -> None:
        if len(self.nesting) >= MAX_WORD_NESTING:
            raise UnreadableScriptError(f"quotes and substitutions nested deeper than {MAX_WORD_NESTING}")
        self.nesting.append(closer)

    def _in_word_part(self) -> None:
        """One step inside a quoted or substituted part of a word: parentheses, separators and newlines
        there belong to it (``"a;b"``, ``$(cd /x; pwd)``, ``${X:-(none)}``)."""
        script, top = self.script, self.nesting[-1]
        ch = script[self.at]
        if ch == "\\":
            self._escape()
        elif ch == top[-1]:
            self.nesting.pop()
            self._take(1)
        elif top == _ARRAY and ch == "#" and self._word_ends_with(" \t\n("):
            self._comment()  # `ARGS=(--x 1  # why)`: a comment inside an array's parentheses, as in bash
        elif top == "`":
            self._take(1)
        elif self._starts_word_part(top):
            self._enter_word_part()
        elif top == '"':
            self._take(1)
        elif ch == "'":
            self._single_quoted()
        elif ch == "(" and top == ")":
            self._nest(")")  # `$(( 1 + (2) ))`, `$( (cd /x; pwd) )`
            self._take(1)
        elif ch in "<>" and script[self.at + 1 : self.at + 2] == "(":
            self._enter_word_part()
        else:
            self._take(1)

    def _starts_word_part(self, inside: str) -> bool:
        """``$(``, ``${`` or a backtick inside a part of a word opens another; so does a double quote inside
        ``$( )`` or ``${ }`` (a quote of its own: ``"$(printf "%s" a)"``)."""
        ch = self.script[self.at]
        if ch == "$":
            return self.script[self.at + 1 : self.at + 2] in ("(", "{")
        return ch == "`" or (ch == '"' and inside != '"')

    def _heredoc_operator(self) -> None:
        """``<<WORD`` / ``<<-WORD``: the lines after this one, up to WORD, are the command's input."""
        script = self.script
        start = self.at
        at = start + 2
        strip_tabs = script[at : at + 1] == "-"
        at += strip_tabs
        while at < len(script) and script[at] in _BLANKS:
            at += 1
        delimiter: list[str] = []
        quote: str | None = None
        while at < len(script) and (quote or (script[at] not in _WORD_ENDS and script[at] not in "<>")):
            ch = script[at]
            if quote:
                quote = None if ch == quote else quote
                if quote:
                    delimiter.append(ch)
            elif ch in "'\"":
                quote = ch
            elif ch == "\\" and at + 1 < len(script):
                at += 1
                delimiter.append(script[at])
            else:
                delimiter.append(ch)
            at += 1
        self._take(at - start)
        if delimiter:
            self.heredocs.append(("".join(delimiter), strip_tabs))

    def _skip_heredoc_bodies(self) -> None:
        """After a newline: skip the bodies of the here-documents its line opened."""
        script = self.script
        for delimiter, strip_tabs in self.heredocs:
            while self.at < len(script):
                end = script.find("\n", self.at)
                end = len(script) if end == -1 else end
                line = script[self.at : end]
                self.at = end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
        self.heredocs.clear()

    def _comment(self) -> None:
        end = self.script.find("\n", self.at)
        self.at = len(self.script) if end == -1 else end

    # -- word ends: reserved words, case patterns ----------------------------------------------------------------

    def _blank(self) -> None:
        self._end_word()
        self.text.append(self.script[self.at])
        self.at += 1
        self.word_at = len(self.text)

    def _at_command_start(self) -> bool:
        return self.words == 0 and not self.after_group

    def _end_word(self) -> None:
        """Read the word just ended for what it says about the structure: `{`, `}`, reserved words, `case`."""
        if self.word_at == len(self.text):
            return
        word = self._word()
        if self.after_group and not self._after_group_word(word):
            return
        case = self.open[-1] if self.open and self.open[-1].kind == "case" else None
        if self.test:
            self.test = word != "]]"
        elif case is not None and case.phase == "subject":
            case.phase = "in"  # `case WORD`: `in` comes next
        elif case is not None and case.phase == "in" and word == "in":
            case.phase = "pattern"
            self.pattern_at = len(self.text)
        elif case is not None and case.phase == "pattern" and word != "esac":
            pass  # a pattern's words (its `)` ends it)
        elif self._at_command_start():
            self._command_start_word(word)
            return
        else:
            self._command_word(word)
        self.word_at = len(self.text)

    def _after_group_word(self, word: str) -> bool:
        """After a group's close: a reserved word goes on reading (True); a redirection is the group's own and
        is dropped; anything else is a syntax error (``(a) b``)."""
        if word in _AFTER_A_GROUP:
            self.after_group = False
            return True
        operator = None if self.redirect_target else _REDIRECTION.match(word)
        if not self.redirect_target and operator is None:
            raise UnreadableScriptError(f"a word after a group: `{word[:40]}`")
        self.redirect_target = operator is not None and operator.end() == len(word)  # `> FILE`: FILE next
        del self.text[self.word_at :]
        return False

    def _command_start_word(self, word: str) -> None:
        """A word where a command may start: `{`, `}`, a reserved word, or the command's first word."""
        if word == "{":
            del self.text[self.word_at :]
            self._open_group("{", function=False)
            return
        if word == "}":
            del self.text[self.word_at :]
            self._close_group("{")
            return
        if word in _BEFORE_A_COMMAND:
            if word == "esac":
                self._close_case()
            self.word_at = self.command_at = len(self.text)
            return
        if word == "case":
            self.open.append(_Open("case"))
        elif word == "[[":
            self.test = True
        elif word == "function":
            self.word_at = len(self.text)
            self._function_keyword()
            return
        self._command_word(word)
        self.word_at = len(self.text)

    def _command_word(self, word: str) -> None:
        self.words += 1
        if self.words == 1:
            self.first_word = word
            self.declaring = word in _DECLARATIONS
        self.assigning = self.assigning and bool(_ASSIGNMENT.match(word))

    def _close_case(self) -> None:
        if self.open and self.open[-1].kind == "case":
            self.open.pop()

    # -- separators and commands ---------------------------------------------------------------------------------

    def _operator_char(self) -> None:
        """``;`` ``&`` ``|``: a separator, unless part of a redirection (``2>&1``, ``&>log``), a case
        pattern's alternatives (``a|b)``) or a ``[[`` test (``[[ a && b ]]``)."""
        script, ch = self.script, self.script[self.at]
        if ch != ";" and self._in_test():
            self._take(1)
            return
        if ch == "&" and (self._word_ends_with("<>") or script[self.at + 1 : self.at + 2] == ">"):
            self._take(1)
            return
        case = self.open[-1] if self.open and self.open[-1].kind == "case" else None
        if ch == "|" and case is not None and case.phase == "pattern":
            self._end_word()
            self._take(1)
            self.word_at = len(self.text)
            return
        self._separator()

    def _separator(self) -> None:
        """A run of ``;&|`` (and the newline after it), or a newline: the command before it ends."""
        script = self.script
        start = self.at
        while self.at < len(script) and script[self.at] in _SEPARATOR_CHARS:
            self.at += 1
        separator = script[start : self.at]
        newline = self.at < len(script) and script[self.at] == "\n"
        if newline:
            self.at += 1
        self._end_command(separator or "\n")
        if newline:
            self._skip_heredoc_bodies()
        case = self.open[-1] if self.open and self.open[-1].kind == "case" else None
        if case is not None and separator in _CASE_SEPARATORS:
            case.phase = "pattern"

    def _end_command(self, separator: str) -> None:
        """Emit the command read so far (if any) with ``separator``; after a group, the separator is the group's."""
        self._end_word()
        text = "".join(self.text).strip()
        if text:
            self.pieces.append(Piece("command", text, separator))
            self._mark_used()
        elif self.after_group:
            self.pieces[-1].separator = separator
        self._new_command()

    def _new_command(self) -> None:
        self.text = []
        self.word_at = self.command_at = self.words = self.pattern_at = 0
        self.first_word = ""
        self.assigning, self.declaring, self.test = True, False, False
        self.after_group = self.redirect_target = False

    def _mark_used(self) -> None:
        for construct in reversed(self.open):
            if construct.kind != "case":
                construct.empty = False
                return

    def _finish(self) -> None:
        self._end_command("")
        for construct in self.open:
            if construct.kind != "case":  # (an unclosed `case` is read as far as it goes, as before)
                raise UnreadableScriptError(f"`{construct.kind}` is never closed")

    # -- parentheses ---------------------------------------------------------------------------------------------

    def _open_parenthesis(self) -> None:
        """``(``: a subshell at a command's start; in a word, an array (``A=(``) or an extended glob (``@(``);
        after a name, a function definition; ``((`` an arithmetic command; elsewhere a syntax error."""
        if self._in_test():
            self._take(1)
            return
        word = self._short_word(_MAX_NAME_CHUNKS)
        if word and (self.assigning or self.declaring) and _ASSIGNMENT_START.match(word):
            self._enter_word_part_at_parenthesis(_ARRAY)  # (newlines inside are blanks, not separators)
            return
        if self._word_ends_with(_EXTGLOB_MARKS) and not (word == "!" and self._at_command_start()):
            self._enter_word_part_at_parenthesis(")")
            return
        case = self.open[-1] if self.open and self.open[-1].kind == "case" else None
        if case is not None and case.phase == "pattern" and word == "":
            self.at += 1  # `case x in (a) ...`: a pattern's optional opening parenthesis
            return
        self._end_word()
        if (self._at_command_start() or self._first_word_is("for", "select")) and self._arithmetic():
            return
        if self._at_command_start():
            self.at += 1
            self._open_group("(", function=False)
            return
        if self.words == 1 and _FUNCTION_NAME.match(self.first_word):
            self._function_parentheses()
            return
        raise UnreadableScriptError("`(` in the middle of a command")

    def _enter_word_part_at_parenthesis(self, closer: str) -> None:
        self._nest(closer)
        self._take(1)

    def _in_test(self) -> bool:
        """Inside ``[[ ... ]]`` (its closing ``]]`` not just read): an operator character is the test's own."""
        return self.test and self._short_word(2) != "]]"

    def _first_word_is(self, *names: str) -> bool:
        return self.words == 1 and self.first_word in names

    def _arithmetic(self) -> bool:
        """``((`` whose inner parentheses balance to a closing ``))`` is arithmetic (``(( i++ ))``, ``for ((i=0;
        i<3; i++))``); bash reads any other ``((`` as two subshells (``((cd /x; a) )``)."""
        script = self.script
        if not script.startswith("((", self.at):
            return False
        depth, end = 0, self.at + 2
        limit = min(len(script), end + _MAX_ARITHMETIC_CHARS)
        while end < limit:
            ch = script[end]
            if ch in "'\"":  # (a quoted parenthesis is not counted; a quote not closed: not arithmetic)
                end = script.find(ch, end + 1, limit)
                if end == -1:
                    return False
            elif ch == "(":
                depth += 1
            elif ch == ")" and depth:
                depth -= 1
            elif ch == ")":
                if script[end + 1 : end + 2] != ")":
                    return False
                self._take(end + 2 - self.at)
                self._command_word("((")
                self.word_at = len(self.text)
                return True
            end += 1
        return False

    def _close_parenthesis(self) -> None:
        """``)``: the end of a case pattern or of the innermost subshell; anything else is a syntax error."""
        if self._in_test():
            self._take(1)
            return
        self._end_word()
        top = self.open[-1] if self.open else None
        if top is not None and top.kind == "case" and top.phase == "pattern":
            # The pattern (`a | b )`) is left as a lone `)`, which planner.k8s.shell reads as the reserved
            # word it is: the command that follows is the first word after it.
            del self.text[self.pattern_at :]
            self.text.append(" ")
            self._take(1)
            top.phase = "body"
            self.word_at = self.command_at = len(self.text)
            self.words, self.first_word, self.assigning, self.declaring = 0, "", True, False
            return
        self.at += 1
        self._close_group("(")

    # -- groups ----------------------------------------------------------------------------------------------------

    def _open_group(self, kind: Literal["(", "{"], *, function: bool) -> None:
        """Open a group; the reserved words (or case pattern) before it go with it."""
        if self.groups >= MAX_GROUP_DEPTH:
            raise UnreadableScriptError(f"subshells and brace groups nested deeper than {MAX_GROUP_DEPTH}")
        prefix = "".join(self.text).strip()
        self._mark_used()
        self.pieces.append(Piece("open", prefix, group=kind, function=function))
        self.open.append(_Open(kind))
        self.groups += 1
        self._new_command()

    def _close_group(self, kind: Literal["(", "{"]) -> None:
        closer = ")" if kind == "(" else "}"
        self._end_command("")
        top = self.open[-1] if self.open else None
        if top is None or top.kind != kind:
            raise UnreadableScriptError(f"`{closer}` without its `{kind}`")
        if top.empty:
            raise UnreadableScriptError(f"an empty `{kind} {closer}`")
        self.open.pop()
        self.groups -= 1
        self.pieces.append(Piece("close", group=kind))
        self.after_group = True

    def _skip_blanks(self, at: int, blanks: frozenset[str] = _BLANKS) -> int:
        """The index of the first character at or after ``at`` that is not one of ``blanks``."""
        while at < len(self.script) and self.script[at] in blanks:
            at += 1
        return at

    def _function_parentheses(self) -> None:
        """``NAME ()`` (the name already read): the function's body follows."""
        script = self.script
        at = self._skip_blanks(self.at + 1)
        if script[at : at + 1] != ")":
            raise UnreadableScriptError("`(` in the middle of a command")
        self.at = at + 1
        self._function_body()

    def _function_keyword(self) -> None:
        """``function NAME [()] BODY`` (``function NAME ( list )``: the parenthesis opens the body)."""
        script = self.script
        start = at = self._skip_blanks(self.at)
        while at < len(script) and script[at] not in _WORD_ENDS:
            at += 1
        if not _FUNCTION_NAME.match(script[start:at]):
            raise UnreadableScriptError("a function definition kv-planner does not read")
        self.at = at = self._skip_blanks(at)
        if script.startswith("(", at) and script.startswith(")", self._skip_blanks(at + 1)):
            self._function_parentheses()
        else:
            self._function_body()

    def _function_body(self) -> None:
        """The body of a function: a ``{ }`` or ``( )`` group, read where it is written, as one that may run."""
        script = self.script
        at = self._skip_blanks(self.at, _BLANKS | {"\n"})
        del self.text[self.command_at :]  # (the name: the function's commands are in its body)
        if script.startswith("{", at) and script[at + 1 : at + 2] in (" ", "\t", "\n"):
            self.at = at + 1
            self._open_group("{", function=True)
        elif script.startswith("(", at) and not script.startswith("((", at):
            self.at = at + 1
            self._open_group("(", function=True)
        else:
            raise UnreadableScriptError("a function whose body is not a `{ }` or `( )` group")
