from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest

from planner.probe import ProbeConfig, ProbeReport, run_probe

from .fake_openai import FakeServer, FakeState


@pytest.fixture
def fake_server() -> Iterator[Callable[..., FakeServer]]:
    """Start fake OpenAI servers with the given state fields; all stop at the end of the test."""
    servers: list[FakeServer] = []

    def start(**fields: object) -> FakeServer:
        server = FakeServer(FakeState(**fields))  # type: ignore[arg-type]
        servers.append(server.__enter__())
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


def probe(server: FakeServer, **fields: object) -> ProbeReport:
    """Run the probe against ``server`` with small, fast defaults."""
    settings: dict[str, object] = {
        "endpoint": server.url,
        "output_tokens": 8,
        "sample_interval_s": 0.02,
        "max_duration_s": 60.0,
    }
    settings.update(fields)
    return asyncio.run(run_probe(ProbeConfig(**settings)))  # type: ignore[arg-type]


def wait_idle(state: FakeState) -> None:
    """Wait (bounded) until the server has no request in flight."""
    for _ in range(300):
        if state.active == 0:
            return
        time.sleep(0.01)
    raise AssertionError(f"{state.active} requests still in flight on the server")
