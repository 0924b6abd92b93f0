"""The typer application every command module registers on, and the error boundary.

Every command runs inside :class:`_ErrorBoundary`: kv-planner's own errors become one clear message on
stderr and an exit code (2 for bad input, 1 for "does not fit"), anything unexpected becomes a short
"internal error" line instead of a traceback (set ``KV_PLANNER_DEBUG=1`` to see the traceback).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from planner.cli._commands import COMMANDS
from planner.errors import CapacityError, KvPlannerError, ModelResolutionError, PlannerInputError

EXIT_OK = 0
EXIT_FAILED = 1  # the thing checked does not fit / would be denied
EXIT_USAGE = 2  # bad input, unknown names, unreadable files
EXIT_UNAVAILABLE = 3  # a model could not be resolved (network, gated, missing)
EXIT_INTERNAL = 70  # kv-planner's own bug (EX_SOFTWARE)
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a tool whose reader closed the pipe


def exit_code_for(error: BaseException) -> int:
    if isinstance(error, PlannerInputError):
        return EXIT_USAGE
    if isinstance(error, CapacityError):
        return EXIT_FAILED
    if isinstance(error, ModelResolutionError):
        return EXIT_UNAVAILABLE
    return EXIT_INTERNAL


def _is_cli_control(error: BaseException) -> bool:
    """typer's own exits, aborts and usage errors (typer vendors click, so match by class name)."""
    if isinstance(error, (typer.Exit, typer.Abort)):
        return True
    return any(cls.__name__ == "ClickException" for cls in type(error).__mro__)


class _ErrorBoundary(TyperGroup):
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KvPlannerError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(exit_code_for(error)) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None
        except BrokenPipeError:
            # The reader went away (`planner recommend | head`): stop quietly like other Unix tools, and
            # point stdout at /dev/null so the interpreter's final flush does not raise again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        except Exception as error:  # the boundary: never a traceback for the user
            if _is_cli_control(error) or os.environ.get("KV_PLANNER_DEBUG"):
                raise
            typer.echo(
                f"internal error: {type(error).__name__}: {error}\n"
                "This is a kv-planner bug; rerun with KV_PLANNER_DEBUG=1 for the traceback and report it.",
                err=True,
            )
            raise typer.Exit(EXIT_INTERNAL) from None


class _LazyCommands(_ErrorBoundary):
    """Imports a command's module the first time that command is looked up (see ``_commands.py``).

    Listing commands for ``planner --help`` uses the table's help text, so the top-level help imports
    none of them; running or asking help for one command imports just that command's module.
    """

    _listing = False  # True while the top-level help is being formatted

    def list_commands(self, ctx: Any) -> list[str]:
        return [*COMMANDS, *(name for name in self.commands if name not in COMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if self._listing and cmd_name in COMMANDS:
            entry = COMMANDS[cmd_name]
            return typer.core.TyperCommand(cmd_name, help=entry.help, short_help=entry.summary)
        command = self.commands.get(cmd_name)
        if command is not None or cmd_name not in COMMANDS:
            return command
        importlib.import_module(f"planner.cli.{COMMANDS[cmd_name].module}")
        # The module registered its command on `app`; build the click command the way typer does.
        command = typer.main.get_group(app).commands.get(cmd_name)
        if command is not None:
            self.commands[cmd_name] = command
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        # A mistyped command gets typer's "did you mean": it suggests from the loaded commands.
        if args and args[0] not in COMMANDS:
            load_all_commands()
            for name in COMMANDS:
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)


def load_all_commands() -> None:
    """Import every command module (tests and tools that want the whole app registered)."""
    for entry in COMMANDS.values():
        importlib.import_module(f"planner.cli.{entry.module}")


app = typer.Typer(
    name="planner",
    cls=_LazyCommands,
    help="Size, guard and watch the KV cache of vLLM deployments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    # Plain help: it wraps long flag names instead of cutting them at the terminal width (rich's panels do).
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    # A root callback makes typer build a command group even before any command module is imported.
    pass
