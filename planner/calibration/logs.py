"""Parse a vLLM startup log (V0 or V1 engine, 0.8 to 0.33) into a :class:`StartupRecord`.

The lines read, as vLLM prints them (with or without the process prefix and timestamps):

* ``vLLM API server version X`` / ``Initializing a V1 LLM engine (vX) with config: ...``
* ``non-default args: {...}`` (a Python dict literal) — the serving flags in force
* ``Model loading took X GiB`` — weights
* V1 DEBUG ``Memory profiling takes ... torch peak memory increase: A GiB; non-torch forward increase
  memory: B GiB; weights memory: C GiB``, ``Available KV cache memory: X GiB``
* V0 ``the current vLLM instance can use total_gpu_memory (T GiB) x gpu_memory_utilization (U) ...
  model weights take W GiB; non_torch_memory takes N GiB; PyTorch activation peak memory takes A GiB;
  the rest of the memory reserved for KV Cache is K GiB.`` and ``# GPU blocks: N``
* per-worker lines (weights, profiling, available memory, graphs) are taken from the first worker that
  printed them (rank 0 in practice); the capacity lines from the last print.
* ``Custom allreduce is disabled because your platform lacks GPU P2P capability ...``: no P2P between the
  TP ranks' GPUs (``gpu_p2p`` false: NCCL keeps its channel buffers in host memory)
* ``GPU KV cache size: N tokens`` and ``Maximum concurrency for L tokens per request: Xx`` (two
  lines up to 0.26, one combined line later), ``Graph capturing finished in S secs, took X GiB``,
  ``num_gpu_blocks`` from a ``cache_config_info`` line or ``Overriding num_gpu_blocks``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from typing import Any

from planner.calibration.records import StartupRecord

_NUM = r"([\d,]+(?:\.\d+)?)"
_PATTERNS: dict[str, re.Pattern[str]] = {
    "version_api": re.compile(r"vLLM API server version\s+v?([\w.+\-]+)"),
    "version_engine": re.compile(r"Initializing an? (?:V1 )?LLM engine \(v([\w.+\-]+)\)"),
    "weights": re.compile(r"Model loading took " + _NUM + r"\s*GiB"),
    "profile_v1": re.compile(
        r"torch peak memory increase: "
        + _NUM
        + r"\s*GiB; non-torch forward increase memory: "
        + _NUM
        + r"\s*GiB; weights memory: "
        + _NUM
        + r"\s*GiB"
    ),
    "available": re.compile(r"Available KV cache memory: " + _NUM + r"\s*GiB"),
    "v0_total": re.compile(r"total_gpu_memory \(" + _NUM + r"\s*GiB\) x gpu_memory_utilization \(" + _NUM + r"\)"),
    "v0_terms": re.compile(
        r"model weights take "
        + _NUM
        + r"\s*GiB; non_torch_memory takes "
        + _NUM
        + r"\s*GiB; PyTorch activation peak memory takes "
        + _NUM
        + r"\s*GiB; the rest of the memory reserved for KV Cache is "
        + _NUM
        + r"\s*GiB"
    ),
    "v0_blocks": re.compile(r"# (?:GPU|CUDA|cuda) blocks: " + _NUM),
    "tokens": re.compile(r"KV cache size: " + _NUM + r" tokens"),
    "concurrency": re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + r"x"),
    "graphs": re.compile(r"Graph capturing finished in \d+ secs?, took " + _NUM + r"\s*GiB"),
    "blocks": re.compile(r"num_gpu_blocks(?:=| is:? |=')" + r"'?" + _NUM),
    "free_line": re.compile(r"Free memory on device \(" + _NUM + r"/" + _NUM + r"\s*GiB\)"),
    "no_p2p": re.compile(r"lacks GPU P2P capability"),
    "nondefault": re.compile(r"non-default args: (\{.*\})"),
    "engine_config": re.compile(r"with config: (.*)$"),
}


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _last(pattern: str, lines: list[str]) -> re.Match[str] | None:
    found = None
    for line in lines:
        match = _PATTERNS[pattern].search(line)
        if match:
            found = match
    return found


def _first(pattern: str, lines: list[str]) -> re.Match[str] | None:
    for line in lines:
        match = _PATTERNS[pattern].search(line)
        if match:
            return match
    return None


def _non_default_args(lines: list[str]) -> dict[str, Any]:
    match = _first("nondefault", lines)
    if not match:
        return {}
    try:
        value = ast.literal_eval(match.group(1))
    except (ValueError, SyntaxError):
        return {}
    return value if isinstance(value, dict) else {}


def _engine_config(lines: list[str]) -> dict[str, str]:
    """``key=value`` pairs of the engine's config line (model='x', tensor_parallel_size=2, ...)."""
    match = _first("engine_config", lines)
    if not match:
        return {}
    pairs = re.findall(r"(\w+)=('[^']*'|[^,]+)", match.group(1))
    return {key: value.strip("'") for key, value in pairs}


def _int(value: Any) -> int | None:
    try:
        return int(str(value).replace(",", ""))
    except (TypeError, ValueError):
        return None


def parse_startup_log(text: str | Iterable[str], *, record_id: str = "log") -> StartupRecord:
    """Read the figures a startup log printed; fields it did not print stay None."""
    lines = text.splitlines() if isinstance(text, str) else list(text)
    args = _non_default_args(lines)
    config = _engine_config(lines)
    version_match = _first("version_api", lines) or _first("version_engine", lines)
    v0 = _first("v0_terms", lines)
    profile = _first("profile_v1", lines)
    available = _first("available", lines)
    weights_line = _first("weights", lines)
    concurrency = _last("concurrency", lines)
    tokens = _last("tokens", lines)
    graphs = _first("graphs", lines)
    blocks = _last("v0_blocks", lines) or _last("blocks", lines)
    total = _last("v0_total", lines)
    free_line = _last("free_line", lines)

    weights = _number(weights_line.group(1)) if weights_line else None
    activation = non_torch = kv = None
    if profile:
        activation, non_torch = _number(profile.group(1)), _number(profile.group(2))
        weights = weights if weights is not None else _number(profile.group(3))
    if v0:
        weights, non_torch, activation, kv = (_number(v0.group(i)) for i in range(1, 5))
    if available:
        kv = _number(available.group(1))
    model = args.get("model") or args.get("model_tag") or config.get("model") or "unknown"
    util = args.get("gpu_memory_utilization")
    if util is None and total:
        util = _number(total.group(2))
    total_gib = _number(total.group(1)) if total else (_number(free_line.group(2)) if free_line else None)
    tp = args.get("tensor_parallel_size") or _int(config.get("tensor_parallel_size")) or 1
    pp = args.get("pipeline_parallel_size") or _int(config.get("pipeline_parallel_size")) or 1
    dtype = str(config.get("dtype", "")).replace("torch.", "") or None
    return StartupRecord(
        id=record_id,
        model=str(model),
        vllm_version=version_match.group(1) if version_match else None,
        engine="v0" if v0 else ("v1" if (available or profile) else None),
        tensor_parallel_size=int(tp),
        pipeline_parallel_size=int(pp),
        dtype=args.get("dtype") or dtype,
        kv_cache_dtype=args.get("kv_cache_dtype") or config.get("kv_cache_dtype"),
        gpu_memory_utilization=float(util) if util is not None else None,
        max_model_len=_int(args.get("max_model_len")) or _int(config.get("max_seq_len")),
        max_num_seqs=_int(args.get("max_num_seqs")),
        max_num_batched_tokens=_int(args.get("max_num_batched_tokens")),
        block_size=_int(args.get("block_size")),
        enforce_eager=bool(args.get("enforce_eager", False)),
        gpu_p2p=False if _first("no_p2p", lines) else None,
        enable_prefix_caching=prefix if isinstance(prefix := args.get("enable_prefix_caching"), bool) else None,
        quantization=args.get("quantization"),
        total_gpu_memory_gib=total_gib,
        weights_gib=weights,
        non_torch_gib=non_torch,
        activation_peak_gib=activation,
        cuda_graph_gib=_number(graphs.group(1)) if graphs else None,
        kv_cache_memory_gib=kv,
        kv_cache_tokens=int(_number(tokens.group(1))) if tokens else None,
        gpu_blocks=int(_number(blocks.group(1))) if blocks else None,
        max_concurrency_len=int(_number(concurrency.group(1))) if concurrency else None,
        max_concurrency_x=_number(concurrency.group(2)) if concurrency else None,
    )
