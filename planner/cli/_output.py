"""Output formats shared by every command (``--output table|json|yaml|args``)."""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import TYPE_CHECKING, Any, cast

import typer
from pydantic import BaseModel

if TYPE_CHECKING:
    from rich.console import Console


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


def _width() -> int | None:
    """Wide enough for model ids when output is piped (rich would assume 80 columns)."""
    return None if sys.stdout.isatty() else 160


class _LazyConsole:
    """A rich ``Console`` built on first use. ``-o json`` / ``-o yaml`` and a quiet run never print through
    one, so they never import rich (~30 ms of a cold ``planner recommend``). Every attribute is the real
    console's, so it goes wherever a ``Console`` goes (rich's ``Progress`` only calls its methods)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


console = cast("Console", _LazyConsole(highlight=False, soft_wrap=False, width=_width()))
# Messages on stderr are never hard-wrapped: a script greps them and a terminal wraps them anyway.
err_console = cast("Console", _LazyConsole(stderr=True, highlight=False, soft_wrap=True))


def to_jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    return value


def print_json(value: Any) -> None:
    typer.echo(json.dumps(to_jsonable(value), indent=2, sort_keys=False))


def print_yaml(value: Any) -> None:
    import yaml  # only for -o yaml: the import costs every other run ~20 ms

    typer.echo(yaml.safe_dump(to_jsonable(value), sort_keys=False).rstrip())
