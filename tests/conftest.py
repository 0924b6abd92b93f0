"""Fixtures and hooks shared by the whole suite.

Two things the suite reads live outside the repository:

- ``../shared`` beside the checkout (or ``$KV_PLANNER_SHARED_DIR``): real model configs and vLLM
  startup reports. Tests read them from there; nothing from it is copied into the repository.
- the tools ``scripts/install-test-tools`` installs (helm, helm3, hadolint, prometheus, promtool,
  shellcheck, the node CRD validators), found in ``.tools/bin`` or on ``PATH``.

A test whose input is absent calls :func:`missing`: on a developer's machine that is a skip naming what
is absent; under CI (``CI=true``), which has ``../shared`` and runs the install script, it is a failure.
A skip without a reason is a failure everywhere, and so is, under CI, a failed ``pytest.importorskip``
without a reason of its own. Every run ends with the skips counted by reason.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, NoReturn

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DIR = Path(os.environ.get("KV_PLANNER_SHARED_DIR", REPO_ROOT.parent / "shared"))
TOOLS_BIN = REPO_ROOT / ".tools" / "bin"
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(what: str, remedy: str) -> NoReturn:
    """``what`` is absent: skip locally (saying so and how to get it), fail under CI, which has it."""
    message = f"{what} is absent ({remedy})"
    if IN_CI:
        pytest.fail(f"{message}; CI provides it, so under CI=true this is a failure, not a skip", pytrace=False)
    pytest.skip(message)


def find_tool(name: str) -> str | None:
    """A tool from .tools/bin (installed by scripts/install-test-tools) or from PATH."""
    local = TOOLS_BIN / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def require_tool(name: str) -> str:
    path = find_tool(name)
    if path is None:
        missing(f"the `{name}` tool", "scripts/install-test-tools installs it")
    return path


def _shared_path(relative: str) -> Path:
    path = SHARED_DIR / relative
    if not path.exists():
        missing(str(path), "the shared research data beside the checkout; set KV_PLANNER_SHARED_DIR to point elsewhere")
    return path


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return _shared_path("")


@pytest.fixture(scope="session")
def model_configs_dir() -> Path:
    return _shared_path("model-configs")


@pytest.fixture(scope="session")
def calibration_file() -> Path:
    return _shared_path("calibration/vllm-startup.jsonl")


def load_shared_config(name: str) -> dict[str, Any]:
    """Load ``../shared/model-configs/<name>.json`` (a skip locally, a failure under CI, when absent)."""
    data: dict[str, Any] = json.loads(_shared_path(f"model-configs/{name}.json").read_text())
    return data


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--regen-golden",
        action="store_true",
        default=False,
        help="rewrite the expected outputs of the golden tests (tests/webhook/golden/*.out.json), then review the diff",
    )


# The reasons pytest gives a skip nobody explained.
_UNEXPLAINED = {"", "Skipped", "unconditional skip", "skipped"}


def _skip_reason(report: pytest.TestReport) -> str:
    if isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr or "")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report).strip()
    if reason in _UNEXPLAINED:
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} was skipped without a reason: every skip must say why"
    elif IN_CI and reason.startswith("could not import"):
        # pytest.importorskip's own message: CI installs every dependency and test extra.
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid}: {reason}; scripts/test installs the test extras, so under CI=true this fails"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if not hasattr(r, "wasxfail")]
    terminalreporter.section("skip reasons")
    if not skipped:
        terminalreporter.write_line("no test was skipped")
        return
    for reason, count in Counter(_skip_reason(r) for r in skipped).most_common():
        terminalreporter.write_line(f"{count:5d}  {reason}")
    terminalreporter.write_line(f"{len(skipped):5d}  skipped in all")
