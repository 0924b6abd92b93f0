"""Findings of policy decisions: ``KVPnnn <container>: <text>``, with a structured fix where one exists.

The codes themselves (severity, summary, generic fix) live in :mod:`planner.findings`, the one place
for every KVP code. Messages are kept whole in JSON and tables; only the admission response shortens
them (:func:`shorten`): the Kubernetes API server asks admission warnings to stay under 120 characters
and may truncate them past 256.
"""

from __future__ import annotations

from planner.findings import Code, Finding, Fix, Severity, fix_args

__all__ = ["MAX_MESSAGE", "Code", "Finding", "Fix", "Severity", "finding", "fix_args", "passthrough", "shorten"]

MAX_MESSAGE = 120


def shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    """Cut ``text`` to ``limit`` characters at a word boundary, marking the cut with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def finding(code: Code, container: str | None, text: str, fix: Fix | None = None) -> Finding:
    """A finding whose message is ``KVPnnn <container>: <text>`` (whole; see :func:`shorten`)."""
    return Finding.of(code, text, container=container, fix=fix)


def passthrough(container: str | None, note: Finding) -> Finding:
    """A planner-core note (``KVP1xx ...``) on ``container``, code and fix kept, as info."""
    return Finding.of(note.code, note.text, container=container, fix=note.fix, severity=Severity.info)
