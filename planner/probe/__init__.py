"""The load probe: a bounded staircase of concurrent long requests against a live vLLM server.

    report = asyncio.run(run_probe(ProbeConfig(endpoint="http://vllm:8000", max_concurrency=32)))
    report.safe_concurrency, report.steps

May import httpx (always), prometheus_client and matplotlib (lazily). docs/probe.md.
"""

from __future__ import annotations

from planner.probe.report import PlannerComparison, ProbeReport, ProbeStep
from planner.probe.runner import ProbeConfig, run_probe

__all__ = ["PlannerComparison", "ProbeConfig", "ProbeReport", "ProbeStep", "run_probe"]
