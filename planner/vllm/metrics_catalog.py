"""vLLM's Prometheus metric families, release by release: the one catalogue of vLLM metric names.

The simulator (planner/sim) registers these families, the exporter (admission/exporter) and the load
probe (planner/probe) read the ones named in :data:`READ`, and the dashboards' rules (dashboards/names.py)
query them. Pure data: no prometheus_client here (the planner core imports no metrics library).

Each row was read in the named release's source (``vllm/v1/metrics/loggers.py: PrometheusStatLogger``,
``vllm/v1/metrics/perf.py: PerfMetricsProm`` from 0.17, ``vllm/engine/metrics.py: Metrics`` for the V0
engine, ``vllm/config/cache.py: CacheConfig`` for the labels of ``vllm:cache_config_info``).
``tests/sim/test_catalog_source.py`` re-reads that source (when it is on disk) and checks every modelled
release: names, types, extra label names, bucket families, finish reasons, cache-config label names.

:func:`families` lists what a *default* ``vllm serve`` exposes: no speculative decoding, no LoRA, no
KV connector, no ``--kv-cache-metrics``, no ``--show-hidden-metrics-for-version``,
``VLLM_COMPUTE_NANS_IN_LOGITS`` unset. :data:`OPTIONAL_FAMILIES` holds the few families registered only
under an option that kv-planner reads anyway (speculative decoding, KV offloading).

Names are stored as vLLM's exposition base names: a counter ``vllm:num_preemptions`` is exposed as
``vllm:num_preemptions_total`` (0.8.5 registered it with the suffix; prometheus_client strips and
re-adds it, so the page is the same).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from planner.errors import UnknownVllmVersionError

Version = tuple[int, int, int]

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[.\-+]?[0-9A-Za-z.]*)?$")


def parse_version(text: str) -> Version:
    """``X.Y.Z`` with an optional leading ``v`` and a fourth part (``0.8.5.post1``, ``0.10.1.1``)."""
    match = _VERSION.match(text.strip())
    if not match:
        raise UnknownVllmVersionError(f"vLLM version {text!r} is not X.Y.Z", hint="Write the release as e.g. 0.19.0.")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


Kind = Literal["gauge", "counter", "histogram"]
BucketFamily = Literal[
    "request_tokens",
    "iteration_tokens",
    "request_params_n",
    "time_to_first_token",
    "inter_token_latency",
    "request_latency",
    "request_num_preemptions",
]
EngineKind = Literal["v1", "v0"]


class Family(BaseModel):
    """One metric family as a release registers it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    name: str
    kind: Kind
    extra_labels: tuple[str, ...] = ()
    # Families whose labels are not (model_name, engine): vllm:admission_rejections (0.33) has
    # model_name and reason only.
    labels_override: tuple[str, ...] | None = None
    buckets: BucketFamily | None = None
    since: str = "0.8.5"
    until: str | None = None  # first release without it (exclusive)
    help: str
    # The vLLM option that registers the family, for the few read although not on by default.
    condition: str | None = None

    def available(self, version: Version) -> bool:
        if version < parse_version(self.since):
            return False
        return self.until is None or version < parse_version(self.until)

    def label_names(self, engine_kind: EngineKind) -> tuple[str, ...]:
        if self.labels_override is not None:
            return self.labels_override
        base = ("model_name", "engine") if engine_kind == "v1" else ("model_name",)
        return base + self.extra_labels


def _f(key: str, name: str, kind: Kind, help: str, **kw: object) -> Family:
    return Family(key=key, name=name, kind=kind, help=help, **kw)


# V1 engine, PrometheusStatLogger (+ PerfMetricsProm), in registration order.
V1_FAMILIES: tuple[Family, ...] = (
    _f("running", "vllm:num_requests_running", "gauge", "Requests in the running batch."),
    _f("waiting", "vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled."),
    _f(
        "waiting_by_reason",
        "vllm:num_requests_waiting_by_reason",
        "gauge",
        "Waiting requests by reason (capacity, deferred).",
        extra_labels=("reason",),
        since="0.20.2",
    ),
    _f(
        "sleep_state",
        "vllm:engine_sleep_state",
        "gauge",
        "Engine sleep state: awake, weights_offloaded, discard_all.",
        extra_labels=("sleep_state",),
        since="0.12.0",
    ),
    _f(
        "gpu_cache_usage",
        "vllm:gpu_cache_usage_perc",
        "gauge",
        "KV-cache usage (old name). 1 means 100 percent.",
        until="0.11.0",
    ),
    _f(
        "gpu_prefix_cache_queries",
        "vllm:gpu_prefix_cache_queries",
        "counter",
        "Prefix-cache queries (old name).",
        until="0.11.0",
    ),
    _f(
        "gpu_prefix_cache_hits",
        "vllm:gpu_prefix_cache_hits",
        "counter",
        "Prefix-cache hits (old name).",
        until="0.11.0",
    ),
    _f("kv_cache_usage", "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent.", since="0.10.1"),
    _f(
        "prefix_cache_queries",
        "vllm:prefix_cache_queries",
        "counter",
        "Prefix-cache queries, in tokens.",
        since="0.10.1",
    ),
    _f("prefix_cache_hits", "vllm:prefix_cache_hits", "counter", "Prefix-cache hits, in tokens.", since="0.10.1"),
    _f(
        "external_prefix_cache_queries",
        "vllm:external_prefix_cache_queries",
        "counter",
        "KV-connector prefix-cache queries, in tokens.",
        since="0.12.0",
    ),
    _f(
        "external_prefix_cache_hits",
        "vllm:external_prefix_cache_hits",
        "counter",
        "KV-connector prefix-cache hits, in tokens.",
        since="0.12.0",
    ),
    _f("mm_cache_queries", "vllm:mm_cache_queries", "counter", "Multi-modal cache queries, in items.", since="0.12.0"),
    _f("mm_cache_hits", "vllm:mm_cache_hits", "counter", "Multi-modal cache hits, in items.", since="0.12.0"),
    _f("num_preemptions", "vllm:num_preemptions", "counter", "Preemptions by the engine."),
    _f("prompt_tokens", "vllm:prompt_tokens", "counter", "Prefill tokens processed."),
    _f(
        "prompt_tokens_by_source",
        "vllm:prompt_tokens_by_source",
        "counter",
        "Prompt tokens by source.",
        extra_labels=("source",),
        since="0.16.0",
    ),
    _f("prompt_tokens_cached", "vllm:prompt_tokens_cached", "counter", "Cached prompt tokens.", since="0.16.0"),
    _f(
        "prompt_tokens_recomputed",
        "vllm:prompt_tokens_recomputed",
        "counter",
        "Cached prompt tokens recomputed.",
        since="0.16.0",
        until="0.20.2",
    ),
    _f(
        "prompt_tokens_cached_by_source",
        "vllm:prompt_tokens_cached_by_source",
        "counter",
        "Cached prompt tokens by source.",
        extra_labels=("source",),
        since="0.33.0",
    ),
    _f("generation_tokens", "vllm:generation_tokens", "counter", "Generation tokens processed."),
    _f(
        "request_success",
        "vllm:request_success",
        "counter",
        "Finished requests by reason.",
        extra_labels=("finished_reason",),
    ),
    _f(
        "admission_rejections",
        "vllm:admission_rejections",
        "counter",
        "Requests rejected by a queue limit.",
        labels_override=("model_name", "reason"),
        since="0.33.0",
    ),
    _f(
        "request_prompt_tokens",
        "vllm:request_prompt_tokens",
        "histogram",
        "Prompt tokens per finished request.",
        buckets="request_tokens",
    ),
    _f(
        "request_generation_tokens",
        "vllm:request_generation_tokens",
        "histogram",
        "Generation tokens per finished request.",
        buckets="request_tokens",
    ),
    _f(
        "iteration_tokens",
        "vllm:iteration_tokens_total",
        "histogram",
        "Tokens per engine step.",
        buckets="iteration_tokens",
    ),
    _f(
        "request_max_num_generation_tokens",
        "vllm:request_max_num_generation_tokens",
        "histogram",
        "Maximum requested generation tokens.",
        buckets="request_tokens",
    ),
    _f(
        "request_params_n", "vllm:request_params_n", "histogram", "The n request parameter.", buckets="request_params_n"
    ),
    _f(
        "request_params_max_tokens",
        "vllm:request_params_max_tokens",
        "histogram",
        "The max_tokens request parameter.",
        buckets="request_tokens",
    ),
    _f(
        "time_to_first_token",
        "vllm:time_to_first_token_seconds",
        "histogram",
        "Time to first token in seconds.",
        buckets="time_to_first_token",
    ),
    _f(
        "time_per_output_token",
        "vllm:time_per_output_token_seconds",
        "histogram",
        "Time per output token in seconds (old name).",
        buckets="inter_token_latency",
        until="0.12.0",
    ),
    _f(
        "inter_token_latency",
        "vllm:inter_token_latency_seconds",
        "histogram",
        "Inter-token latency in seconds.",
        buckets="inter_token_latency",
        since="0.10.2",
    ),
    _f(
        "request_time_per_output_token",
        "vllm:request_time_per_output_token_seconds",
        "histogram",
        "Mean time per output token of each request, seconds.",
        buckets="inter_token_latency",
        since="0.11.0",
    ),
    _f(
        "e2e_request_latency",
        "vllm:e2e_request_latency_seconds",
        "histogram",
        "End-to-end request latency in seconds.",
        buckets="request_latency",
    ),
    _f(
        "request_queue_time",
        "vllm:request_queue_time_seconds",
        "histogram",
        "Time spent WAITING, seconds.",
        buckets="request_latency",
    ),
    _f(
        "request_inference_time",
        "vllm:request_inference_time_seconds",
        "histogram",
        "Time spent RUNNING, seconds.",
        buckets="request_latency",
    ),
    _f(
        "request_prefill_time",
        "vllm:request_prefill_time_seconds",
        "histogram",
        "Time spent in prefill, seconds.",
        buckets="request_latency",
    ),
    _f(
        "request_decode_time",
        "vllm:request_decode_time_seconds",
        "histogram",
        "Time spent in decode, seconds.",
        buckets="request_latency",
    ),
    _f(
        "request_num_preemptions",
        "vllm:request_num_preemptions",
        "histogram",
        "Preemptions per finished request.",
        buckets="request_num_preemptions",
        since="0.33.0",
    ),
    _f(
        "request_prefill_kv_computed_tokens",
        "vllm:request_prefill_kv_computed_tokens",
        "histogram",
        "Prompt tokens computed (not cached) per request.",
        buckets="request_tokens",
        since="0.13.0",
    ),
    _f(
        "estimated_flops_per_gpu",
        "vllm:estimated_flops_per_gpu",
        "counter",
        "Estimated floating point operations per GPU.",
        since="0.17.1",
    ),
    _f(
        "estimated_read_bytes_per_gpu",
        "vllm:estimated_read_bytes_per_gpu",
        "counter",
        "Estimated bytes read from memory per GPU.",
        since="0.17.1",
    ),
    _f(
        "estimated_write_bytes_per_gpu",
        "vllm:estimated_write_bytes_per_gpu",
        "counter",
        "Estimated bytes written to memory per GPU.",
        since="0.17.1",
    ),
)

# V0 engine (vllm/engine/metrics.py, VLLM_USE_V1=0, releases before 0.11): label model_name only.
V0_FAMILIES: tuple[Family, ...] = (
    _f("running", "vllm:num_requests_running", "gauge", "Requests running on GPU."),
    _f("waiting", "vllm:num_requests_waiting", "gauge", "Requests waiting to be processed."),
    _f("gpu_cache_usage", "vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent."),
    _f("num_preemptions", "vllm:num_preemptions", "counter", "Cumulative preemptions."),
    _f("prompt_tokens", "vllm:prompt_tokens", "counter", "Prefill tokens processed."),
    _f("generation_tokens", "vllm:generation_tokens", "counter", "Generation tokens processed."),
    _f(
        "iteration_tokens",
        "vllm:iteration_tokens_total",
        "histogram",
        "Tokens per engine step.",
        buckets="iteration_tokens",
    ),
    _f(
        "time_to_first_token",
        "vllm:time_to_first_token_seconds",
        "histogram",
        "Time to first token in seconds.",
        buckets="time_to_first_token",
    ),
    _f(
        "time_per_output_token",
        "vllm:time_per_output_token_seconds",
        "histogram",
        "Time per output token in seconds.",
        buckets="inter_token_latency",
    ),
    _f(
        "inter_token_latency",
        "vllm:inter_token_latency_seconds",
        "histogram",
        "Inter-token latency in seconds.",
        buckets="inter_token_latency",
        since="0.10.2",
    ),
    _f(
        "e2e_request_latency",
        "vllm:e2e_request_latency_seconds",
        "histogram",
        "End-to-end request latency in seconds.",
        buckets="request_latency",
    ),
    _f(
        "request_queue_time",
        "vllm:request_queue_time_seconds",
        "histogram",
        "Time spent WAITING, seconds.",
        buckets="request_latency",
    ),
    _f(
        "request_inference_time",
        "vllm:request_inference_time_seconds",
        "histogram",
        "Time spent RUNNING, seconds.",
        buckets="request_latency",
    ),
    _f(
        "request_prefill_time",
        "vllm:request_prefill_time_seconds",
        "histogram",
        "Time spent in prefill, seconds.",
        buckets="request_latency",
    ),
    _f(
        "request_decode_time",
        "vllm:request_decode_time_seconds",
        "histogram",
        "Time spent in decode, seconds.",
        buckets="request_latency",
    ),
    _f(
        "request_prompt_tokens",
        "vllm:request_prompt_tokens",
        "histogram",
        "Prompt tokens per finished request.",
        buckets="request_tokens",
    ),
    _f(
        "request_generation_tokens",
        "vllm:request_generation_tokens",
        "histogram",
        "Generation tokens per finished request.",
        buckets="request_tokens",
    ),
    _f(
        "request_max_num_generation_tokens",
        "vllm:request_max_num_generation_tokens",
        "histogram",
        "Maximum requested generation tokens.",
        buckets="request_tokens",
    ),
    _f(
        "request_params_n", "vllm:request_params_n", "histogram", "The n request parameter.", buckets="request_params_n"
    ),
    _f(
        "request_params_max_tokens",
        "vllm:request_params_max_tokens",
        "histogram",
        "The max_tokens request parameter.",
        buckets="request_tokens",
    ),
    _f(
        "request_success",
        "vllm:request_success",
        "counter",
        "Finished requests by reason.",
        extra_labels=("finished_reason",),
    ),
)
V0_UNTIL = "0.11.0"  # the V0 engine is gone from 0.11.0

CACHE_CONFIG_INFO = "vllm:cache_config_info"

# Bucket families (identical in every modelled release; 0.33 moved them to vllm/v1/metrics/buckets.py).
STATIC_BUCKETS: dict[str, tuple[float, ...]] = {
    "iteration_tokens": (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    "request_params_n": (1, 2, 5, 10, 20),
    "request_num_preemptions": (1, 2, 3, 4, 5, 10, 20),
    "time_to_first_token": (
        0.001,
        0.005,
        0.01,
        0.02,
        0.04,
        0.06,
        0.08,
        0.1,
        0.25,
        0.5,
        0.75,
        1.0,
        2.5,
        5.0,
        7.5,
        10.0,
        20.0,
        40.0,
        80.0,
        160.0,
        640.0,
        2560.0,
    ),
    "inter_token_latency": (
        0.01,
        0.025,
        0.05,
        0.075,
        0.1,
        0.15,
        0.2,
        0.3,
        0.4,
        0.5,
        0.75,
        1.0,
        2.5,
        5.0,
        7.5,
        10.0,
        20.0,
        40.0,
        80.0,
    ),
    "request_latency": (
        0.3,
        0.5,
        0.8,
        1.0,
        1.5,
        2.0,
        2.5,
        5.0,
        10.0,
        15.0,
        20.0,
        30.0,
        40.0,
        50.0,
        60.0,
        120.0,
        240.0,
        480.0,
        960.0,
        1920.0,
        7680.0,
    ),
}


def one_two_five_buckets(max_value: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vLLM ``build_1_2_5_buckets``)."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


def buckets_for(family: BucketFamily, max_model_len: int) -> list[float]:
    if family == "request_tokens":
        return one_two_five_buckets(max_model_len)
    return list(STATIC_BUCKETS[family])


def finish_reasons(version: Version) -> tuple[str, ...]:
    """``FINISH_REASON_STRINGS`` of ``vllm/v1/engine/__init__.py``."""
    if version >= parse_version("0.17.1"):
        return ("stop", "length", "abort", "error", "repetition")
    if version >= parse_version("0.13.0"):
        return ("stop", "length", "abort", "error")
    return ("stop", "length", "abort")


PROMPT_TOKEN_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")


def families(version: Version, engine_kind: EngineKind = "v1") -> list[Family]:
    """What a default ``vllm serve`` of that release registers (no :data:`OPTIONAL_FAMILIES`)."""
    table = V1_FAMILIES if engine_kind == "v1" else V0_FAMILIES
    return [family for family in table if family.available(version)]


# Registered only under an option, read by the exporter where a page has them (issue 13: speculative
# decoding and KV offloading). V1, labels model_name + engine (+ the extra labels).
OPTIONAL_FAMILIES: tuple[Family, ...] = (
    # vllm X.Y.Z vllm/v1/spec_decode/metrics.py: SpecDecodingProm (0.8.5 registered the `_total` names).
    _f(
        "spec_decode_drafts",
        "vllm:spec_decode_num_drafts",
        "counter",
        "Speculative-decoding drafts.",
        condition="--speculative-config",
    ),
    _f(
        "spec_decode_draft_tokens",
        "vllm:spec_decode_num_draft_tokens",
        "counter",
        "Draft tokens proposed.",
        condition="--speculative-config",
    ),
    _f(
        "spec_decode_accepted_tokens",
        "vllm:spec_decode_num_accepted_tokens",
        "counter",
        "Draft tokens accepted.",
        condition="--speculative-config",
    ),
    # vllm 0.16.0-0.33.0 vllm/distributed/kv_transfer/kv_connector/v1/offloading(_connector|/metrics).py:
    # OffloadPromMetrics, transfer_type "GPU_to_CPU" (store) / "CPU_to_GPU" (load); deprecated in 0.33.
    _f(
        "kv_offload_bytes",
        "vllm:kv_offload_total_bytes",
        "counter",
        "Bytes moved by the KV offloading connector, by transfer type.",
        extra_labels=("transfer_type",),
        since="0.16.0",
        condition="--kv-offloading-size / OffloadingConnector",
    ),
    # vllm 0.33.0 .../offloading/metrics.py: _TransferMetricName (flat names, no transfer_type).
    _f(
        "kv_offload_store_bytes",
        "vllm:kv_offload_store_bytes",
        "counter",
        "Bytes stored from GPU to the offload medium.",
        since="0.33.0",
        condition="--kv-offloading-size / OffloadingConnector",
    ),
    _f(
        "kv_offload_load_bytes",
        "vllm:kv_offload_load_bytes",
        "counter",
        "Bytes loaded from the offload medium to GPU.",
        since="0.33.0",
        condition="--kv-offloading-size / OffloadingConnector",
    ),
)

_BY_KEY: dict[str, Family] = {}
for _family in (*V0_FAMILIES, *V1_FAMILIES, *OPTIONAL_FAMILIES):
    _BY_KEY[_family.key] = _family  # V1 rows win over V0 rows of the same key (same exposed names)


def family(key: str) -> Family:
    return _BY_KEY[key]


def exposed_name(key: str) -> str:
    """The name as it appears on /metrics: counters with ``_total``, histograms by their base name."""
    row = _BY_KEY[key]
    return f"{row.name}_total" if row.kind == "counter" else row.name


def sample_names(key: str) -> tuple[str, ...]:
    """Every sample name of the family on /metrics (histograms: ``_bucket``, ``_sum``, ``_count``)."""
    row = _BY_KEY[key]
    if row.kind == "histogram":
        return (f"{row.name}_bucket", f"{row.name}_sum", f"{row.name}_count")
    return (exposed_name(key),)


# The families kv-planner reads (exporter, retuner, probe). Everything else on a page is skipped unparsed.
READ: tuple[str, ...] = (
    "running",
    "waiting",
    "waiting_by_reason",
    "kv_cache_usage",
    "gpu_cache_usage",
    "num_preemptions",
    "prompt_tokens",
    "generation_tokens",
    "request_success",
    "request_prompt_tokens",
    "request_generation_tokens",
    "request_queue_time",
    "e2e_request_latency",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "gpu_prefix_cache_queries",
    "gpu_prefix_cache_hits",
    "spec_decode_drafts",
    "spec_decode_draft_tokens",
    "spec_decode_accepted_tokens",
    "kv_offload_bytes",
    "kv_offload_store_bytes",
    "kv_offload_load_bytes",
)


def read_sample_names() -> frozenset[str]:
    """Sample names of :data:`READ` plus ``vllm:cache_config_info``: what a reader hands to the parser."""
    return frozenset(name for key in READ for name in sample_names(key)) | {CACHE_CONFIG_INFO}


# KV offload transfer types (vLLM's "<src>_to_<dst>" keys): from the GPU is a store, to it a load.
def offload_direction(transfer_type: str) -> str | None:
    source, _, destination = transfer_type.partition("_to_")
    if not destination:
        return None
    if source == "GPU":
        return "store"
    if destination == "GPU":
        return "load"
    return None
