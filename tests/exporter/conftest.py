"""Fixture pages of several vLLM releases and helpers shared by the exporter tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@dataclass(frozen=True)
class Page:
    path: Path
    release: str
    engine_kind: str
    text: str
    num_gpu_blocks: int
    block_size: int
    preemptions: int
    engines: tuple[str, ...]


def load_page(path: Path) -> Page:
    text = path.read_text()
    match = re.match(r"vllm-(?P<release>[\d.]+)-(?P<engine>v[01])", path.name)
    expect = re.search(r"^# expect: (.*)$", text, re.MULTILINE)
    assert match and expect, path
    facts = dict(part.split("=", 1) for part in expect.group(1).split())
    return Page(
        path,
        match["release"],
        match["engine"],
        text,
        int(facts["num_gpu_blocks"]),
        int(facts["block_size"]),
        int(facts["preemptions"]),
        tuple(facts["engines"].split(",")),
    )


PAGES = [load_page(p) for p in sorted(FIXTURES.glob("vllm-*.metrics"))]


@pytest.fixture(params=PAGES, ids=[p.path.name for p in PAGES])
def page(request: pytest.FixtureRequest) -> Page:
    result: Page = request.param
    return result


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("promtool")
    if executable is None:
        pytest.fail("promtool is missing: run scripts/install-test-tools (Debian package prometheus)")
    return subprocess.run(
        [executable, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
