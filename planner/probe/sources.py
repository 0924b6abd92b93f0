"""Where a workload profile can come from, for ``--workload`` on ``planner recommend`` and ``planner probe``.

:func:`load_workload_source` accepts:

* a file: YAML/JSON profile, ``kind,le,count`` CSV histogram (planner.workload.files), or a saved vLLM
  ``/metrics`` page (recognised by its ``vllm:request_prompt_tokens_bucket`` lines);
* ``http(s)://.../metrics``: a live vLLM metrics page (its length histograms since start-up);
* any other ``http(s)://`` URL: a Prometheus server, queried for the increase of both histograms over
  ``window`` (``sum by (le) (increase(vllm:request_prompt_tokens_bucket{...}[1d]))``).

The prefix-cache credit is applied only when asked for (``prefix_cache_hit_rate``, or
``observed_prefix_credit=True`` to take vLLM's own hit rate from the same page / Prometheus).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from planner.errors import ScrapeError, WorkloadProfileError
from planner.probe.metrics import (
    GENERATION_BUCKETS,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_BUCKETS,
    MetricsSnapshot,
    parse_metrics,
    scrape_sync,
)
from planner.workload import (
    WorkloadProfile,
    buckets_from_prometheus_result,
    load_workload_file,
    profile_from_histograms,
)

_WINDOW = re.compile(r"^\d+[smhdwy]$")
_LABEL_VALUE = re.compile(r'^[^"\\]*$')


def _from_snapshot(
    snapshot: MetricsSnapshot, source: str, *, observed_prefix_credit: bool, fields: dict[str, Any]
) -> WorkloadProfile:
    if not snapshot.prompt_buckets or not snapshot.generation_buckets:
        raise WorkloadProfileError(
            f"{source}: no vllm:request_prompt_tokens / vllm:request_generation_tokens histograms on the page"
        )
    if max(c for _, c in snapshot.prompt_buckets) <= 0:
        raise WorkloadProfileError(f"{source}: the server has not finished any request yet")
    if observed_prefix_credit and fields.get("prefix_cache_hit_rate") is None:
        queries, hits = snapshot.prefix_cache_queries, snapshot.prefix_cache_hits
        if queries and hits is not None:
            fields["prefix_cache_hit_rate"] = min(0.95, hits / queries)
    return profile_from_histograms(snapshot.prompt_buckets, snapshot.generation_buckets, **fields)


def _selector(model_name: str | None, namespace: str | None) -> str:
    labels = []
    for key, value in (("model_name", model_name), ("namespace", namespace)):
        if value:
            if not _LABEL_VALUE.match(value):
                raise WorkloadProfileError(f"{key} {value!r} may not contain quotes or backslashes")
            labels.append(f'{key}="{value}"')
    return "{" + ",".join(labels) + "}" if labels else ""


def _query(client: httpx.Client, base: str, query: str) -> list[tuple[float, float]]:
    url = base.rstrip("/") + "/api/v1/query"
    try:
        response = client.get(url, params={"query": query})
    except httpx.HTTPError as error:
        raise ScrapeError(f"{url}: {type(error).__name__}: {error}") from None
    if response.status_code != 200:
        raise ScrapeError(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
    try:
        payload = response.json()
    except ValueError:
        raise ScrapeError(f"{url}: the answer is not JSON") from None
    return buckets_from_prometheus_result(payload, source=f"{url} ({query})")


def load_workload_source(
    spec: str,
    *,
    timeout: float = 10.0,
    window: str = "1d",
    model_name: str | None = None,
    namespace: str | None = None,
    observed_prefix_credit: bool = False,
    target_risk: float | None = None,
    prefix_cache_hit_rate: float | None = None,
) -> WorkloadProfile:
    """A :class:`WorkloadProfile` from a file, a vLLM ``/metrics`` URL or a Prometheus server."""
    fields: dict[str, Any] = {"target_risk": target_risk, "prefix_cache_hit_rate": prefix_cache_hit_rate}
    if spec.startswith(("http://", "https://")):
        if spec.rstrip("/").endswith("/metrics"):
            snapshot = scrape_sync(spec, timeout=timeout, model_name=model_name)
            return _from_snapshot(snapshot, spec, observed_prefix_credit=observed_prefix_credit, fields=fields)
        if not _WINDOW.match(window):
            raise WorkloadProfileError(f"window {window!r} must be a Prometheus duration such as 6h or 7d")
        sel = _selector(model_name, namespace)
        with httpx.Client(timeout=timeout) as client:

            def increase(name: str) -> str:
                return f"increase({name}{sel}[{window}])"

            prompt_query = f"sum by (le) ({increase(PROMPT_BUCKETS)})"
            output_query = f"sum by (le) ({increase(GENERATION_BUCKETS)})"
            prompt = _query(client, spec, prompt_query)
            output = _query(client, spec, output_query)
            if observed_prefix_credit and prefix_cache_hit_rate is None:
                hits = _scalar(client, spec, f"sum({increase(PREFIX_HITS[0])})")
                queries = _scalar(client, spec, f"sum({increase(PREFIX_QUERIES[0])})")
                if queries:
                    fields["prefix_cache_hit_rate"] = min(0.95, (hits or 0.0) / queries)
        return profile_from_histograms(prompt, output, **fields)
    path = Path(spec)
    if path.is_file() and path.suffix.lower() not in (".yaml", ".yml", ".json", ".csv"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if PROMPT_BUCKETS in text:
            snapshot = parse_metrics(text, model_name=model_name, source=spec)
            return _from_snapshot(snapshot, spec, observed_prefix_credit=observed_prefix_credit, fields=fields)
    return load_workload_file(path, **fields)


def _scalar(client: httpx.Client, base: str, query: str) -> float | None:
    url = base.rstrip("/") + "/api/v1/query"
    try:
        response = client.get(url, params={"query": query})
        result = response.json()["data"]["result"]
        return float(result[0]["value"][1]) if result else None
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return None
