"""Reading a vLLM ``/metrics`` page: the few series the probe and the workload model need.

Names come from the one catalogue (:mod:`planner.vllm.metrics_catalog`) and the page is read by the one
parser (:mod:`planner.vllm.exposition`), both shared with the exporter. Names differ across vLLM
releases (docs/probe.md): KV usage is ``vllm:kv_cache_usage_perc`` from 0.10.1 and
``vllm:gpu_cache_usage_perc`` before (both in 0.10.1-0.11); the preemption counter is exposed as
``vllm:num_preemptions_total`` in V0 and V1. Series are combined over data-parallel engines: usage is
the *highest* engine's (the engine that preempts first), counts are summed. Block numbers come from
``vllm:cache_config_info``.
"""

from __future__ import annotations

import math
from collections import defaultdict

import httpx
from pydantic import BaseModel, ConfigDict

from planner.errors import ScrapeError
from planner.vllm import metrics_catalog as catalog
from planner.vllm.exposition import bucket_bound, parse

_name = catalog.exposed_name
USAGE_NAMES = (_name("kv_cache_usage"), _name("gpu_cache_usage"))
PREEMPTIONS = _name("num_preemptions")
RUNNING = _name("running")
WAITING = _name("waiting")
PROMPT_BUCKETS = f"{_name('request_prompt_tokens')}_bucket"
GENERATION_BUCKETS = f"{_name('request_generation_tokens')}_bucket"
PREFIX_QUERIES = (_name("prefix_cache_queries"), _name("gpu_prefix_cache_queries"))
PREFIX_HITS = (_name("prefix_cache_hits"), _name("gpu_prefix_cache_hits"))
CACHE_CONFIG = catalog.CACHE_CONFIG_INFO
_READ = frozenset(
    {*USAGE_NAMES, PREEMPTIONS, RUNNING, WAITING, PROMPT_BUCKETS, GENERATION_BUCKETS, *PREFIX_QUERIES, *PREFIX_HITS}
    | {CACHE_CONFIG}
)

MAX_PAGE_BYTES = 32 << 20
"""A vLLM metrics page is a few hundred KiB; refuse anything past 32 MiB."""


class MetricsSnapshot(BaseModel):
    """What one scrape says (None: the series is not on the page)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_cache_usage: float | None = None
    preemptions_total: float | None = None
    running: float | None = None
    waiting: float | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    prompt_buckets: list[tuple[float, float]] = []
    generation_buckets: list[tuple[float, float]] = []
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None


def _int_label(value: str | None) -> int | None:
    try:
        return int(value) if value is not None and value not in ("", "None") else None
    except ValueError:
        return None


def parse_metrics(text: str, *, model_name: str | None = None, source: str = "/metrics") -> MetricsSnapshot:
    """Parse a Prometheus text page; with ``model_name`` keep only series of that ``model_name`` label."""
    sums: dict[str, float] = defaultdict(float)
    seen: set[str] = set()
    usage: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {
        PROMPT_BUCKETS: defaultdict(float),
        GENERATION_BUCKETS: defaultdict(float),
    }
    cache: dict[str, str] = {}
    try:
        page = parse(text, _READ)
    except ScrapeError as error:
        raise ScrapeError(f"{source}: not a Prometheus text page: {error.message}") from None
    if not page.types and not any(page.samples.values()) and text.strip():
        raise ScrapeError(f"{source}: not a Prometheus text page (no # TYPE line, no vLLM sample)")
    for name, samples in page.samples.items():
        for labels, value in samples:
            if model_name and "model_name" in labels and labels["model_name"] != model_name:
                continue
            if name in USAGE_NAMES:
                usage[name] = max(usage.get(name, -math.inf), value)
            elif name in buckets:
                buckets[name][bucket_bound(labels.get("le", "+Inf"))] += value
            elif name == CACHE_CONFIG:
                cache = cache or dict(labels)
            else:
                sums[name] += value
                seen.add(name)

    def pick(*names: str) -> float | None:
        for name in names:
            if name in seen:
                return sums[name]
        return None

    return MetricsSnapshot(
        kv_cache_usage=next((usage[n] for n in USAGE_NAMES if n in usage), None),
        preemptions_total=pick(PREEMPTIONS),
        running=pick(RUNNING),
        waiting=pick(WAITING),
        num_gpu_blocks=_int_label(cache.get("num_gpu_blocks")),
        block_size=_int_label(cache.get("block_size")),
        prompt_buckets=sorted(buckets[PROMPT_BUCKETS].items()),
        generation_buckets=sorted(buckets[GENERATION_BUCKETS].items()),
        prefix_cache_queries=pick(*PREFIX_QUERIES),
        prefix_cache_hits=pick(*PREFIX_HITS),
    )


async def scrape(client: httpx.AsyncClient, url: str, *, model_name: str | None = None) -> MetricsSnapshot:
    """GET ``url`` and parse it; any transport or HTTP failure becomes :class:`ScrapeError`."""
    try:
        response = await client.get(url)
    except httpx.HTTPError as error:
        raise ScrapeError(f"{url}: {type(error).__name__}: {error}") from None
    if response.status_code != 200:
        raise ScrapeError(f"{url}: HTTP {response.status_code}")
    if len(response.content) > MAX_PAGE_BYTES:
        raise ScrapeError(f"{url}: the page is larger than {MAX_PAGE_BYTES} bytes")
    return parse_metrics(response.text, model_name=model_name, source=url)


def scrape_sync(url: str, *, timeout: float = 10.0, model_name: str | None = None) -> MetricsSnapshot:
    """Blocking variant of :func:`scrape` for the CLI."""
    try:
        response = httpx.get(url, timeout=timeout)
    except httpx.HTTPError as error:
        raise ScrapeError(f"{url}: {type(error).__name__}: {error}") from None
    if response.status_code != 200:
        raise ScrapeError(f"{url}: HTTP {response.status_code}")
    return parse_metrics(response.text, model_name=model_name, source=url)
