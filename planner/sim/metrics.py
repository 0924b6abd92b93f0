"""The simulator's ``/metrics``: vLLM's families for the modelled release, fed from engine steps.

Uses prometheus_client exactly as vLLM does (labelled Gauge/Counter/Histogram with one child per
engine created at start-up, so every series exists from the first scrape with value 0), but in a
private registry so several simulators can live in one process. Imported lazily by the server.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from planner.sim.cache_config import CacheSettings, cache_config_labels
from planner.sim.engine import StepStats
from planner.vllm import metrics_catalog as catalog
from planner.vllm.metrics_catalog import EngineKind, Family, Version, parse_version

SIMULATOR_INFO = "kv_planner_simulator_info"
SIMULATOR_ABORTED = "kv_planner_simulator_aborted_requests"


class MetricsRecorder:
    def __init__(
        self,
        *,
        release: str,
        engine_kind: EngineKind,
        model_name: str,
        engine_indexes: list[int],
        max_model_len: int,
        cache: CacheSettings,
        info: dict[str, str],
    ) -> None:
        self.release = release
        self.version: Version = parse_version(release)
        self.engine_kind = engine_kind
        self.model_name = model_name
        self.registry = CollectorRegistry()
        self.families = {f.key: f for f in catalog.families(self.version, engine_kind)}
        self._metrics: dict[str, Any] = {}
        self._children: dict[tuple[str, int, str], Any] = {}
        for family in self.families.values():
            self._register(family, engine_indexes, max_model_len)
        self._cache_config_info(engine_indexes, cache)
        info_gauge = Gauge(
            SIMULATOR_INFO, "kv-planner's vLLM simulator: what it models.", list(info), registry=self.registry
        )
        info_gauge.labels(**info).set(1)
        self._aborted = Counter(
            SIMULATOR_ABORTED,
            "Requests the simulator aborted because the client went away (vLLM V1 does not count these).",
            ["engine"],
            registry=self.registry,
        )
        for index in engine_indexes:
            self._aborted.labels(str(index))

    # --- registration -------------------------------------------------------------------------

    def _extra_values(self, family: Family) -> list[str]:
        if not family.extra_labels and family.labels_override is None:
            return [""]
        key = family.key
        if key == "request_success":
            return list(catalog.finish_reasons(self.version))
        if key == "waiting_by_reason":
            return list(catalog.WAITING_REASONS)
        if key == "sleep_state":
            return list(catalog.SLEEP_STATES)
        if key == "prompt_tokens_by_source":
            return list(catalog.PROMPT_TOKEN_SOURCES)
        if key == "prompt_tokens_cached_by_source":
            return list(catalog.CACHE_HIT_SOURCES)
        if key == "admission_rejections":
            return list(catalog.ADMISSION_REASONS)
        raise KeyError(key)

    def _register(self, family: Family, engine_indexes: list[int], max_model_len: int) -> None:
        labels = list(family.label_names(self.engine_kind))
        metric: Any
        if family.kind == "gauge":
            metric = Gauge(family.name, family.help, labels, registry=self.registry)
        elif family.kind == "counter":
            metric = Counter(family.name, family.help, labels, registry=self.registry)
        else:
            assert family.buckets is not None
            buckets = catalog.buckets_for(family.buckets, max_model_len)
            metric = Histogram(family.name, family.help, labels, buckets=buckets, registry=self.registry)
        self._metrics[family.key] = metric
        for extra in self._extra_values(family):
            if family.labels_override is not None:
                # Not per engine (vllm:admission_rejections): model_name + reason.
                child = metric.labels(self.model_name, extra)
                for index in engine_indexes:
                    self._children[(family.key, index, extra)] = child
                continue
            for index in engine_indexes:
                values = [self.model_name] + ([str(index)] if self.engine_kind == "v1" else [])
                if extra:
                    values.append(extra)
                self._children[(family.key, index, extra)] = metric.labels(*values)
        if family.key == "sleep_state":
            for index in engine_indexes:
                self._children[("sleep_state", index, "awake")].set(1)

    def _cache_config_info(self, engine_indexes: list[int], cache: CacheSettings) -> None:
        labels = cache_config_labels(self.release, self.version, cache)
        # V1 adds the engine label from 0.10.1 (0.8.5 and the V0 engine emit the config alone).
        per_engine = self.engine_kind == "v1" and self.version >= parse_version("0.10.1")
        names = [*labels, "engine"] if per_engine else list(labels)
        gauge = Gauge(
            catalog.CACHE_CONFIG_INFO, "Information of the engine's CacheConfig.", names, registry=self.registry
        )
        if per_engine:
            for index in engine_indexes:
                gauge.labels(**labels, engine=str(index)).set(1)
        else:
            gauge.labels(**labels).set(1)

    # --- recording ----------------------------------------------------------------------------

    def _child(self, key: str, engine: int, extra: str = "") -> Any:
        if key not in self.families:
            return None
        return self._children[(key, engine, extra)]

    def _set(self, key: str, engine: int, value: float, extra: str = "") -> None:
        child = self._child(key, engine, extra)
        if child is not None:
            child.set(value)

    def _inc(self, key: str, engine: int, value: float, extra: str = "") -> None:
        child = self._child(key, engine, extra)
        if child is not None and value:
            child.inc(value)

    def _observe(self, key: str, engine: int, values: list[float] | list[int]) -> None:
        child = self._child(key, engine)
        if child is not None:
            for value in values:
                child.observe(value)

    def aborted(self, engine: int, *, running: int, waiting: int, kv_cache_usage: float) -> None:
        """A client abort: count it and show the freed capacity at once."""
        self._aborted.labels(str(engine)).inc()
        self._set("running", engine, running)
        self._set("waiting", engine, waiting)
        self._set("waiting_by_reason", engine, waiting, "capacity")
        self._set("kv_cache_usage", engine, kv_cache_usage)
        self._set("gpu_cache_usage", engine, kv_cache_usage)

    def record(self, engine: int, stats: StepStats) -> None:
        self._set("running", engine, stats.running)
        self._set("waiting", engine, stats.waiting)
        self._set("waiting_by_reason", engine, stats.waiting, "capacity")
        self._set("kv_cache_usage", engine, stats.kv_cache_usage)
        self._set("gpu_cache_usage", engine, stats.kv_cache_usage)
        for prefix in ("prefix_cache", "gpu_prefix_cache"):
            self._inc(f"{prefix}_queries", engine, stats.prefix.queries)
            self._inc(f"{prefix}_hits", engine, stats.prefix.hits)
        self._inc("num_preemptions", engine, stats.num_preempted)
        self._inc("prompt_tokens", engine, stats.prompt_tokens)
        computed = stats.prompt_tokens - stats.prompt_tokens_cached
        self._inc("prompt_tokens_by_source", engine, computed, "local_compute")
        self._inc("prompt_tokens_by_source", engine, stats.prompt_tokens_cached, "local_cache_hit")
        self._inc("prompt_tokens_cached", engine, stats.prompt_tokens_cached)
        self._inc("prompt_tokens_cached_by_source", engine, stats.prompt_tokens_cached, "device")
        self._inc("generation_tokens", engine, stats.generation_tokens)
        self._observe("iteration_tokens", engine, [stats.iteration_tokens])
        self._observe("time_to_first_token", engine, stats.time_to_first_token)
        self._observe("time_per_output_token", engine, stats.inter_token_latency)
        self._observe("inter_token_latency", engine, stats.inter_token_latency)
        for done in stats.finished:
            self._inc("request_success", engine, 1, done.finish_reason)
            self._observe("request_max_num_generation_tokens", engine, [done.num_generation_tokens])
            self._observe("request_params_n", engine, [done.n])
            self._observe("e2e_request_latency", engine, [done.e2e_latency])
            self._observe("request_queue_time", engine, [done.queued_time])
            self._observe("request_prefill_time", engine, [done.prefill_time])
            self._observe("request_inference_time", engine, [done.inference_time])
            self._observe("request_decode_time", engine, [done.decode_time])
            self._observe(
                "request_prefill_kv_computed_tokens", engine, [done.num_prompt_tokens - done.num_cached_tokens]
            )
            self._observe("request_prompt_tokens", engine, [done.num_prompt_tokens])
            self._observe("request_generation_tokens", engine, [done.num_generation_tokens])
            generated_after_first = done.num_generation_tokens - 1
            self._observe(
                "request_time_per_output_token",
                engine,
                [done.decode_time / generated_after_first if generated_after_first > 0 else 0.0],
            )
            if done.max_tokens_param:
                self._observe("request_params_max_tokens", engine, [done.max_tokens_param])
            self._observe("request_num_preemptions", engine, [done.num_preemptions])

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
