"""The exporter: reads vLLM pods' /metrics (or Prometheus) and exposes ``kv_planner_*`` metrics.

``python -m admission exporter``; see docs/exporter.md.
"""
