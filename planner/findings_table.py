"""The reason codes of :mod:`planner.findings` as Markdown (docs/webhook.md embeds the table between the
markers below; a test checks the document and the code agree).

``python -m planner.findings_table docs/webhook.md`` rewrites the block in place; without a path it
prints the block.
"""

from __future__ import annotations

import sys
from pathlib import Path

from planner.findings import Code, Severity

BEGIN = "<!-- reason-codes:begin (generated from planner/findings.py by `python -m planner.findings_table`) -->"
END = "<!-- reason-codes:end -->"

_SEVERITY_TEXT = {
    Severity.cannot_start: "cannot start",
    Severity.mutate: "mutate",
    Severity.warn: "warn",
    Severity.info: "info",
}


def render() -> str:
    lines = [BEGIN, "", "| code | severity | meaning | fix |", "|---|---|---|---|"]
    for code in Code:
        cell = code.summary.replace("|", "\\|")
        fix = code.fix.replace("|", "\\|") or "-"
        lines.append(f"| {code.value} | {_SEVERITY_TEXT[code.severity]} | {cell} | {fix} |")
    lines += ["", END]
    return "\n".join(lines)


def replace_block(text: str) -> str:
    """``text`` with the block between the markers replaced by :func:`render` (markers must exist)."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + render() + text[end:]


if __name__ == "__main__":
    if len(sys.argv) > 1:
        path = Path(sys.argv[1])
        path.write_text(replace_block(path.read_text()))
    else:
        print(render())  # noqa: T201 - a generator script
