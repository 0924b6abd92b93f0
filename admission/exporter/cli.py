"""`python -m admission exporter` (being written)."""

from __future__ import annotations

from admission.cli import app  # noqa: F401
