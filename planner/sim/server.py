"""Run a simulator: blocking (the CLI) or in a background thread on a free port (tests, tools).

In-process use::

    from planner.sim import SimulatorSettings, start_simulator

    with start_simulator(SimulatorSettings(num_gpu_blocks=64, max_model_len=512, time_scale=0.01)) as sim:
        httpx.get(f"{sim.url}/metrics")
        sim.snapshot()["engines"][0]["preemptions"]

The server binds 127.0.0.1 on a port the OS picks (unless one is given) and serves the real
FastAPI app with uvicorn, in its own thread and event loop.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from planner.errors import KvPlannerError
from planner.sim.settings import SimulatorSettings

T = TypeVar("T")

_START_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0


class SimulatorStartError(KvPlannerError, RuntimeError):
    """The simulator's HTTP server did not come up."""


class RunningSimulator:
    """A simulator serving on 127.0.0.1 in a background thread. Use as a context manager."""

    def __init__(self, settings: SimulatorSettings, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.settings = settings
        self.host = host
        self._requested_port = port
        self.port = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._socket: socket.socket | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    def start(self) -> RunningSimulator:
        import uvicorn

        from planner.sim.app import create_app

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._requested_port))
        self.port = sock.getsockname()[1]
        self._socket = sock
        self.app = create_app(self.settings)
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name=f"vllm-sim-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not self._server.started:
            if self._error is not None or not self._thread.is_alive():
                self.stop()
                raise SimulatorStartError(f"the simulator failed to start: {self._error}")
            if time.monotonic() > deadline:
                self.stop()
                raise SimulatorStartError(f"the simulator did not start within {_START_TIMEOUT_S:.0f} s")
            time.sleep(0.01)
        return self

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            assert self._socket is not None
            loop.run_until_complete(self._server.serve(sockets=[self._socket]))
        except BaseException as error:  # reported by start()/stop()
            self._error = error
        finally:
            loop.close()

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(_STOP_TIMEOUT_S)
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def call(self, function: Callable[[Any], T]) -> T:
        """Run ``function(runtime)`` on the server's event loop (thread-safe access to the engines)."""
        if self._loop is None:
            raise SimulatorStartError("the simulator is not running")
        runtime = self.app.state.holder["runtime"]

        async def _run() -> T:
            return function(runtime)

        return asyncio.run_coroutine_threadsafe(_run(), self._loop).result(_STOP_TIMEOUT_S)

    def snapshot(self) -> dict[str, Any]:
        return self.call(lambda runtime: runtime.snapshot())

    def __enter__(self) -> RunningSimulator:
        return self if self._server is not None else self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_simulator(settings: SimulatorSettings, *, host: str = "127.0.0.1", port: int = 0) -> RunningSimulator:
    """Start a simulator in a background thread and wait until it serves."""
    return RunningSimulator(settings, host=host, port=port).start()


def serve_forever(settings: SimulatorSettings, *, host: str, port: int, log_level: str = "info") -> None:
    """Serve in the foreground until interrupted (``planner simulate serve``)."""
    import uvicorn

    from planner.sim.app import create_app

    uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level, access_log=False)
