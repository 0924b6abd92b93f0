"""The ``planner`` command. Each command group lives in its own module and registers on ``app``.

Command modules are imported on first use (``_app._LazyCommands``): ``planner recommend`` never pays
for the webhook's decision code, the simulator or the probe.
"""

from __future__ import annotations

from planner.cli._app import app, load_all_commands


def main() -> None:
    """Console-script entry point."""
    app()


__all__ = ["app", "load_all_commands", "main"]
