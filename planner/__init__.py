"""kv-planner: predict vLLM's KV-cache sizing, guard workloads, watch cache pressure."""

from __future__ import annotations

__version__ = "0.1.0"
