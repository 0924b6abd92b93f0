"""Parse and edit vLLM command lines exactly as vLLM's argparse reads them.

vLLM's ``FlexibleArgumentParser`` (vllm X/utils/argparse_utils.py, earlier vllm/utils/__init__.py)
preprocesses argv before argparse sees it: underscores in ``--flag_names`` become dashes (only the part
before the first ``.``), ``-O3`` becomes an optimization level, ``--json-arg.key value`` is merged into
``--json-arg '{"key": value}'``, ``--config FILE.yaml`` is expanded in place (CLI > config > defaults),
and with ``vllm serve`` a ``--model`` option is refused (<= 0.11.0) or moved to the positional model
(>= 0.11.1). argparse then accepts unambiguous prefixes of long options (``allow_abbrev``), ``--k=v`` and
``--k v``, and the last occurrence of a flag wins. The option strings and their arity come from
:mod:`planner.vllm.argv_flags`, generated from each release's own source.

:func:`parse_command` finds vLLM in a full command (``vllm serve``, ``python -m
vllm.entrypoints.openai.api_server``); :func:`parse_args` reads the arguments of an image whose
entrypoint is vLLM. :func:`set_flag` edits an argv list minimally, in the user's own spelling.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import re2
from pydantic import BaseModel, ConfigDict, Field

from planner.errors import InvalidArgumentError, PlannerInputError
from planner.units import parse_human_int
from planner.untrusted import load_embedded_yaml
from planner.vllm.args import ServingArgs
from planner.vllm.argv_emit import ArgEdit, Style, apply_edits, detect_style, flag_edits, format_args, set_flag
from planner.vllm.argv_table import FlagTable, Kind, flag_table
from planner.vllm.argv_values import to_serving_args, typed_value
from planner.vllm.launchers import program, unwrap

__all__ = [
    "ArgEdit",
    "Entrypoint",
    "FlagTable",
    "Found",
    "ParsedFlag",
    "Style",
    "VllmCommand",
    "apply_edits",
    "detect_style",
    "find",
    "flag_edits",
    "flag_table",
    "format_args",
    "locate",
    "parse_args",
    "parse_command",
    "set_flag",
    "to_serving_args",
    "typed_value",
]
Entrypoint = Literal["serve", "api_server", "image"]

# Modules run with `python -m` that parse vLLM's engine arguments with FlexibleArgumentParser and no sub
# command (so `--model`, no positional model), read in the wheels of 0.8.5-0.33.0: the OpenAI server (all;
# from 0.33 a deprecated alias of launchers.api_server.entry), the old demo server (<= 0.20), the gRPC
# server (0.19+; from 0.33 an alias of launchers.grpc_server). Their own few options (--host, --port,
# --ssl-*) are in the flag table; the OpenAI server's other front-end options are not checked for them.
_API_SERVER_MODULES = (
    "vllm.entrypoints.openai.api_server",
    "vllm.entrypoints.launchers.api_server.entry",
    "vllm.entrypoints.api_server",
    "vllm.entrypoints.grpc_server",
    "vllm.entrypoints.launchers.grpc_server",
)
_CLI_MODULE = "vllm.entrypoints.cli.main"
_NEGATIVE_NUMBER = re2.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's _negative_number_matcher
_PYTHON = re2.compile(r"^python(\d+(\.\d+)?)?$")


class ParsedFlag(BaseModel):
    """One option as vLLM reads it."""

    model_config = ConfigDict(frozen=True)

    dest: str = Field(description="argparse dest, e.g. max_model_len")
    option: str = Field(description="the option string it resolved to, e.g. --max-model-len")
    written: str = Field(description="the option as written, before '=' (e.g. --max_model or -tp)")
    value: Any = Field(description="str, list[str], True/False, or a dict for --json-arg.key values")
    source: Literal["argv", "config"] = "argv"
    index: int | None = Field(default=None, description="argv index of the option token (argv source)")
    value_index: int | None = Field(
        default=None, description="argv index of the separate value token; None for --k=v or no value"
    )
    inline: bool = Field(default=False, description="written as --k=v")
    dotted: bool = Field(default=False, description="--json-arg.key value: merged into the JSON value")


class VllmCommand(BaseModel):
    """A vLLM command line, parsed as the release in force would parse it."""

    model_config = ConfigDict(frozen=True)

    entrypoint: Entrypoint
    release: str = Field(description="the flag table used (newest known release <= the image's)")
    args_start: int = Field(description="argv index where vLLM's own arguments begin")
    model: str | None = None
    model_source: Literal["positional", "--model", "config"] | None = None
    model_index: int | None = Field(default=None, description="argv index of the model token")
    flags: list[ParsedFlag] = Field(default_factory=list)
    unknown: list[str] = Field(default_factory=list, description="options vLLM would not recognise")
    errors: list[str] = Field(default_factory=list, description="why vLLM would refuse this command line")
    config_file: str | None = None
    config_loaded: bool = False
    namespace: dict[str, Any] = Field(
        default_factory=dict,
        description="engine arguments set without vLLM's parser, dest -> value, under the command line's flags: "
        "the argparse Namespace vLLM's parser starts from (Dynamo's --engine-config-json), or keyword arguments "
        "a platform gives the engine directly (Ray Serve LLM's engine_kwargs: AsyncEngineArgs(**kwargs)). A "
        "`false` there is dest = False in every release, however (or whether) its parser spells it",
    )
    assumed: str | None = Field(
        default=None,
        description="how the model was chosen where vLLM's choice depends on what the command line does not say "
        "(an image's entrypoint with --model given twice), in words; None when vLLM's reading is settled",
    )

    def last(self, dest: str) -> ParsedFlag | None:
        """The occurrence of ``dest`` that wins (argparse: the last one)."""
        found = None
        for flag in self.flags:
            if flag.dest == dest:
                found = flag
        return found

    def value(self, dest: str) -> Any:
        flag = self.last(dest)
        return None if flag is None else flag.value

    @property
    def values(self) -> dict[str, Any]:
        """dest -> the value in force (last occurrence wins, as in argparse).

        ``--json-arg.key value`` pieces are merged into one dict that vLLM appends after every other
        word, so it replaces a whole ``--json-arg '{...}'`` given anywhere. :attr:`namespace` comes first:
        a flag on the command line replaces it (argparse sets only the dests the namespace lacks).
        """
        result: dict[str, Any] = dict(self.namespace)
        dotted: dict[str, dict[str, Any]] = {}
        for flag in self.flags:
            if flag.dotted:
                _merge(dotted.setdefault(flag.dest, {}), flag.value)
            else:
                result[flag.dest] = flag.value
        result.update(dotted)
        return result

    def serving_args(self, env: Mapping[str, str] | None = None) -> ServingArgs:
        """The sizing subset, typed. Raises :class:`InvalidArgumentError` for values vLLM would refuse."""
        return to_serving_args(self.values, env=env)


# --- the parser ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Token:
    text: str  # after FlexibleArgumentParser's rewrite
    index: int | None  # argv index; None for tokens that came from the --config file
    source: Literal["argv", "config"] = "argv"
    original: str = ""  # as written


@dataclass(frozen=True, slots=True)
class Found:
    """vLLM's entry point in a full command line."""

    entrypoint: Entrypoint
    words: tuple[str, ...]  # the vLLM command as it runs, launchers removed (see planner.vllm.launchers)
    start: int  # index in ``words`` where vLLM's own arguments begin
    argv_start: int | None  # the same in the command line given; None when they come from an `env -S` string


def find(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Found | None:
    """vLLM in a full command, or None when the command does not start vLLM.

    The command itself must be vLLM: ``vllm serve`` (any path to the ``vllm`` script), ``python[3[.x]]
    [interpreter options] -m MODULE`` for a module that serves with vLLM's engine arguments
    (:data:`_API_SERVER_MODULES`), ``python -m vllm.entrypoints.cli.main serve`` or ``python [options]
    /path/to/vllm serve``, possibly behind launchers that run their arguments as a command (``exec``,
    ``env [-u X] [A=1 ...] [-S STRING]``, ``tini --``, ``gosu USER``, ``numactl --cpunodebind=0``,
    ``uv run [-m]``, ``uvx``, ``conda run -n env`` ...: :mod:`planner.vllm.launchers`, each read with
    its own option grammar). ``vllm serve`` among the arguments of another program (``echo vllm serve
    x``, ``test``, ``grep``) is not vLLM, nor is a launcher whose form is not read. ``env`` gives the
    values of ``${NAME}`` in ``env -S`` strings.
    """
    unwrapped = unwrap(argv, env)
    if unwrapped is None:
        return None
    words = unwrapped.words
    hit = _entry(words)
    if hit is None:
        return None
    entrypoint, start = hit
    return Found(entrypoint=entrypoint, words=words, start=start, argv_start=unwrapped.argv_index(start))


def locate(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[Entrypoint, int] | None:
    """Where vLLM's own arguments start in ``argv`` (see :func:`find`); None when the command does not
    start vLLM, or when those arguments are not ``argv``'s own words (an ``env -S`` string)."""
    found = find(argv, env)
    if found is None or found.argv_start is None:
        return None
    return found.entrypoint, found.argv_start


def _entry(words: Sequence[str]) -> tuple[Entrypoint, int] | None:
    """(entry point, index of vLLM's first argument) for a command whose program is ``words[0]``."""
    base = program(words[0])
    if base == "vllm":
        return ("serve", 2) if list(words[1:2]) == ["serve"] else None
    if not _PYTHON.match(base):
        return None
    module, at = _python_target(words, 1)
    if module is None:  # a script: `python3 /usr/local/bin/vllm serve ...`
        if at < len(words) and program(words[at]) == "vllm" and list(words[at + 1 : at + 2]) == ["serve"]:
            return "serve", at + 2
        return None
    if module in _API_SERVER_MODULES:
        return "api_server", at
    if module == _CLI_MODULE and list(words[at : at + 1]) == ["serve"]:
        return "serve", at + 1
    return None


# CPython's own options (Python/getopt.c, 3.8-3.13: "bBc:dEhiIJm:OPqRsStuvVW:xX:?"): -c, -m, -W and -X take
# an argument, attached (`-Wignore`, `-mvllm...`) or as the next word; the others are flags and combine
# (`-uB`, `-OO`, `-uW ignore`). `--check-hash-based-pycs` takes the next word.
_PYTHON_FLAGS = frozenset("bBdEhiIJOPqRsStuvVx?")
_PYTHON_WITH_ARGUMENT = frozenset("cmWX")
_PYTHON_LONG_WITH_ARGUMENT = frozenset({"--check-hash-based-pycs"})


def _python_target(argv: Sequence[str], i: int) -> tuple[str | None, int]:
    """After ``python``'s interpreter options: (module, index after it) for ``-m MODULE``, else (None,
    index of the script word); (None, len(argv)) for ``-c`` (a program, not vLLM) or no script."""
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return None, i + 1
        if not word.startswith("-") or word == "-":
            return None, i
        if word.startswith("--"):
            i += 2 if word in _PYTHON_LONG_WITH_ARGUMENT else 1
            continue
        j = 1
        while j < len(word):
            letter = word[j]
            if letter in _PYTHON_WITH_ARGUMENT:
                attached = word[j + 1 :]
                if attached:
                    value, after = attached, i + 1
                elif i + 1 < len(argv):
                    value, after = argv[i + 1], i + 2
                else:
                    return None, len(argv)
                if letter == "m":
                    return value, after
                if letter == "c":
                    return None, len(argv)
                i = after
                break
            if letter not in _PYTHON_FLAGS:
                return None, len(argv)  # "Unknown option": python exits
            j += 1
        else:
            i += 1
    return None, i


def parse_command(
    argv: Sequence[str],
    *,
    version: str | None = None,
    read_config: Callable[[str], str | None] | None = None,
    env: Mapping[str, str] | None = None,
) -> VllmCommand | None:
    """Parse a full command (``command`` + ``args``); None when it does not start vLLM. ``env``: the
    container's environment, for ``${NAME}`` in an ``env -S`` string in front of vLLM."""
    found = locate(argv, env)
    if found is None:
        return None
    entrypoint, start = found
    return _parse(list(argv), start, entrypoint, flag_table(version), read_config)


def parse_args(
    args: Sequence[str],
    *,
    version: str | None = None,
    entrypoint: Entrypoint = "image",
    read_config: Callable[[str], str | None] | None = None,
) -> VllmCommand:
    """Parse the arguments given to an image whose entrypoint is vLLM (no command).

    Whether that entrypoint is ``vllm serve`` or ``python -m vllm.entrypoints.openai.api_server``
    (the vLLM project's image has used both) is not in the manifest, and only one case reads differently:
    ``--model`` given more than once with different values and no positional model. ``vllm serve``
    0.11.1+ serves the first (``FlexibleArgumentParser`` moves it to the positional model), the api_server
    module the last (argparse), and ``vllm serve`` up to 0.11.0 does not start (it refuses ``--model``, and
    needs a positional model). Then the entrypoint
    is assumed to be ``vllm serve`` where the release in force accepts ``vllm serve --model`` (0.11.1+),
    else the api_server module (the only one that starts with it), and :attr:`VllmCommand.assumed` says
    so and names the model the other entrypoint would serve.
    """
    table = flag_table(version)
    parsed = _parse(list(args), 0, entrypoint, table, read_config)
    if entrypoint != "image" or parsed.model_source != "--model":
        return parsed
    models = [flag for flag in parsed.flags if flag.dest == "model" and flag.source == "argv" and not flag.dotted]
    if len({str(flag.value) for flag in models}) < 2:
        return parsed
    last = str(models[-1].value)
    if table.serve_model_option != "moved":
        note = (
            f"--model is given {len(models)} times and no positional model: `vllm serve` {table.in_force} does not "
            f"start without a positional model, so the image's entrypoint is taken to be the api_server module, "
            f"which serves the last ({last})"
        )
        return parsed.model_copy(update={"assumed": note})
    served = _parse(list(args), 0, "serve", table, read_config)
    note = (
        f"--model is given {len(models)} times and no positional model: the image's entrypoint decides which "
        f"one vLLM serves; taken to be `vllm serve`, which serves the first `--model` ({served.model}), where "
        f"the api_server module would serve the last ({last})"
    )
    return served.model_copy(update={"entrypoint": "image", "assumed": note})


def _normalise(token: str, table: FlagTable) -> list[str]:
    """FlexibleArgumentParser's per-token rewrite (underscores, -O<level>)."""
    if token.startswith("--"):
        key, sep, value = token.partition("=")
        head, dot, tail = key[2:].partition(".")
        return ["--" + head.replace("_", "-") + dot + tail + sep + value]
    if table.optimization_level and token.startswith("-O") and token != "-O" and not token.startswith("-O."):
        level = token[3:] if token[2] == "=" else token[2:]
        return ["--optimization-level", level]
    return [token]


def _config_tokens(text: str, table: FlagTable) -> list[str]:
    """vLLM's load_config_file: YAML mapping -> argv words, per release."""
    try:
        data = load_embedded_yaml(text, source="--config")
    except PlannerInputError as error:
        raise InvalidArgumentError(str(error)[:200], flag="--config") from None
    if data is None:
        return []
    if not isinstance(data, dict):
        raise InvalidArgumentError("--config must hold a YAML mapping of flag: value", flag="--config")
    words: list[str] = []
    for key, value in data.items():
        option = f"--{key}"
        if isinstance(value, bool):
            if value:
                words.append(option)
            elif table.config_false_as_no and f"--no-{key}".replace("_", "-") in table.options:
                words.append(f"--no-{key}")
        elif isinstance(value, list) and table.config_lists:
            if value:
                words += [option, *(str(item) for item in value)]
        elif isinstance(value, dict) and table.config_dicts:
            words += [option, json.dumps(value)]
        else:
            words += [option, str(value)]
    return words


def _is_option(token: str, table: FlagTable) -> bool:
    """argparse's ``_parse_optional`` is not None: the token is read as an option, not a value."""
    if not token or token[0] != "-" or token == "-":
        return False
    if token in table.options:
        return True
    if "=" in token and token.split("=", 1)[0] in table.options:
        return True
    if _matches(token, table):
        return True
    if _NEGATIVE_NUMBER.match(token):
        return False
    return " " not in token


def _matches(token: str, table: FlagTable) -> list[tuple[str, str | None]]:
    """argparse ``_get_option_tuples``: (option, explicit value) pairs an abbreviation could mean."""
    result: list[tuple[str, str | None]] = []
    if len(token) < 2 or token[0] != "-":
        return result
    if token[1] == "-":
        prefix, sep, explicit = token.partition("=")
        for option in table.options:
            if option.startswith(prefix):
                result.append((option, explicit if sep else None))
    else:
        short, short_explicit = token[:2], token[2:]
        for option in table.options:
            if option == short:
                result.append((option, short_explicit))
            elif option.startswith(token):
                result.append((option, None))
    return result


def _resolve(token: str, table: FlagTable) -> tuple[str | None, str | None, str | None]:
    """(option, explicit value, error) for an option token, following argparse."""
    if token in table.options:
        return token, None, None
    if "=" in token:
        head, explicit = token.split("=", 1)
        if head in table.options:
            return head, explicit, None
    matches = _matches(token, table)
    if len(matches) > 1:
        names = ", ".join(sorted(option for option, _ in matches))
        return None, None, f"ambiguous option: {token} could match {names}"
    if len(matches) == 1:
        option, attached = matches[0]
        return option, attached or None, None
    return None, None, None


@dataclass
class _Scan:
    """What the scan of vLLM's words found so far (one parse)."""

    errors: list[str]
    flags: list[ParsedFlag] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    positionals: list[_Token] = field(default_factory=list)


def _parse(
    argv: list[str],
    start: int,
    entrypoint: Entrypoint,
    table: FlagTable,
    read_config: Callable[[str], str | None] | None,
) -> VllmCommand:
    scan = _Scan(errors=[])
    raw = [_Token(text=text, index=start + i, original=text) for i, text in enumerate(argv[start:])]
    # FlexibleArgumentParser.parse_args, in vLLM's order: the `vllm serve --model` rule on the words as
    # written, then --config, then the per-word rewrite, then argparse.
    _check_serve_model_option(raw, entrypoint, table, scan.errors)
    moved = None
    if entrypoint == "serve" and table.serve_model_option == "moved":
        raw, moved = _move_model_option(raw, scan.errors)
    raw, config_file, config_loaded = _with_config_file(raw, entrypoint, table, read_config, scan.errors)
    tokens = _preprocess(raw, table)
    _scan_tokens(tokens, table, scan)
    model, model_source, model_index, used = _model(entrypoint, scan.flags, scan.positionals, moved, scan.errors)
    scan.unknown += [extra.text for extra in scan.positionals[used:]]
    if scan.unknown:
        scan.errors.append("unrecognized arguments: " + " ".join(scan.unknown))
    return VllmCommand.model_construct(
        entrypoint=entrypoint,
        release=table.release,
        args_start=start,
        model=model,
        model_source=model_source,
        model_index=model_index,
        flags=scan.flags,
        unknown=scan.unknown,
        errors=scan.errors,
        config_file=config_file,
        config_loaded=config_loaded,
    )


def _move_model_option(raw: list[_Token], errors: list[str]) -> tuple[list[_Token], _Token | None]:
    """vLLM >= 0.11.1 ``FlexibleArgumentParser.parse_args`` with ``vllm serve``: the FIRST word that is
    ``--model`` or ``--model=X`` (``next(i for i, arg in enumerate(args) if ...)``) is taken out with its
    value, and the value becomes the first word after ``serve`` (the positional model). Any later
    ``--model`` stays an option, which ``vllm serve`` overrides with the positional (serve.py:
    ``args.model = args.model_tag``). Returns the words and the moved model word (None if none)."""
    for at, token in enumerate(raw):
        if token.text == "--model":
            if at + 1 >= len(raw):
                # vLLM: args[model_idx + 1] raises IndexError; argparse would say the same of --model.
                errors.append("argument --model: expected one argument")
                return raw, None
            value = raw[at + 1]
            moved = _Token(text=value.text, index=value.index, original=value.original)
            return [moved, *raw[:at], *raw[at + 2 :]], moved
        if token.text.startswith("--model=") and len(token.text) > len("--model="):
            moved = _Token(text=token.text[len("--model=") :], index=token.index, original=token.original)
            return [moved, *raw[:at], *raw[at + 1 :]], moved
    return raw, None


def _with_config_file(
    raw: list[_Token],
    entrypoint: Entrypoint,
    table: FlagTable,
    read_config: Callable[[str], str | None] | None,
    errors: list[str],
) -> tuple[list[_Token], str | None, bool]:
    """``--config FILE`` replaced by the file's words where vLLM's ``_pull_args_from_config`` puts them
    (the CLI words after them win). Returns the words, the file named and whether it was read.

    Every release 0.8.5-0.33 (vllm/utils ``FlexibleArgumentParser._pull_args_from_config``, from 0.11.1
    vllm/utils/argparse_utils.py), ``args`` being ``serve ...`` or the api_server's own words:

    * ``vllm serve``: when the first word after ``serve`` does not start with ``-`` (``model_in_cli``),
      the config words go right after it, so that word stays the positional model even when the config
      ends with an option that takes values (``served-model-name: [a]``, ``hf-token: true``); else they go
      first, and a config without ``model:`` is refused ("No model specified!");
    * the api_server module (no sub command): from 0.10.2 a first word starting with ``-`` puts the
      config words first; otherwise, and always up to 0.10.1, they go after the first word.

    An image's arguments follow the ``vllm serve`` placement (which is also the api_server's from 0.10.2).
    """
    texts = [t.text for t in raw]
    if "--config" not in texts:
        return raw, None, False
    if texts.count("--config") > 1:
        errors.append("more than one --config file given")
    at = texts.index("--config")
    if at + 1 >= len(raw):
        errors.append("No config file specified! Please check your command-line arguments.")
        return raw, None, False
    config_file = raw[at + 1].text
    content = read_config(config_file) if read_config else None
    if content is None:
        return raw[:at] + raw[at + 2 :], config_file, False
    config = [_Token(text=w, index=None, source="config", original=w) for w in _config_tokens(content, table)]
    if entrypoint == "api_server":
        if table.version_key >= (0, 10, 2) and raw[0].text.startswith("-"):
            return config + raw[:at] + raw[at + 2 :], config_file, True
        # `[args[0]] + config_args + args[1:index] + args[index + 2:]` (with index 0 `--config` stays)
        return raw[:1] + config + raw[1:at] + raw[at + 2 :], config_file, True
    if at > 0 and not raw[0].text.startswith("-"):  # model_in_cli
        return raw[:1] + config + raw[1:at] + raw[at + 2 :], config_file, True
    if entrypoint == "serve" and not any(t.text == "--model" for t in config):
        errors.append("No model specified! Please specify model either as a positional argument or in a config file.")
    return config + raw[:at] + raw[at + 2 :], config_file, True


def _preprocess(raw: list[_Token], table: FlagTable) -> list[_Token]:
    """FlexibleArgumentParser.parse_args's rewrite of the words before argparse sees them."""
    tokens: list[_Token] = []
    for position, token in enumerate(raw):
        following = raw[position + 1].text if position + 1 < len(raw) else None
        if table.optimization_level and token.text == "-O" and following in ("0", "1", "2", "3"):
            tokens.append(replace(token, text="--optimization-level"))  # `-O 3`
            continue
        for text in _normalise(token.text, table):
            tokens.append(_Token(text=text, index=token.index, source=token.source, original=token.original))
    return tokens


def _check_serve_model_option(
    tokens: list[_Token], entrypoint: Entrypoint, table: FlagTable, errors: list[str]
) -> None:
    # (Not for "image": whether the image's entrypoint is `vllm serve` or the api_server module is
    # unknown here, and the api_server accepts --model.)
    refused = entrypoint == "serve" and table.serve_model_option == "refused"
    if refused and any(t.original == "--model" and t.source == "argv" for t in tokens):
        errors.append(
            f"vLLM {table.in_force} refuses `vllm serve --model` (accepted from 0.11.1): "
            "give the model as the first positional argument"
        )


def _scan_tokens(tokens: list[_Token], table: FlagTable, scan: _Scan) -> None:
    """argparse's left-to-right pass: options with their values, positionals, ``--``."""
    i = 0
    only_positionals = False
    while i < len(tokens):
        text = tokens[i].text
        if only_positionals or not _is_option(text, table):
            if text == "--" and not only_positionals:
                only_positionals = True
            else:
                scan.positionals.append(tokens[i])
            i += 1
            continue
        if table.dotted_json and "." in text.split("=", 1)[0]:
            consumed = _dotted_option(tokens, i, table, scan)
            if consumed is None:
                break
            i += consumed
            continue
        i = _option(tokens, i, table, scan)


def _dotted_option(tokens: list[_Token], i: int, table: FlagTable, scan: _Scan) -> int | None:
    """``--json-arg.key[+] value`` (dotted JSON args), merged into one JSON value per option.
    Returns the words consumed, or None when the value is missing (the scan stops, as argparse does)."""
    token = tokens[i]
    head, has_eq, inline_value = token.text.partition("=")
    base, _, path = head.partition(".")
    if has_eq:
        value_text, value_index, consumed = inline_value, None, 1
    elif i + 1 < len(tokens):
        value_text, value_index, consumed = tokens[i + 1].text, tokens[i + 1].index, 2
    else:
        scan.errors.append(f"argument {head}: expected one argument")
        return None
    option, _, error = _resolve(base, table)
    if option is None:
        scan.unknown.append(head)
        if error:
            scan.errors.append(error)
        return consumed
    scan.flags.append(
        ParsedFlag.model_construct(
            dest=table.options[option][0],
            option=option,
            written=token.original.split("=", 1)[0],
            value=_dotted_value(path, value_text, human=table.dotted_human_ints),
            source=token.source,
            index=token.index,
            value_index=value_index,
            inline=bool(has_eq),
            dotted=True,
        )
    )
    return consumed


def _option(tokens: list[_Token], i: int, table: FlagTable, scan: _Scan) -> int:
    """One option at ``tokens[i]`` with its value(s); returns the index of the next word."""
    token = tokens[i]
    text = token.text
    option, explicit, error = _resolve(text, table)
    if option is None:
        if error:
            scan.errors.append(error)
        else:
            scan.unknown.append(text)
        return i + 1
    dest, kind = table.options[option]
    original = token.original
    written = original.split("=", 1)[0] if explicit is not None and "=" in original else original
    if explicit is not None and not text.startswith("--") and "=" not in text:
        written = option  # -qfp8: the short option with its value attached
    i += 1
    if kind in ("true", "false", "count"):
        if explicit is not None:
            scan.errors.append(f"argument {option}: ignored explicit argument {explicit!r}")
        scan.flags.append(
            ParsedFlag.model_construct(
                dest=dest, option=option, written=written, value=kind != "false", source=token.source, index=token.index
            )
        )
        return i
    if explicit is not None:
        scan.flags.append(
            ParsedFlag.model_construct(
                dest=dest,
                option=option,
                written=written,
                value=[explicit] if kind == "multi" else explicit,
                source=token.source,
                index=token.index,
                inline=True,
            )
        )
        return i
    needed = _arity(kind)
    taken: list[_Token] = []
    while i < len(tokens) and not _is_option(tokens[i].text, table) and tokens[i].text != "--":
        if needed is not None and len(taken) >= needed:
            break
        taken.append(tokens[i])
        i += 1
    value: Any
    if kind == "optional":
        value = taken[0].text if taken else True
    elif not taken or (needed is not None and len(taken) < needed):
        scan.errors.append(f"argument {option}: expected {'one' if needed == 1 else 'more'} argument")
        return i
    elif kind == "value":
        value = taken[0].text
    else:
        value = [t.text for t in taken]
    scan.flags.append(
        ParsedFlag.model_construct(
            dest=dest,
            option=option,
            written=written,
            value=value,
            source=token.source,
            index=token.index,
            value_index=taken[0].index if taken else None,
        )
    )
    return i


def _arity(kind: Kind) -> int | None:
    if kind in ("value", "optional"):
        return 1
    if kind.startswith("n") and kind[1:].isdigit():
        return int(kind[1:])
    return None  # multi: greedy, as argparse's 'A+' pattern


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    """vLLM's recursive_dict_update: nested dicts merge, lists extend, anything else is replaced."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] = into[key] + value
        else:
            into[key] = value


def _dotted_value(path: str, text: str, *, human: bool = True) -> dict[str, Any]:
    """``--compilation-config.level 3`` -> {"level": 3} (JSON, else with ``human`` a ``32k``-style integer, else
    the string), as vLLM merges it."""
    keys = path.split(".")
    if keys[-1].endswith("+"):
        keys[-1] = keys[-1][:-1]
        value: Any = text.split(",")
    else:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
            if human:
                try:
                    value = parse_human_int(text)
                except (InvalidArgumentError, ValueError):
                    value = text
    for key in reversed(keys):
        value = {key: value}
    return dict(value)


def _model(
    entrypoint: Entrypoint,
    flags: list[ParsedFlag],
    positionals: list[_Token],
    moved: _Token | None,
    errors: list[str],
) -> tuple[str | None, Literal["positional", "--model", "config"] | None, int | None, int]:
    """(model, where it came from, its argv index, positionals used)."""
    option_model = None
    for flag in flags:
        if flag.dest == "model":
            option_model = flag  # argparse: the last --model wins (config words come before the CLI's)
    option_source: Literal["positional", "--model", "config"] = "--model"
    option_index = None
    if option_model is not None:
        option_source = "config" if option_model.source == "config" else "--model"
        option_index = option_model.index if option_model.inline else option_model.value_index
    first = positionals[0] if positionals else None
    if entrypoint == "api_server":
        # The api_server module has no positional model; without --model it serves vLLM's default.
        if option_model is None:
            return None, None, None, 0
        return str(option_model.value), option_source, option_index, 0
    if first is not None:
        # `vllm serve`: the positional model_tag replaces args.model (serve.py `args.model =
        # args.model_tag`), whatever --model or the config says. From 0.11.1 it may be the first
        # `--model X`, moved there by FlexibleArgumentParser (see _move_model_option).
        was_option = moved is not None and (first.index, first.text) == (moved.index, moved.text)
        source: Literal["positional", "--model"] = "--model" if was_option else "positional"
        return first.text, source, first.index, 1
    if option_model is not None:
        return str(option_model.value), option_source, option_index, 0
    errors.append("no model given (positional, --model or --config)")
    return None, None, None, 0
