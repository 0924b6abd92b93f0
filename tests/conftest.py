"""Fixtures shared by the whole suite.

``../shared`` (beside the checkout) holds real model configs and vLLM startup reports. Tests read them
from there and skip cleanly when the folder is absent; nothing from it is copied into the repository.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DIR = Path(os.environ.get("KV_PLANNER_SHARED_DIR", REPO_ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED_DIR.is_dir():
        pytest.skip(f"{SHARED_DIR} is absent (shared research data is not available here)")
    return SHARED_DIR


@pytest.fixture(scope="session")
def model_configs_dir(shared_dir: Path) -> Path:
    path = shared_dir / "model-configs"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(scope="session")
def calibration_file(shared_dir: Path) -> Path:
    path = shared_dir / "calibration" / "vllm-startup.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


def load_shared_config(name: str) -> dict[str, Any]:
    """Load ``../shared/model-configs/<name>.json`` or skip the test."""
    path = SHARED_DIR / "model-configs" / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    data: dict[str, Any] = json.loads(path.read_text())
    return data
