"""Progress display while a model is fetched from the Hub (CLI only, only on a terminal).

The resolver reports through :class:`ResolveProgress`; the CLI passes the object yielded by
:func:`hub_progress`::

    with hub_progress(err_console) as progress:
        resolved = resolve_model(name, revision=revision, token=token, refresh=refresh, progress=progress)

On a terminal this draws a transient rich progress bar on the given console (stderr), so ``--output json``
on stdout stays clean; elsewhere (pipes, CI logs, the webhook) it draws nothing. Calls may come from
worker threads (shard headers are read in parallel); rich's ``Progress`` is thread-safe. The bar is built
at the first report: a model found locally or in the catalog reports nothing, and its run never imports
rich (a cold ``planner recommend`` spends ~30 ms on it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID


class ResolveProgress(Protocol):
    """What the resolver reports while it works."""

    def step(self, description: str) -> None:
        """A new phase started (e.g. "Fetching config.json of org/name")."""

    def files(self, description: str, total: int) -> None:
        """A phase over ``total`` files started (safetensors headers)."""

    def advance(self) -> None:
        """One file of the current phase is done."""


class NullProgress:
    """Reports nothing (not a terminal, or the webhook)."""

    def step(self, description: str) -> None:
        return None

    def files(self, description: str, total: int) -> None:
        return None

    def advance(self) -> None:
        return None


class RichProgress:
    """Draws the phases on a rich :class:`~rich.progress.Progress`."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID | None = None
        self._total = 1

    def _finish_current(self) -> None:
        if self._task is not None:
            self._progress.update(self._task, total=self._total, completed=self._total)
            self._progress.stop_task(self._task)

    def step(self, description: str) -> None:
        self._finish_current()
        self._total = 1
        self._task = self._progress.add_task(description, total=None)

    def files(self, description: str, total: int) -> None:
        self._finish_current()
        self._total = total
        self._task = self._progress.add_task(description, total=total)

    def advance(self) -> None:
        if self._task is not None:
            self._progress.advance(self._task)


class _FirstReport:
    """Decides and builds the display at the first report (see the module docstring); ``close`` stops it."""

    def __init__(self, console: Console | None, enabled: bool | None) -> None:
        self._console = console
        self._enabled = enabled
        self._lock = threading.Lock()
        self._bar: Progress | None = None
        self._target: ResolveProgress | None = None

    def _display(self) -> ResolveProgress:
        with self._lock:
            if self._target is None:
                self._target = self._open()
            return self._target

    def _open(self) -> ResolveProgress:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        console = self._console if self._console is not None else Console(stderr=True)
        if not (console.is_terminal if self._enabled is None else self._enabled):
            return NullProgress()
        self._bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._bar.start()
        return RichProgress(self._bar)

    def step(self, description: str) -> None:
        self._display().step(description)

    def files(self, description: str, total: int) -> None:
        self._display().files(description, total)

    def advance(self) -> None:
        self._display().advance()

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()


@contextmanager
def hub_progress(console: Console | None = None, *, enabled: bool | None = None) -> Iterator[ResolveProgress]:
    """A progress reporter for :func:`planner.hub.resolve.resolve_model`.

    ``enabled=None`` draws only when ``console`` is a terminal (default console: stderr).
    """
    reporter = _FirstReport(console, enabled)
    try:
        yield reporter
    finally:
        reporter.close()
