"""Output formats shared by every command (``--output table|json|yaml|args``)."""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Any

import typer
import yaml
from pydantic import BaseModel
from rich.console import Console


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


def _width() -> int | None:
    """Wide enough for model ids when output is piped (rich would assume 80 columns)."""
    return None if sys.stdout.isatty() else 160


console = Console(highlight=False, soft_wrap=False, width=_width())
# Messages on stderr are never hard-wrapped: a script greps them and a terminal wraps them anyway.
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


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
    typer.echo(yaml.safe_dump(to_jsonable(value), sort_keys=False).rstrip())
