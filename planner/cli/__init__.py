"""The ``planner`` command. Each command group lives in its own module and registers on ``app``."""

from __future__ import annotations

import importlib

from planner.cli._app import app

# One module per command group; importing a module registers its commands on `app`.
_COMMAND_MODULES = (
    "recommend",
    "estimate",
    "catalog",
    "validate",
    "calibrate",
    "check",
    "simulate",
    "probe",
)
for _name in _COMMAND_MODULES:
    importlib.import_module(f"planner.cli.{_name}")


def main() -> None:
    """Console-script entry point."""
    app()


__all__ = ["app", "main"]
