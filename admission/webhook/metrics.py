"""The webhook's own metrics (served on the plain-HTTP metrics port, never on the TLS port)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Admission latency targets are milliseconds: buckets resolve 1 ms .. 2.5 s.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class WebhookMetrics:
    """One registry per app, so tests can run several apps in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "kv_planner_webhook_requests_total",
            "Admission reviews answered, by endpoint and decision.",
            ["endpoint", "decision"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "kv_planner_webhook_request_duration_seconds",
            "Time to answer one admission review (server side), by endpoint and decision.",
            ["endpoint", "decision"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.rejected = Counter(
            "kv_planner_webhook_rejected_requests_total",
            "Requests answered 4xx before review (malformed, too large, wrong content type).",
            ["reason"],
            registry=self.registry,
        )
        self.unchecked = Counter(
            "kv_planner_webhook_unchecked_total",
            "Reviews answered without a decision (KVP051 undecided in time, KVP049 internal error), by reason.",
            ["code", "reason"],
            registry=self.registry,
        )
        self.worker_restarts = Counter(
            "kv_planner_webhook_worker_restarts_total",
            "Decision workers replaced (overrun: killed past the review budget; failed; memory).",
            ["reason"],
            registry=self.registry,
        )
        self.connections_dropped = Counter(
            "kv_planner_webhook_connections_dropped_total",
            "Connections closed by the server (slow: request not read in time; excess: over the limit).",
            ["reason"],
            registry=self.registry,
        )
        self.reloads = Counter(
            "kv_planner_webhook_reloads_total",
            "Files reloaded after they changed on disk.",
            ["file", "result"],
            registry=self.registry,
        )
        self.policy_info = Gauge(
            "kv_planner_webhook_policy_generation",
            "Generation of the policy in force (increments on every successful reload).",
            registry=self.registry,
        )
