"""KV offloading to CPU memory: the host memory a pod needs, and the tokens each tier holds.

Two ways to offload, per release as vLLM's source does it:

* ``--kv-offloading-size GiB`` (+ ``--kv-offloading-backend``), ``config/vllm.py:
  VllmConfig._post_init_kv_transfer_config``:

  - 0.11.1 - 0.13: active only with ``--kv-offloading-backend`` (``kv_offloading_size`` is then required).
    ``native`` passes ``num_cpu_blocks: 0`` to the OffloadingConnector, whose ``CPUOffloadingSpec``
    raises "num_cpu_blocks must be specified in kv_connector_extra_config" (``vllm 0.12.0
    v1/kv_offload/cpu.py``): the server does not start. ``lmcache`` gives each of the TP x PP ranks
    ``size / ranks`` GB of LMCache local CPU memory.
  - 0.14 - 0.26: active with ``--kv-offloading-size`` (backend default ``native``). ``native``:
    ``cpu_bytes_to_use = size x 2^30`` for the whole engine; CPU blocks = that // (bytes of one GPU block on
    one rank x world size) (``vllm 0.19.0 v1/kv_offload/cpu/spec.py: CPUOffloadingSpec``), allocated in
    pinned host tensors (``v1/kv_offload/worker/cpu_gpu.py``: ``pin_memory=is_pin_memory_available()``).
    ``lmcache``: ``size / ranks`` GB per rank, as above.
  - 0.33: ``native`` as 0.14 (chunks of blocks rounded up to an alignment, ``v1/kv_offload/cpu/spec.py``);
    ``lmcache`` runs LMCache in multi-process mode (``LMCacheMPConnector``): the storage lives in a separate
    LMCache server and ``kv_offloading_size`` is not passed on — no host memory in this container.

* LMCache as a connector, ``--kv-transfer-config '{"kv_connector": "LMCacheConnectorV1", ...}'``: each
  worker's local CPU backend holds ``max_local_cpu_size`` GB (default 5.0, ``local_cpu`` default true;
  ``lmcache/v1/config.py``), read from ``LMCACHE_MAX_LOCAL_CPU_SIZE`` / ``LMCACHE_LOCAL_CPU`` or the
  connector's ``kv_connector_extra_config`` (``lmcache.max_local_cpu_size``). LMCache's local CPU
  buffer is pinned memory. A config file (``LMCACHE_CONFIG_FILE``) is not read here: said so.

Offloading is not disaggregation: an LMCache or OffloadingConnector with ``kv_role: kv_both`` keeps
this engine's own KV on the host; disaggregated prefill/decode (a ``kv_producer`` / ``kv_consumer``
role, or NixlConnector, P2pNcclConnector, MooncakeConnector) moves KV between engines (KVP202).
"""

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import InvalidArgumentError
from planner.vllm.args import ServingArgs
from planner.vllm.releases import Version

GiB = 1 << 30
LMCACHE_DEFAULT_GB = 5.0
_DISAGG_CONNECTORS = ("NixlConnector", "P2pNcclConnector", "MooncakeConnector", "MultiConnector")
_LMCACHE_CONNECTORS = ("LMCacheConnectorV1", "LMCacheConnector", "LMCacheMPConnector")


class OffloadReport(BaseModel):
    """The CPU tier of the KV cache, per engine (``offload`` in ``planner recommend`` JSON)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["native", "lmcache", "lmcache-server"]
    source: str = Field(description="the flags or environment it comes from")
    host_bytes: int = Field(description="host memory the engine's processes allocate for the CPU tier")
    pinned: bool = Field(description="page-locked host memory (counted in the container's memory cgroup)")
    cpu_tokens: int = Field(description="tokens the CPU tier holds")
    gpu_tokens: int = Field(description="tokens the GPU tier holds (the plan's KV cache)")
    cpu_blocks: int | None = Field(default=None, description="native: CPU blocks of the GPU block size")
    rule: str
    notes: list[str] = Field(default=[])


def _v(text: str) -> tuple[int, int, int]:
    return Version.parse(text).key()


def _json(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise InvalidArgumentError("argument --kv-transfer-config: invalid JSON", flag="--kv-transfer-config") from None
    return data if isinstance(data, dict) else {}


def transfer_role(args: ServingArgs) -> tuple[str | None, str | None]:
    """(connector, role) of ``--kv-transfer-config``."""
    data = _json(args.kv_transfer_config)
    connector = data.get("kv_connector")
    role = data.get("kv_role")
    return (str(connector) if connector else None, str(role) if role else None)


def is_disaggregation(args: ServingArgs) -> bool:
    """KV moves between engines (prefill/decode split), as opposed to offloading this engine's KV."""
    connector, role = transfer_role(args)
    if connector is None:
        return False
    if role in ("kv_producer", "kv_consumer"):
        return True
    return connector in _DISAGG_CONNECTORS


def _lmcache_gb(args: ServingArgs) -> tuple[float | None, str, list[str]]:
    """LMCache's local CPU size per worker (GB) from the connector config or the environment."""
    notes: list[str] = []
    extra = _json(args.kv_transfer_config).get("kv_connector_extra_config") or {}
    env = args.env
    if isinstance(extra, dict) and "lmcache.max_local_cpu_size" in extra:
        value, source = extra["lmcache.max_local_cpu_size"], "kv_connector_extra_config lmcache.max_local_cpu_size"
    elif "LMCACHE_MAX_LOCAL_CPU_SIZE" in env:
        value, source = env["LMCACHE_MAX_LOCAL_CPU_SIZE"], "LMCACHE_MAX_LOCAL_CPU_SIZE"
    else:
        value, source = LMCACHE_DEFAULT_GB, f"LMCache default ({LMCACHE_DEFAULT_GB:g} GB)"
        if "LMCACHE_CONFIG_FILE" in env:
            notes.append("LMCACHE_CONFIG_FILE is not read: LMCache's default local CPU size assumed")
    if str(env.get("LMCACHE_LOCAL_CPU", "true")).lower() in ("false", "0", "no"):
        return None, "LMCACHE_LOCAL_CPU=false", notes
    try:
        return float(value), source, notes
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{source}: {value!r} is not a number of GB") from None


def offload_report(
    args: ServingArgs,
    version: Version,
    *,
    bytes_per_block: int,
    block_size: int,
    groups: int,
    gpu_tokens: int,
) -> OffloadReport | None:
    """The CPU tier for ``args`` (None without offloading). ``bytes_per_block``: one GPU block on one
    rank; ``groups``: KV-cache groups (a block of tokens costs one block per group)."""
    ranks = args.tensor_parallel_size * args.pipeline_parallel_size
    engine_block = bytes_per_block * ranks
    key = version.key()
    tokens_per_block = block_size / max(1, groups)
    per_token_engine = engine_block / max(1.0, tokens_per_block)
    size = args.kv_offloading_size
    backend = args.kv_offloading_backend
    flags_active = size is not None and (key >= _v("0.14.0") or backend is not None)
    if backend is not None and size is None and key < _v("0.14.0"):
        raise InvalidArgumentError(
            "You must set kv_offloading_size when kv_offloading_backend is set.", flag="--kv-offloading-backend"
        )
    if flags_active:
        assert size is not None
        chosen = backend or "native"
        source = f"--kv-offloading-size {size:g}" + (f" --kv-offloading-backend {backend}" if backend else "")
        rule = "config/vllm.py: VllmConfig._post_init_kv_transfer_config"
        if chosen == "native":
            if key < _v("0.14.0"):
                raise InvalidArgumentError(
                    "num_cpu_blocks must be specified in kv_connector_extra_config (vLLM 0.11.1-0.13 pass 0 "
                    "for --kv-offloading-backend native; use 0.14+ or lmcache)",
                    flag="--kv-offloading-backend",
                )
            blocks = int(size * GiB) // engine_block if engine_block > 0 else 0
            return OffloadReport(
                backend="native",
                source=source,
                host_bytes=blocks * engine_block,
                pinned=True,
                cpu_tokens=int(blocks * tokens_per_block),
                gpu_tokens=gpu_tokens,
                cpu_blocks=blocks,
                rule=rule + "; v1/kv_offload/cpu/spec.py: CPUOffloadingSpec",
            )
        if key >= _v("0.33.0"):
            return OffloadReport(
                backend="lmcache-server",
                source=source,
                host_bytes=0,
                pinned=False,
                cpu_tokens=0,
                gpu_tokens=gpu_tokens,
                rule=rule + " (LMCacheMPConnector)",
                notes=["LMCache multi-process mode: the CPU tier lives in the LMCache server, not in this pod"],
            )
        host = int(size * GiB)  # size / ranks GB on each of the ranks
        return OffloadReport(
            backend="lmcache",
            source=source,
            host_bytes=host,
            pinned=True,
            cpu_tokens=int(host / per_token_engine) if per_token_engine else 0,
            gpu_tokens=gpu_tokens,
            rule=rule + " (lmcache.max_local_cpu_size = size / ranks)",
        )
    connector, _ = transfer_role(args)
    if connector in _LMCACHE_CONNECTORS and not is_disaggregation(args) and connector != "LMCacheMPConnector":
        gb, source, notes = _lmcache_gb(args)
        if gb is None:
            return None
        host = int(gb * GiB) * ranks  # every worker (rank) holds its own local CPU backend
        return OffloadReport(
            backend="lmcache",
            source=f"{connector}: {source}",
            host_bytes=host,
            pinned=True,
            cpu_tokens=int(host / per_token_engine) if per_token_engine else 0,
            gpu_tokens=gpu_tokens,
            rule="lmcache/v1/config.py: local_cpu, max_local_cpu_size (per worker)",
            notes=notes,
        )
    return None
