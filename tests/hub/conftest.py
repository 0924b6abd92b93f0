"""Fixtures for the model-resolution tests: an isolated HF_HOME and a local Hub on 127.0.0.1.

huggingface_hub reads some settings once at import (``constants.HF_HUB_OFFLINE``, the saved-token
path). The fixtures pin those for the test's duration so a developer's own login or an
``HF_HUB_OFFLINE=1`` in the shell never leaks in; kv-planner itself reads the environment per call.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hub_fake_server import FakeHub
from huggingface_hub import constants

from planner.hub.resolve import clear_resolution_cache

_ENV = (
    "HF_HOME",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_ASSETS_CACHE",
    "HUGGINGFACE_ASSETS_CACHE",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_ENDPOINT",
    "HF_OIDC_RESOURCE",
    "XDG_CACHE_HOME",
)


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    clear_resolution_cache()
    yield home
    clear_resolution_cache()


@pytest.fixture
def hub(hf_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHub().running() as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        yield fake
