"""`planner catalog` (being written)."""

from __future__ import annotations

from planner.cli._app import app  # noqa: F401
