"""Programs that run their arguments as a command (launchers), each read with its own option grammar.

A container's command line often starts vLLM behind other programs: an init (``tini --``,
``dumb-init``), a user switch (``gosu vllm``, ``runuser -u vllm --``), a CPU/NUMA placement
(``numactl --cpunodebind=0``, ``taskset -c 0-7``), an environment manager (``uv run``, ``uvx``,
``conda run -n env``, ``pixi run``) or a small wrapper (``env A=1``, ``nohup``, ``timeout 1h``).
:func:`unwrap` finds the command such a chain finally runs and the words that command receives.

Each launcher is read with the option grammar of the program itself (taken from its source: GNU
coreutils, util-linux, numactl, tini, dumb-init, catatonit, gosu, su-exec, sudo, uv, conda, micromamba,
pixi, poetry, pipenv, pipx; the release each table was read from is named beside it): which options
take a value (``-n 5``, ``-n5``, ``--adjustment=5``), which run no command at all (``--help``,
``taskset -p``, ``numactl --show``), how many operands come before the command (``timeout DURATION``,
``gosu USER``), and whether the parser accepts abbreviated long options (getopt_long, argparse) or
options after the command (GNU getopt without ``+``: tini, catatonit, runuser). An option a table does
not list, or a form whose meaning depends on something not in the command line, makes the whole command
unreadable (None): a wrong guess would read the wrong words as vLLM's flags.

``env -S STRING`` (``--split-string``) is read as GNU env reads it: the string is split into words
(quotes, backslash escapes, ``${NAME}`` from the environment given) that replace it, and env goes on
reading options from them. A command whose vLLM words come from such a string has no argv position
(:attr:`Unwrapped.origins` is None for those words). Bounds: at most :data:`MAX_SPLITS` split strings
per command line, and each launcher consumes at least one word, so a chain costs time linear in its
length (times :data:`MAX_SPLITS`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import re2

__all__ = ["MAX_SPLITS", "Unwrapped", "program", "split_string", "unwrap"]

# At most this many `env -S` strings are split in one command line (GNU env has no limit; a real command
# has one). Past it the command is unreadable: each split rewrites the words, and a bound keeps that linear.
MAX_SPLITS = 8

_NONE, _VALUE, _OPTIONAL = 0, 1, 2


@dataclass(frozen=True, slots=True)
class _Option:
    arity: int  # _NONE, _VALUE (attached or the next word), _OPTIONAL (attached only: -hX, --opt=X)
    role: str = ""  # "stop": runs no command; "unread": a form kv-planner does not read; others: see _scan


@dataclass(frozen=True, slots=True)
class _Grammar:
    short: Mapping[str, _Option]
    long: Mapping[str, _Option]
    abbreviations: bool = False  # getopt_long, argparse: an unambiguous prefix of a long option names it
    dash_values: bool = True  # getopt: a separate value may start with "-"; argparse, clap, click, CLI11: no
    permute: bool = False  # GNU getopt without "+": options may follow the first operand
    assignments: bool = False  # sudo: NAME=VALUE words between the options
    numeric: bool = False  # nice: -N, --N, -+N are adjustments


def _grammar(*specs: str, **settings: bool) -> _Grammar:
    """A grammar from specs ``"-u --unset ="``: the option's names, then ``=`` (takes a value), ``?``
    (an optional value, attached only) and a role word (``stop``, ``unread``, ``split``, ...)."""
    short: dict[str, _Option] = {}
    long: dict[str, _Option] = {}
    for spec in specs:
        parts = spec.split()
        names = [p for p in parts if p.startswith("-")]
        marks = [p for p in parts if not p.startswith("-")]
        arity = _VALUE if "=" in marks else _OPTIONAL if "?" in marks else _NONE
        roles = [m for m in marks if m not in ("=", "?")]
        option = _Option(arity, roles[0] if roles else "")
        for name in names:
            if name.startswith("--"):
                long[name[2:]] = option
            else:
                short[name[1:]] = option
    return _Grammar(short=short, long=long, **settings)


_GNU_STANDARD = ("--help stop", "--version stop")


@dataclass(frozen=True, slots=True)
class _Launcher:
    grammar: _Grammar
    operands: int = 0  # words between the options and the command (timeout DURATION, gosu USER)
    digits: bool = False  # chrt: the operand is a priority (all digits), else the form is not read
    assignments: bool = False  # env: NAME=VALUE words (any word with "=") after the options
    needs: str = ""  # runuser: the role an option must have given ("user": -u USER) for a command to run


# getopt_long with "+" (options end at the first operand) unless said otherwise. Sources: coreutils 9.x
# (env, nice, nohup, timeout, stdbuf, chroot), GNU time 1.9, util-linux 2.41 (setsid, taskset, chrt,
# ionice, setpriv, runuser), numactl 2.0.19, tini 0.19, dumb-init 1.2.5, catatonit 0.2, gosu 1.17,
# su-exec 0.2, sudo 1.9, bash 5.2 (exec, command, builtin, time).
_GETOPT = {"abbreviations": True}
_LAUNCHERS: dict[str, _Launcher] = {
    "exec": _Launcher(_grammar("-c", "-l", "-a =", "--help stop")),
    "command": _Launcher(_grammar("-p", "-v stop", "-V stop", "--help stop")),
    "builtin": _Launcher(_grammar("--help stop")),
    "env": _Launcher(
        _grammar(
            "-a --argv0 =",
            "-i --ignore-environment",
            "--env0-from =",
            "-0 --null",
            "-u --unset =",
            "-C --chdir =",
            "--default-signal ?",
            "--ignore-signal ?",
            "--block-signal ?",
            "--list-signal-handling",
            "-v --debug",
            "-S --split-string = split",
            *_GNU_STANDARD,
            **_GETOPT,
        ),
        assignments=True,
    ),
    "nohup": _Launcher(_grammar(*_GNU_STANDARD, **_GETOPT)),
    "time": _Launcher(
        _grammar(
            "-a --append",
            "-f --format =",
            "-o --output-file =",
            "-p --portability",
            "-q --quiet",
            "-v --verbose",
            "-V --version stop",
            "--help stop",
            **_GETOPT,
        )
    ),
    "nice": _Launcher(_grammar("-n --adjustment =", *_GNU_STANDARD, numeric=True, **_GETOPT)),
    "timeout": _Launcher(
        _grammar(
            "-f --foreground",
            "-k --kill-after =",
            "-p --preserve-status",
            "-s --signal =",
            "-v --verbose",
            *_GNU_STANDARD,
            **_GETOPT,
        ),
        operands=1,
    ),
    "stdbuf": _Launcher(_grammar("-i --input =", "-o --output =", "-e --error =", *_GNU_STANDARD, **_GETOPT)),
    "chroot": _Launcher(_grammar("--groups =", "--userspec =", "--skip-chdir", *_GNU_STANDARD, **_GETOPT), operands=1),
    "setsid": _Launcher(
        _grammar("-c --ctty", "-f --fork", "-w --wait", "-h --help stop", "-V --version stop", **_GETOPT)
    ),
    "taskset": _Launcher(
        _grammar("-a --all-tasks", "-c --cpu-list", "-p --pid stop", "-h --help stop", "-V --version stop", **_GETOPT),
        operands=1,
    ),
    "chrt": _Launcher(
        _grammar(
            "-a --all-tasks",
            "-b --batch",
            "-d --deadline",
            "-e --ext",
            "-f --fifo",
            "-i --idle",
            "-o --other",
            "-r --rr",
            "-R --reset-on-fork",
            "-G --reclaim-grub",
            "-O --deadline-overrun",
            "-v --verbose",
            "-T --sched-runtime =",
            "-P --sched-period =",
            "-D --sched-deadline =",
            "-U --clamp-min =",
            "-X --clamp-max =",
            "-p --pid stop",
            "-m --max stop",
            "-h --help stop",
            "-V --version stop",
            **_GETOPT,
        ),
        operands=1,
        digits=True,
    ),
    "ionice": _Launcher(
        _grammar(
            "-c --class =",
            "-n --classdata =",
            "-t --ignore",
            "-p --pid = stop",
            "-P --pgid = stop",
            "-u --uid = stop",
            "-h --help stop",
            "-V --version stop",
            **_GETOPT,
        )
    ),
    "numactl": _Launcher(
        _grammar(
            "-a --all",
            "-i --interleave =",
            "-w --weighted-interleave =",
            "-p --preferred =",
            "-P --preferred-many =",
            "-c --cpubind =",
            "-N --cpunodebind =",
            "-C --physcpubind =",
            "-m --membind =",
            "-l --localalloc",
            "-b --balancing",
            "-t --strict",
            "-u --huge",
            "-T --touch",
            "--cpu-compress",
            "-o --offset =",
            "-L --length =",
            "-M --shmmode =",
            # A shared memory segment or file, not a process: no command runs.
            "-S --shm = stop",
            "-f --file = stop",
            "-I --shmid = stop",
            "-s --show stop",
            "-H --hardware stop",
            "-d --dump stop",
            "-D --dump-nodes stop",
            "-V --verify stop",
            "--version stop",
            **_GETOPT,
        )
    ),
    # tini uses getopt() without "+": glibc permutes, so `tini vllm serve --port 1` reads --port as tini's
    # own (an error); its usage is `tini [OPTIONS] PROGRAM -- [ARGS]`.
    "tini": _Launcher(_grammar("-p =", "-e =", "-v", "-w", "-g", "-s", "-h stop", "-l stop", permute=True)),
    "dumb-init": _Launcher(
        _grammar(
            "-c --single-child", "-r --rewrite =", "-v --verbose", "-h --help stop", "-V --version stop", **_GETOPT
        )
    ),
    "catatonit": _Launcher(_grammar("-g", "-h stop", "-L stop", "-P stop", "-V --version stop", permute=True)),
    "gosu": _Launcher(_grammar("-h --help stop", "-? stop", "-v --version stop"), operands=1),
    "su-exec": _Launcher(_grammar(), operands=1),
    "setpriv": _Launcher(
        _grammar(
            "--nnp --no-new-privs",
            "--clear-groups",
            "--keep-groups",
            "--init-groups",
            "--reset-env",
            "--inh-caps =",
            "--ambient-caps =",
            "--ruid =",
            "--euid =",
            "--rgid =",
            "--egid =",
            "--reuid =",
            "--regid =",
            "--groups =",
            "--bounding-set =",
            "--securebits =",
            "--pdeathsig =",
            "--ptracer =",
            "--selinux-label =",
            "--apparmor-profile =",
            "--landlock-access =",
            "--landlock-rule =",
            "--seccomp-filter =",
            "-d --dump stop",
            "--list-caps stop",
            "--landlock-support stop",
            "--list-landlock-access stop",
            "--list-landlock-rights = stop",
            "-h --help stop",
            "-V --version stop",
            **_GETOPT,
        )
    ),
    # runuser runs a command directly only with -u USER (`runuser -u vllm -- vllm serve ...`); without -u it
    # is su (a login shell, `-c 'cmd'`), and -c/-l/-s/-f are refused with -u. getopt without "+".
    "runuser": _Launcher(
        _grammar(
            "-u --user = user",
            "-g --group =",
            "-G --supp-group =",
            "-m -p --preserve-environment",
            "-w --whitelist-environment =",
            "-P --pty",
            "-T --no-pty",
            "-c --command = unread",
            "-C --session-command = unread",
            "-s --shell = unread",
            "-l --login unread",
            "-f --fast unread",
            "-h --help stop",
            "-V --version stop",
            permute=True,
            **_GETOPT,
        ),
        needs="user",
    ),
    # sudo: NAME=VALUE may sit between the options; `-h` alone is help, or takes the next word as a host.
    "sudo": _Launcher(
        _grammar(
            "-A --askpass",
            "-a --auth-type =",
            "-B --bell",
            "-b --background",
            "-C --close-from =",
            "-c --login-class =",
            "-D --chdir =",
            "-E",
            "--preserve-env ?",  # (the short -E takes no value: `sudo -Eu vllm`)
            "-g --group =",
            "-H --set-home",
            "--host =",
            "-h ? unread",
            "--help stop",
            "-i --login",
            "-k --reset-timestamp",
            "-N --no-update",
            "-n --non-interactive",
            "-P --preserve-groups",
            "-p --prompt =",
            "-R --chroot =",
            "-r --role =",
            "-S --stdin",
            "-s --shell",
            "-T --command-timeout =",
            "-t --type =",
            "-U --other-user =",
            "-u --user =",
            "-e --edit stop",
            "-K --remove-timestamp stop",
            "-l --list stop",
            "-V --version stop",
            "-v --validate stop",
            assignments=True,
            **_GETOPT,
        )
    ),
}

# Environment managers: `TOOL [global options] run [options] COMMAND`.
# uv 0.9 (crates/uv-cli/src/lib.rs: TopLevelArgs, GlobalArgs, CacheArgs, RunArgs, ToolRunArgs; clap: no
# abbreviations, a value never starts with "-").
_CLAP = {"dash_values": False}
_UV_GLOBAL = (
    "-q --quiet",
    "-v --verbose",
    "--no-color",
    "--color =",
    "--native-tls",
    "--no-native-tls",
    "--system-certs",
    "--no-system-certs",
    "--offline",
    "--no-offline",
    "--allow-insecure-host --trusted-host =",
    "--preview",
    "--no-preview",
    "--preview-features --preview-feature =",
    "--isolated",
    "--show-settings",
    "--no-progress",
    "--no-installer-metadata",
    "--directory =",
    "--project =",
    "--python-preference =",
    "--python-fetch =",
    "--managed-python",
    "--no-managed-python",
    "--allow-python-downloads",
    "--no-python-downloads",
    "-n --no-cache --no-cache-dir",
    "--cache-dir =",
    "--config-file =",
    "--no-config",
    "-h --help stop",
)
_UV_INSTALL = (  # resolver, installer, index, build and refresh options (RunArgs and ToolRunArgs)
    "--with -w =",
    "--with-editable =",
    "--with-requirements =",
    "--env-file =",
    "--no-env-file",
    "--index =",
    "--default-index =",
    "--index-url -i =",
    "--extra-index-url =",
    "--find-links -f =",
    "--no-index",
    "--upgrade -U",
    "--no-upgrade",
    "--upgrade-package -P =",
    "--upgrade-group =",
    "--reinstall --force-reinstall",
    "--no-reinstall",
    "--reinstall-package =",
    "--index-strategy =",
    "--keyring-provider =",
    "--resolution =",
    "--prerelease =",
    "--prerelease-package =",
    "--pre",
    "--fork-strategy =",
    "--config-setting --config-settings -C =",
    "--config-settings-package --config-setting-package =",
    "--no-build-isolation",
    "--build-isolation",
    "--no-build-isolation-package =",
    "--exclude-newer =",
    "--exclude-newer-package =",
    "--link-mode =",
    "--compile-bytecode --compile",
    "--no-compile-bytecode --no-compile",
    "--no-sources",
    "--no-sources-package =",
    "--no-build",
    "--build",
    "--no-build-package =",
    "--no-binary",
    "--binary",
    "--no-binary-package =",
    "--refresh",
    "--no-refresh",
    "--refresh-package =",
    "--python -p =",
    "--python-platform =",
    "--show-resolution",
)
_UV_PRE = _grammar(*_UV_GLOBAL, "-V --version stop", **_CLAP)
_UV_RUN = _grammar(
    *_UV_GLOBAL,
    *_UV_INSTALL,
    "--extra =",
    "--all-extras",
    "--no-extra =",
    "--no-all-extras",
    "--dev",
    "--no-dev",
    "--only-dev",
    "--group =",
    "--no-group =",
    "--no-default-groups",
    "--only-group =",
    "--all-groups",
    "-m --module module",
    "--editable",
    "--no-editable",
    "--no-editable-package =",
    "--exact",
    "--inexact --no-exact",
    "--active",
    "--no-active",
    "--no-sync",
    "--locked",
    "--frozen",
    "-s --script",
    "--gui-script",
    "--all-packages",
    "--package =",
    "--no-project --no_workspace",
    "--max-recursion-depth =",
    **_CLAP,
)
_UV_TOOL_RUN = _grammar(
    *_UV_GLOBAL,
    *_UV_INSTALL,
    "--from = from",
    "--constraints --constraint -c =",
    "--build-constraints --build-constraint -b =",
    "--overrides --override =",
    "--torch-backend =",
    "--lfs",
    "--generate-shell-completion = stop",
    "-V --version stop",
    **_CLAP,
)
# conda 25.x (conda/cli/main_run.py, helpers.add_parser_prefix/add_parser_verbose; argparse, whose
# REMAINDER takes the command) and micromamba 2.x (micromamba/src/run.cpp, common_options.cpp; CLI11).
# mamba 1.x hands `run` to conda, mamba 2.x is micromamba's CLI: mamba reads either's options (no option
# takes a value in one and not in the other).
_CONDA_OPTIONS = (
    "-n --name =",
    "-p --prefix =",
    "--cwd =",
    "-v --verbose",
    "--debug",
    "--trace",
    "--dev",
    "--debug-wrapper-scripts",
    "-s --no-capture-output --live-stream",
    "-h --help stop",
)
_MICROMAMBA_OPTIONS = (
    "-r --root-prefix =",
    "-p --prefix =",
    "--relocate-prefix =",
    "-n --name =",
    "-a --attach =",
    "--cwd =",
    "-d --detach",
    "--clean-env",
    "-e --env =",
    "--label =",
    "-h --help stop",
)
# pixi 0.5x (crates/pixi_cli/src/run.rs Args with its flattened config; clap). `pixi run NAME` runs the
# workspace's task NAME when one is defined, else the command NAME (`-x` forces the command).
_PIXI_GLOBAL = ("-v --verbose", "-q --quiet", "--color =", "--no-progress", "-h --help stop", "-V --version stop")
_PIXI_RUN = _grammar(
    *_PIXI_GLOBAL,
    "--manifest-path -m =",
    "--workspace -w =",
    "--script -s = unread",
    "--experimental",
    "--no-config",
    "--config-file =",
    "-x --executable",
    "--no-install",
    "--no-lockfile-update",
    "--no-lock-file-update",
    "--frozen",
    "--locked",
    "--as-is",
    "--revalidate",
    "--auth-file =",
    "--concurrent-downloads =",
    "--concurrent-solves =",
    "--pinning-strategy =",
    "--pypi-keyring-provider =",
    "--run-post-link-scripts",
    "--no-symbolic-links",
    "--no-hard-links",
    "--no-ref-links",
    "--tls-no-verify",
    "--offline ?",
    "--tls-root-certs =",
    "--use-environment-activation-cache",
    "--force-activate",
    "--no-completions",
    "-e --environment =",
    "-p --platform =",
    "--clean-env",
    "--skip-deps",
    "--templated",
    "-n --dry-run",
    **_CLAP,
)
# poetry 2.x (src/poetry/console/application.py): its global options go before or after `run`;
# `poetry run` puts `--` after them itself, unless the line has a `--` already (then cleo reads options
# anywhere on the line: only `run [options] -- COMMAND` is read).
_POETRY = _grammar(
    "-q --quiet",
    "-v -vv -vvv --verbose",
    "--ansi",
    "--no-ansi",
    "-n --no-interaction",
    "--no-plugins",
    "--no-cache",
    "-P --project =",
    "-C --directory =",
    "-h --help stop",
    "-V --version stop",
    **_CLAP,
)
# pipenv 2024.x (pipenv/cli/options.py common_options; click, interspersed arguments off). A [scripts]
# entry of the Pipfile named like the command runs instead.
_PIPENV_RUN = _grammar(
    "--pypi-mirror =",
    "--python =",
    "-v --verbose",
    "-q --quiet",
    "--clear",
    "--three",
    "--two",
    "-h --help stop",
    **_CLAP,
)
# pipx 1.8 (src/pipx/main.py _add_run and the shared/python/pip/backend options; argparse, REMAINDER):
# `pipx run APP ...` installs the package APP and runs its app of the same name.
_PIPX_RUN = _grammar(
    "-q --quiet",
    "-v --verbose",
    "--skip-maintenance",
    "--global",
    "--no-cache",
    "--refresh",
    "--no-path-check",
    "--path",
    "--pypackages",
    "--system-site-packages",
    "-e --editable",
    "--fetch-missing-python",
    "--python-args =",
    "--with =",
    "--spec =",
    "--python =",
    "--fetch-python =",
    "-i --index-url =",
    "--pip-args =",
    "--cooldown =",
    "--backend =",
    "-h --help stop",
    abbreviations=True,
    dash_values=False,
)


@dataclass(frozen=True, slots=True)
class _Runner:
    pre: _Grammar | None  # options before `run` (None: none are read)
    run: _Grammar
    dashdash_later: bool = True  # a `--` after the command is left to the command (False: poetry)
    dashdash: bool = True  # `--` ends the options (False: pipx, whose argparse REMAINDER keeps it as the app)


_RUNNERS: dict[str, _Runner] = {
    "conda": _Runner(None, _grammar(*_CONDA_OPTIONS, abbreviations=True, dash_values=False)),
    "micromamba": _Runner(None, _grammar(*_MICROMAMBA_OPTIONS, dash_values=False)),
    "mamba": _Runner(None, _grammar(*_CONDA_OPTIONS, *_MICROMAMBA_OPTIONS, dash_values=False)),
    "pixi": _Runner(_grammar(*_PIXI_GLOBAL, **_CLAP), _PIXI_RUN),
    "poetry": _Runner(_POETRY, _POETRY, dashdash_later=False),
    "pipenv": _Runner(None, _PIPENV_RUN),
    "pipx": _Runner(None, _PIPX_RUN, dashdash=False),
}


@dataclass(frozen=True, slots=True)
class Unwrapped:
    """The command a chain of launchers runs: its words as it receives them, and where they came from."""

    words: tuple[str, ...]  # words[0] names the program (uvx's `vllm@0.19.0` is `vllm`; `uv run -m M`: python -m M)
    origins: tuple[int | None, ...]  # the argv index of each word, None for words made from an `env -S` string
    argv_length: int = 0

    def argv_index(self, at: int) -> int | None:
        """The argv index of ``words[at]`` when ``words[at:]`` are argv's own last words, unchanged
        (so an edit of them maps onto argv); None when some of them come from a split string."""
        expected = self.argv_length
        for position in range(len(self.words) - 1, at - 1, -1):
            if self.origins[position] != expected - 1:
                return None
            expected -= 1
        return expected


def program(word: str) -> str:
    """The program a command word names (its base name)."""
    return word.rsplit("/", 1)[-1]


def unwrap(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Unwrapped | None:
    """The command that ``argv`` finally runs, past its launchers; None when a launcher runs no command
    (``command -v x``, ``taskset -p``, ``uv sync``) or its form is not read (an option its table does not
    list, ``sudo -h``, ``chrt`` without a numeric priority, more than :data:`MAX_SPLITS` ``env -S``).
    ``env`` gives ``${NAME}`` in ``env -S`` strings their values (a name without one: unreadable)."""
    line = _Line(list(argv), list(range(len(argv))))
    i = 0
    while i < len(line.words):
        name = program(line.words[i])
        if name in ("uv", "uvx"):
            step = _uv(line, i)
        elif name in _RUNNERS:
            step = _runner(line, i, _RUNNERS[name])
        elif name in _LAUNCHERS:
            step = _launcher(line, i, name, _LAUNCHERS[name], env)
        else:
            break
        if step is None:
            return None
        i = step
    if i >= len(line.words):
        return None
    return Unwrapped(words=tuple(line.words[i:]), origins=tuple(line.origins[i:]), argv_length=len(argv))


class _Line:
    """The words being read, each with its argv index, and where the last option-like words are (so that
    a long chain of launchers asks "is there a `-x` / `--` after here?" in constant time)."""

    def __init__(self, words: list[str], origins: list[int | None]) -> None:
        self.words = words
        self.origins = origins
        self.splits = 0  # `env -S` strings split so far (at most MAX_SPLITS)
        self._index()

    def _index(self) -> None:
        self.last_dash = max((k for k, w in enumerate(self.words) if w.startswith("-")), default=-1)
        self.last_dashdash = max((k for k, w in enumerate(self.words) if w == "--"), default=-1)

    def replace(self, start: int, end: int, pieces: list[str]) -> None:
        self.words[start:end] = pieces
        self.origins[start:end] = [None] * len(pieces)
        self._index()

    def insert(self, at: int, pieces: list[str]) -> None:
        self.replace(at, at, pieces)


def _launcher(line: _Line, i: int, name: str, launcher: _Launcher, env: Mapping[str, str] | None) -> int | None:
    """The index of the command ``words[i]`` (a launcher) runs; None when it runs none or is not read."""
    words = line.words
    at = i + 1
    while True:
        scanned = _scan(words, at, launcher.grammar)
        if scanned is None or scanned.split is None:
            break
        start, end, text = scanned.split
        pieces = split_string(text, env) if line.splits < MAX_SPLITS else None
        if pieces is None:
            return None
        line.splits += 1
        line.replace(start, end, pieces)
        at = start
    if scanned is None or (launcher.needs and launcher.needs not in scanned.roles):
        return None
    at = scanned.index
    if launcher.assignments:
        if name == "env" and words[at : at + 1] == ["-"]:
            at += 1  # `env -` is `env -i`
        while at < len(words) and "=" in words[at]:
            at += 1
    if launcher.digits and not (at < len(words) and words[at].isdigit() and words[at].isascii()):
        return None
    at += launcher.operands
    if launcher.grammar.permute and not scanned.dashdash and line.last_dash > at:
        return None  # GNU getopt would take them for the launcher's own options
    return at


def _runner(line: _Line, i: int, runner: _Runner) -> int | None:
    """``TOOL [options] run [options] COMMAND``: the index of COMMAND."""
    at = _subcommand(line.words, i + 1, runner.pre, "run")
    scanned = _scan(line.words, at, runner.run) if at is not None else None
    if scanned is None or scanned.index >= len(line.words) or (scanned.dashdash and not runner.dashdash):
        return None
    if not runner.dashdash_later and not scanned.dashdash and line.last_dashdash >= scanned.index:
        return None
    return scanned.index


def _uv(line: _Line, i: int) -> int | None:
    """``uv run [options] COMMAND``, ``uv run -m MODULE`` (python -m MODULE), ``uv tool run`` / ``uvx``
    ``[options] TARGET``: the index of the command."""
    words = line.words
    if program(words[i]) == "uvx":
        return _tool_run(words, i + 1)
    at = _subcommand(words, i + 1, _UV_PRE, "tool")
    if at is not None:
        at = _subcommand(words, at, _UV_PRE, "run")
        return _tool_run(words, at) if at is not None else None
    at = _subcommand(words, i + 1, _UV_PRE, "run")
    scanned = _scan(words, at, _UV_RUN) if at is not None else None
    if scanned is None or scanned.index >= len(words):
        return None
    if scanned.module:
        line.insert(scanned.index, ["python", "-m"])
    return scanned.index


def _subcommand(words: Sequence[str], i: int, pre: _Grammar | None, name: str) -> int | None:
    """The index after ``name`` (``run``), past the tool's own options before it; None otherwise."""
    if pre is not None:
        scanned = _scan(words, i, pre)
        if scanned is None or scanned.dashdash:
            return None
        i = scanned.index
    return i + 1 if words[i : i + 1] == [name] else None


_PACKAGE_NAME = re2.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_EXTRAS = re2.compile(r"^[A-Za-z0-9._,\s-]*$")
_VERSION = re2.compile(r"^[vV]?\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[A-Za-z0-9.]+)?$")


def _tool_run(words: list[str], i: int) -> int | None:
    """``uvx [options] TARGET``: the index of the command, whose word becomes the executable uv runs
    (uv's ``Target::parse``: ``NAME[extras]@VERSION`` or ``NAME@latest`` runs NAME; anything else is
    the executable's name as written; with ``--from`` the word is the executable)."""
    scanned = _scan(words, i, _UV_TOOL_RUN)
    if scanned is None or scanned.index >= len(words):
        return None
    at = scanned.index
    if "from" not in scanned.roles:
        words[at] = _tool_target(words[at])
    return at


def _tool_target(word: str) -> str:
    name, at, version = word.partition("@")
    if not at or not version:
        return word
    executable, bracket, extras = name.partition("[")
    if bracket and (not extras.endswith("]") or not _EXTRAS.match(extras[:-1])):
        return word
    if not _PACKAGE_NAME.match(executable):
        return word
    if version != "latest" and not _VERSION.match(version):
        return word
    return executable


@dataclass(frozen=True, slots=True)
class _Scanned:
    index: int  # the first word after the options (or the split option's index)
    roles: frozenset[str] = frozenset()  # roles of the options seen ("module", "from", "user")
    dashdash: bool = False  # the options ended with `--`
    split: tuple[int, int, str] | None = None  # env -S: (first word, word after, the string)
    module: bool = False


def _scan(words: Sequence[str], i: int, grammar: _Grammar) -> _Scanned | None:
    """Read the options that start at ``words[i]``; None for one the grammar does not list, one that runs
    no command or is not read, or a value that is missing."""
    roles: set[str] = set()
    while i < len(words):
        word = words[i]
        if word == "--":
            return _Scanned(i + 1, frozenset(roles), dashdash=True, module="module" in roles)
        if grammar.assignments and not word.startswith(("-", "/")) and "=" in word:
            i += 1  # sudo: an environment variable for the command
            continue
        if not word.startswith("-") or word == "-":
            break
        if grammar.numeric and word[1 + (word[1:2] in ("-", "+")) :][:1].isdigit():
            i += 1  # nice -10, nice --5
            continue
        read = _long(words, i, grammar) if word.startswith("--") else _short(words, i, grammar)
        if read is None:
            return None
        end, options, value = read
        for option in options:
            if option.role in ("stop", "unread"):
                return None
            if option.role == "split":
                assert value is not None
                return _Scanned(i, frozenset(roles), split=(i, end, value))
            if option.role:
                roles.add(option.role)
        i = end
    return _Scanned(i, frozenset(roles), module="module" in roles)


_Read = tuple[int, list[_Option], "str | None"]


def _long(words: Sequence[str], i: int, grammar: _Grammar) -> _Read | None:
    """``--name``, ``--name=value``, ``--name value``, or an unambiguous prefix of the name."""
    name, eq, value = words[i][2:].partition("=")
    option = grammar.long.get(name)
    if option is None and grammar.abbreviations and name:
        # Names of one option share one _Option; two options are ambiguous even with the same arity
        # (getopt_long compares the option's value too; argparse its action).
        matches = {id(grammar.long[n]): grammar.long[n] for n in grammar.long if n.startswith(name)}
        option = next(iter(matches.values())) if len(matches) == 1 else None
    if option is None or (option.arity == _NONE and eq):
        return None
    if eq or option.arity != _VALUE:
        return i + 1, [option], value if eq else None
    return _separate(words, i, grammar, option)


def _short(words: Sequence[str], i: int, grammar: _Grammar) -> _Read | None:
    """``-x``, a cluster of flags ``-xyz``, and a value attached (``-n5``) or in the next word."""
    word = words[i]
    whole = grammar.short.get(word[1:]) if len(word) > 2 else None
    if whole is not None and whole.arity == _NONE:
        return i + 1, [whole], None  # cleo's -vv, -vvv
    options: list[_Option] = []
    for j in range(1, len(word)):
        option = grammar.short.get(word[j])
        if option is None:
            return None
        options.append(option)
        if option.arity == _NONE:
            continue
        attached = word[j + 1 :]
        if not grammar.dash_values and attached.startswith("="):
            attached = attached[1:]  # clap, argparse: -p=3.12
        if attached or option.arity == _OPTIONAL:
            return i + 1, options, attached or None
        read = _separate(words, i, grammar, option)
        return None if read is None else (read[0], options, read[2])
    return i + 1, options, None


def _separate(words: Sequence[str], i: int, grammar: _Grammar, option: _Option) -> _Read | None:
    """An option's value in the next word."""
    if i + 1 >= len(words):
        return None
    value = words[i + 1]
    if not grammar.dash_values and value.startswith("-") and value != "-":
        return None
    return i + 2, [option], value


_SPACE = " \t\n\v\f\r"
_ESCAPES = {"f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _variable_end(text: str, i: int) -> int | None:
    """The index of the ``}`` of ``${NAME}`` at ``text[i]`` (coreutils ``scan_varname``), else None."""
    if text[i + 1 : i + 2] != "{" or not (text[i + 2 : i + 3].isalpha() or text[i + 2 : i + 3] == "_"):
        return None
    end = i + 3
    while end < len(text) and (text[end].isalnum() or text[end] == "_") and text[end].isascii():
        end += 1
    return end if text[end : end + 1] == "}" else None


def split_string(text: str, env: Mapping[str, str] | None = None) -> list[str] | None:
    """GNU env's ``-S`` string as words (coreutils env.c ``build_argv``): whitespace separates words
    outside quotes; ``'...'`` and ``"..."`` quote (a quote starts a word, even an empty one); backslash
    escapes ``\\" \\# \\$ \\' \\\\``, ``\\_`` (a separator outside double quotes, a space inside),
    ``\\f \\n \\r \\t \\v``, ``\\c`` (ends the string); ``#`` at the start of a word ends the string;
    ``${NAME}`` outside single quotes is NAME's value. None where env would stop with an error (an
    unknown escape, ``$NAME`` without braces, an unterminated quote) and for a ``${NAME}`` that ``env``
    does not give. Linear in the length of ``text``."""
    words: list[str] = []
    current: list[str] = []
    started = False  # a word has begun (possibly empty: "")
    single = double = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "'" and not double:
            single = not single
            started = True
            i += 1
            continue
        if ch == '"' and not single:
            double = not double
            started = True
            i += 1
            continue
        if ch in _SPACE and not (single or double):
            if started:
                words.append("".join(current))
                current, started = [], False
            i += 1
            continue
        if ch == "#" and not started and not (single or double):
            break
        if ch == "\\" and not (single and text[i + 1 : i + 2] not in ("\\", "'")):
            nxt = text[i + 1 : i + 2]
            if nxt in ('"', "#", "$", "'", "\\"):
                ch = nxt
            elif nxt == "_":
                if not double:
                    if started:
                        words.append("".join(current))
                        current, started = [], False
                    i += 2
                    continue
                ch = " "
            elif nxt == "c" and not double:
                break
            elif nxt in _ESCAPES:
                ch = _ESCAPES[nxt]
            else:
                return None  # "invalid sequence", "invalid backslash at end of string", \c inside "..."
            current.append(ch)
            started = True
            i += 2
            continue
        if ch == "$" and not single:
            end = _variable_end(text, i)
            if end is None:
                return None  # "only ${VARNAME} expansion is supported"
            value = (env or {}).get(text[i + 2 : end])
            if value is None:
                return None  # not known here (GNU env expands an unset name to nothing)
            if value:
                current.append(value)
                started = True
            i = end + 1
            continue
        current.append(ch)
        started = True
        i += 1
    else:
        if single or double:
            return None  # "no terminating quote in -S string"
    if started:
        words.append("".join(current))
    return words
