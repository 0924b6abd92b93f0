"""A vLLM simulator: vLLM's HTTP API and metrics over a block-by-block KV-cache scheduler.

Light to import: the web server (FastAPI/uvicorn) and prometheus_client load only when a simulator
starts. See docs/simulator.md.
"""

from __future__ import annotations

from planner.sim.engine import Engine, EngineConfig, SpeedModel
from planner.sim.server import RunningSimulator, start_simulator
from planner.sim.settings import SimulatorSettings

__all__ = ["Engine", "EngineConfig", "RunningSimulator", "SimulatorSettings", "SpeedModel", "start_simulator"]
