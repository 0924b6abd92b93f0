"""Every metric and recording-rule name the rules and dashboards use, in one place.

vLLM names come from kv-planner's one catalogue of vLLM metrics (planner/vllm/metrics_catalog.py, checked
against each release's source), as exposed on /metrics (counters with ``_total``; prometheus_client
appends it even where vLLM registers the bare name, so the bare name never matches). Where vLLM renamed
a metric the old name is kept next to the new one with the releases that emit it.
"""

from __future__ import annotations

from typing import Final

from planner.vllm import metrics_catalog as _catalog

_vllm = _catalog.exposed_name

# --- vLLM's own metrics (labels: model_name, engine; plus the scrape's namespace/pod) -------------
# KV cache usage, 0..1. The new name exists in 0.10.1 (vLLM's comment: renamed in 0.9) next to the old
# one, which is hidden in 0.11 and removed in 0.12; 0.8.5 (V1) and the V0 engine only emit the old name.
VLLM_KV_USAGE: Final = _vllm("kv_cache_usage")
VLLM_KV_USAGE_OLD: Final = _vllm("gpu_cache_usage")
# Preemption events (same exposed name in every release).
VLLM_PREEMPTIONS: Final = _vllm("num_preemptions")
VLLM_RUNNING: Final = _vllm("running")
VLLM_WAITING: Final = _vllm("waiting")
# Prefix cache counters (tokens): same rename timeline as the usage gauge. V0 has only a gauge (emitted
# when prefix caching is on).
VLLM_PREFIX_QUERIES: Final = _vllm("prefix_cache_queries")
VLLM_PREFIX_HITS: Final = _vllm("prefix_cache_hits")
VLLM_PREFIX_QUERIES_OLD: Final = _vllm("gpu_prefix_cache_queries")
VLLM_PREFIX_HITS_OLD: Final = _vllm("gpu_prefix_cache_hits")
VLLM_PREFIX_HIT_RATE_V0: Final = "vllm:gpu_prefix_cache_hit_rate"
# Histograms (exposed as _bucket/_sum/_count).
VLLM_PROMPT_TOKENS: Final = _vllm("request_prompt_tokens")
VLLM_GENERATION_TOKENS: Final = _vllm("request_generation_tokens")
VLLM_TTFT: Final = _vllm("time_to_first_token")
# Inter-token latency: new name from 0.10.2; the old one is emitted up to 0.11 (hidden in 0.12) and is
# the only one before 0.10.2 and in V0.
VLLM_ITL: Final = _vllm("inter_token_latency")
VLLM_ITL_OLD: Final = _vllm("time_per_output_token")
VLLM_E2E_LATENCY: Final = _vllm("e2e_request_latency")
VLLM_QUEUE_TIME: Final = _vllm("request_queue_time")
# Finished requests by finished_reason (stop, length, abort, error, repetition).
VLLM_REQUEST_SUCCESS: Final = _vllm("request_success")
VLLM_PROMPT_TOKENS_TOTAL: Final = _vllm("prompt_tokens")
VLLM_GENERATION_TOKENS_TOTAL: Final = _vllm("generation_tokens")
# Waiting requests by reason (capacity: no KV room; deferred), from 0.20.2.
VLLM_WAITING_BY_REASON: Final = _vllm("waiting_by_reason")
# Info gauge with labels num_gpu_blocks, block_size, engine (no model_name).
VLLM_CACHE_CONFIG_INFO: Final = _catalog.CACHE_CONFIG_INFO

# --- kv-planner exporter metrics (DESIGN.md) --------------------------------------------------------
EXP_TARGET_UP: Final = "kv_planner_target_up"
EXP_KV_USAGE: Final = "kv_planner_kv_cache_usage_ratio"
EXP_BLOCKS_TOTAL: Final = "kv_planner_kv_blocks_total"
EXP_BLOCKS_PLANNED: Final = "kv_planner_kv_blocks_planned"
EXP_BLOCKS_PLAN_RATIO: Final = "kv_planner_kv_blocks_plan_ratio"
EXP_PREEMPTIONS: Final = "kv_planner_preemptions_total"
EXP_RUNNING: Final = "kv_planner_requests_running"
EXP_WAITING: Final = "kv_planner_requests_waiting"
EXP_MAX_NUM_SEQS: Final = "kv_planner_max_num_seqs_configured"
EXP_MAX_NUM_SEQS_RECOMMENDED: Final = "kv_planner_max_num_seqs_recommended"
EXP_MAX_MODEL_LEN: Final = "kv_planner_max_model_len_configured"
# Largest --max-num-seqs within the retuner's overflow risk for the observed lengths (per workload).
EXP_RISK_BOUND: Final = "kv_planner_max_num_seqs_risk_bound"
EXP_PROMPT_QUANTILE: Final = "kv_planner_prompt_tokens_quantile"
EXP_GENERATION_QUANTILE: Final = "kv_planner_generation_tokens_quantile"
EXP_SCRAPE_DURATION: Final = "kv_planner_scrape_duration_seconds"
EXP_FINISHED: Final = "kv_planner_requests_finished_total"
# Info gauge (value 1, per pod) with the webhook's plan (kv-planner.io/plan) as labels.
EXP_PLAN_INFO: Final = "kv_planner_plan_info"
EXP_PLAN_INFO_LABELS: Final = "workload, gpu, gpu_count, vllm_version"

# --- recording rules (one name per signal across vLLM releases) -------------------------------------
REC_KV_USAGE: Final = "kv_planner:kv_cache_usage:ratio"
REC_PREEMPTIONS: Final = "kv_planner:preemptions:rate5m"
REC_RUNNING: Final = "kv_planner:requests_running:sum"
REC_WAITING: Final = "kv_planner:requests_waiting:sum"
REC_PREFIX_HIT: Final = "kv_planner:prefix_cache_hits:ratio_rate5m"
REC_ITL_BUCKETS: Final = "kv_planner:inter_token_latency_seconds_bucket:rate5m"
REC_FINISHED: Final = "kv_planner:requests_finished:rate5m"
REC_LENGTH_STOPPED: Final = "kv_planner:requests_stopped_by_length:ratio_rate5m"

# Labels that identify one vLLM pod wherever its series come from (scraped directly, or re-exposed by
# the exporter with honor_labels).
POD_LABELS: Final = "namespace, pod"
