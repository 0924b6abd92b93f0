"""The typer application every command module registers on, and the error boundary.

Every command runs inside :class:`_ErrorBoundary`: kv-planner's own errors become one clear message on
stderr and an exit code (2 for bad input, 1 for "does not fit"), anything unexpected becomes a short
"internal error" line instead of a traceback (set ``KV_PLANNER_DEBUG=1`` to see the traceback).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from planner.errors import CapacityError, KvPlannerError, ModelResolutionError, PlannerInputError

EXIT_OK = 0
EXIT_FAILED = 1  # the thing checked does not fit / would be denied
EXIT_USAGE = 2  # bad input, unknown names, unreadable files
EXIT_UNAVAILABLE = 3  # a model could not be resolved (network, gated, missing)
EXIT_INTERNAL = 70  # kv-planner's own bug (EX_SOFTWARE)


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
        except Exception as error:  # the boundary: never a traceback for the user
            if _is_cli_control(error) or os.environ.get("KV_PLANNER_DEBUG"):
                raise
            typer.echo(
                f"internal error: {type(error).__name__}: {error}\n"
                "This is a kv-planner bug; rerun with KV_PLANNER_DEBUG=1 for the traceback and report it.",
                err=True,
            )
            raise typer.Exit(EXIT_INTERNAL) from None


app = typer.Typer(
    name="planner",
    cls=_ErrorBoundary,
    help="Size, guard and watch the KV cache of vLLM deployments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()
