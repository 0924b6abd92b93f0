"""Read the same signals from the Prometheus HTTP API instead of scraping pods (large fleets).

Prometheus (or Thanos / Mimir / any ``/api/v1/query`` endpoint) already scrapes vLLM; the exporter runs
a handful of instant queries per collection (``/api/v1/query``), concurrently, inside the same budget,
and groups the result by the ``namespace`` and ``pod`` labels Kubernetes service discovery attaches. An
optional ``--prometheus-selector`` (e.g. ``job="vllm"``) is added to every query. Pod metadata (planned
blocks, limits) comes from Kubernetes discovery when it runs too; otherwise the workload is the pod
name without its ReplicaSet/pod hash suffixes.

A pod is up when its vLLM series are present; with a selector, ``up{selector} == 0`` also marks pods
down (their vLLM series go stale and vanish).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from admission.exporter.normalize import (
    CACHE_CONFIG,
    GENERATION,
    PREEMPTIONS,
    PROMPT,
    RUNNING,
    USAGE_NEW,
    USAGE_OLD,
    WAITING,
    missing_signals,
)
from admission.observations.model import EngineObservation, TargetObservation
from admission.observations.targets import Target
from planner.errors import ScrapeError

_HASH_SUFFIX = re.compile(r"^(?P<base>.+?)(-[a-z0-9]{8,10})?-[a-z0-9]{5}$")


class _Sample(BaseModel):
    model_config = ConfigDict(extra="ignore")

    metric: dict[str, str]
    value: tuple[float, str]


class _Data(BaseModel):
    model_config = ConfigDict(extra="ignore")

    resultType: str  # Prometheus' field name
    result: list[_Sample]


class _Response(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: str
    data: _Data | None = None
    error: str | None = None


def workload_from_pod_name(pod: str) -> str:
    """``qwen-7b-6d4f8c9b7-x2x8k`` -> ``qwen-7b`` (Deployment pods); other names unchanged."""
    match = _HASH_SUFFIX.match(pod)
    return match.group("base") if match else pod


def _queries(selector: str) -> dict[str, str]:
    sel = f"{{{selector}}}" if selector else ""
    by = "namespace, pod, model_name, engine"
    return {
        USAGE_NEW: f"{USAGE_NEW}{sel}",
        USAGE_OLD: f"{USAGE_OLD}{sel}",
        PREEMPTIONS: f"sum by ({by}) ({PREEMPTIONS}{sel})",
        RUNNING: f"sum by ({by}) ({RUNNING}{sel})",
        WAITING: f"sum by ({by}) ({WAITING}{sel})",
        CACHE_CONFIG: f"{CACHE_CONFIG}{sel}",
        PROMPT: f"sum by ({by}, le) ({PROMPT}_bucket{sel})",
        GENERATION: f"sum by ({by}, le) ({GENERATION}_bucket{sel})",
        # The sums make the retuner's mean lengths exact (the buckets alone only bound them).
        f"{PROMPT}_sum": f"sum by ({by}) ({PROMPT}_sum{sel})",
        f"{GENERATION}_sum": f"sum by ({by}) ({GENERATION}_sum{sel})",
        "up": f"up{sel}" if selector else "",
    }


async def query(client: httpx.AsyncClient, base_url: str, expression: str, timeout_s: float) -> list[_Sample]:
    try:
        response = await asyncio.wait_for(
            client.get(f"{base_url.rstrip('/')}/api/v1/query", params={"query": expression}), timeout_s
        )
    except (asyncio.TimeoutError, httpx.HTTPError) as error:
        raise ScrapeError(f"Prometheus query failed: {type(error).__name__}: {error}") from None
    try:
        body = _Response.model_validate_json(response.content)
    except ValidationError:
        raise ScrapeError(f"Prometheus answered HTTP {response.status_code} with an unreadable body") from None
    if body.status != "success" or body.data is None:
        raise ScrapeError(f"Prometheus query {expression!r} failed: {body.error or response.status_code}")
    if body.data.resultType != "vector":
        raise ScrapeError(f"Prometheus query {expression!r} returned a {body.data.resultType}, not a vector")
    return body.data.result


class PrometheusSource:
    def __init__(self, base_url: str, *, selector: str = "") -> None:
        self.base_url = base_url
        self.selector = selector

    async def collect(
        self, client: httpx.AsyncClient, *, budget_s: float, metadata: Sequence[Target] = ()
    ) -> list[TargetObservation]:
        """One observation per pod with vLLM series. Raises ScrapeError when Prometheus cannot be read."""
        started = time.monotonic()
        queries = {k: v for k, v in _queries(self.selector).items() if v}
        results = await asyncio.gather(*(query(client, self.base_url, q, budget_s) for q in queries.values()))
        by_name = dict(zip(queries, results, strict=True))
        known = {t.key: t for t in metadata}
        pods: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)

        def entry(labels: Mapping[str, str]) -> dict[str, Any] | None:
            namespace, pod = labels.get("namespace", ""), labels.get("pod", "")
            if not pod:
                return None
            engine = labels.get("engine") or "0"
            record = pods[(namespace, pod)].setdefault(engine, {"engine": engine})
            if labels.get("model_name"):
                record.setdefault("model_name", labels["model_name"])
            return record

        for name, field in (
            (PREEMPTIONS, "preemptions_total"),
            (RUNNING, "running"),
            (WAITING, "waiting"),
            (f"{PROMPT}_sum", "prompt_tokens_sum"),
            (f"{GENERATION}_sum", "generation_tokens_sum"),
        ):
            for sample in by_name[name]:
                record = entry(sample.metric)
                if record is not None:
                    record[field] = float(sample.value[1])
        for name in (USAGE_OLD, USAGE_NEW):
            for sample in by_name[name]:
                record = entry(sample.metric)
                value = float(sample.value[1])
                if record is not None and math.isfinite(value):
                    record["kv_cache_usage"], record["usage_metric"] = value, name
        for name, field in ((PROMPT, "prompt_tokens"), (GENERATION, "generation_tokens")):
            grouped: dict[int, dict[float, float]] = defaultdict(dict)
            records: dict[int, dict[str, Any]] = {}
            for sample in by_name[name]:
                record = entry(sample.metric)
                le = sample.metric.get("le")
                if record is None or le is None:
                    continue
                bound = math.inf if le in ("+Inf", "Inf") else float(le)
                grouped[id(record)][bound] = float(sample.value[1])
                records[id(record)] = record
            for key, buckets in grouped.items():
                records[key][field] = sorted(buckets.items())
        for sample in by_name[CACHE_CONFIG]:
            labels = sample.metric
            targets = (
                [entry(labels)]
                if "engine" in labels
                else list(pods[(labels.get("namespace", ""), labels.get("pod", ""))].values())
            )
            for record in targets:
                if record is None:
                    continue
                for label in ("num_gpu_blocks", "block_size"):
                    text = labels.get(label, "")
                    if text.isdigit():
                        record[label] = int(text)
        down = {
            (s.metric.get("namespace", ""), s.metric.get("pod", ""))
            for s in by_name.get("up", [])
            if float(s.value[1]) == 0 and s.metric.get("pod")
        }
        elapsed = time.monotonic() - started
        observations = []
        for pod_key in sorted(set(pods) | down | set(known)):
            namespace, pod = pod_key
            target = known.get(pod_key) or Target(
                url=f"{self.base_url}#{namespace}/{pod}",
                namespace=namespace,
                pod=pod,
                workload=workload_from_pod_name(pod),
                source="prometheus",
            )
            if pod_key in down:
                observations.append(
                    TargetObservation(
                        target=target,
                        up=False,
                        error="connect",
                        detail="Prometheus reports up == 0",
                        duration_s=elapsed,
                    )
                )
                continue
            if pod_key not in pods:
                observations.append(
                    TargetObservation(
                        target=target,
                        up=False,
                        error="not_vllm",
                        detail="no vLLM series in Prometheus for this pod",
                        duration_s=elapsed,
                    )
                )
                continue
            engines = [EngineObservation(**record) for _, record in sorted(pods[pod_key].items())]
            observations.append(
                TargetObservation(
                    target=target, up=True, engines=engines, missing=missing_signals(engines), duration_s=elapsed
                )
            )
        return observations
