"""The ``planner`` command. Each command group lives in its own module and registers on ``app``.

Command modules are imported on first use (``_app._LazyCommands``): ``planner recommend`` never pays
for the webhook's decision code, the simulator or the probe.
"""

from __future__ import annotations

import os

from planner.cli._app import app, load_all_commands
from planner.native_threads import use_one_native_thread


def main() -> None:
    """Console-script entry point."""
    # pydantic looks for plugins (observability hooks) by scanning every installed distribution's entry
    # points when the first model class is built: ~10 ms of a cold `planner recommend`, for hooks a
    # command-line run has no use for. Set PYDANTIC_DISABLE_PLUGINS yourself to choose otherwise.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    use_one_native_thread()  # numpy is imported by commands, later (planner/native_threads.py says why)
    app()


__all__ = ["app", "load_all_commands", "main"]
