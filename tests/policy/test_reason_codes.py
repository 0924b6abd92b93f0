"""Reason codes: one enum (planner/findings.py), the docs table generated from it, no stray codes."""

from __future__ import annotations

import re

from planner.findings import Code, Finding, Severity, fix_args
from planner.findings_table import BEGIN, END, render
from tests.conftest import REPO_ROOT


def test_docs_table_is_generated_from_the_enum() -> None:
    text = (REPO_ROOT / "docs" / "webhook.md").read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == render(), "docs/webhook.md is stale: python -m planner.findings_table docs/webhook.md"
    for code in ("KVP022", "KVP024", "KVP041", "KVP050"):  # rows the hand-written table lacked
        assert f"| {code} |" in text[start:end]


def test_every_code_is_unique() -> None:
    # A repeated value would silently make an Enum alias: the member would vanish from the table.
    assert len(Code.__members__) == len(list(Code))


def test_every_code_written_in_the_source_is_in_the_enum() -> None:
    known = {code.value for code in Code}
    stray: dict[str, list[str]] = {}
    for folder in ("planner", "admission"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            for found in re.findall(r"\bKVP\d{3}\b", path.read_text()):
                if found not in known:
                    stray.setdefault(found, []).append(str(path.relative_to(REPO_ROOT)))
    assert stray == {}, "codes used but not defined in planner/findings.py"


def test_every_deny_and_warning_says_how_to_fix_it() -> None:
    # issue 18: every deny/warn carries its fix; codes without a specific one fall back to the generic fix.
    missing = [c.value for c in Code if c.severity in (Severity.cannot_start, Severity.warn) and not c.fix]
    assert missing == []


def test_a_finding_serializes_its_code_severity_and_fix() -> None:
    item = Finding.of(Code.THRASH, "--max-num-seqs 256 needs more KV blocks", container="vllm")
    assert item.severity == Severity.warn and item.code == "KVP010"
    assert item.model_dump(mode="json") == {
        "code": "KVP010",
        "severity": "warn",
        "message": "KVP010 vllm: --max-num-seqs 256 needs more KV blocks",
        "fix": {"args": [], "text": "lower --max-num-seqs to the safe value"},
    }
    specific = Finding.of(Code.THRASH, "too many", fix=fix_args(["--max-num-seqs", "19"]))
    assert specific.fix is not None and specific.fix.args == ["--max-num-seqs", "19"]
    assert Finding.of(Code.RECORDED_PLAN, "recorded").fix is None  # info: nothing to fix
