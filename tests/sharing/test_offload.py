"""KV offloading: the CPU tier's host memory and tokens per release, and the container memory check.

Rules from vLLM's source (planner/plan/offload.py): 0.12.0 config/vllm.py + v1/kv_offload/cpu.py (native
needs --kv-offloading-backend and then fails: num_cpu_blocks 0), 0.19.0 config/vllm.py +
v1/kv_offload/cpu/spec.py (cpu_bytes_to_use = size GiB for the engine), 0.33.0 config/vllm.py (lmcache:
LMCacheMPConnector, storage outside the pod); LMCache lmcache/v1/config.py (max_local_cpu_size 5.0 GB).
"""

from __future__ import annotations

import json

import pytest

from planner.errors import InvalidArgumentError
from planner.gpus.catalog import lookup_gpu
from planner.hub.resolve import resolve_model
from planner.plan import make_plan
from planner.policy.check import check_policy, run_check
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend
from planner.vllm.args import ServingArgs

GiB = 1 << 30
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"  # 128 KiB of KV per token, 2 MiB per 16-token block


def _plan(version: str, **args: object):
    model = resolve_model(LLAMA, offline=True).spec
    return make_plan(model, lookup_gpu("H100-80GB"), ServingArgs(max_model_len=32768, **args), vllm_version=version)


def test_native_offload_0_19_holds_size_over_block_bytes() -> None:
    plan = _plan("0.19.0", kv_offloading_size=64.0)
    offload = plan.offload
    assert offload is not None and offload.backend == "native" and offload.pinned
    # 64 GiB // (16 tokens x 128 KiB) = 32,768 CPU blocks = 524,288 tokens
    assert offload.cpu_blocks == 32768 and offload.cpu_tokens == 524288
    assert offload.host_bytes == 64 * GiB
    assert offload.gpu_tokens == plan.kv_cache.tokens
    assert any(w.startswith("KVP203") and "524,288" in w for w in plan.warnings)


def test_native_offload_is_per_engine_across_tensor_parallel_ranks() -> None:
    plan = _plan("0.19.0", kv_offloading_size=64.0, tensor_parallel_size=2)
    assert plan.offload is not None and plan.offload.cpu_tokens == 524288  # the same tokens, split by rank


def test_0_12_needs_a_backend_and_native_fails() -> None:
    plan = _plan("0.12.0", kv_offloading_size=64.0)
    assert plan.offload is None and any("does nothing" in w for w in plan.warnings)
    with pytest.raises(InvalidArgumentError, match="num_cpu_blocks must be specified"):
        _plan("0.12.0", kv_offloading_size=64.0, kv_offloading_backend="native")
    lmcache = _plan("0.12.0", kv_offloading_size=64.0, kv_offloading_backend="lmcache")
    assert lmcache.offload is not None and lmcache.offload.backend == "lmcache"
    assert lmcache.offload.host_bytes == 64 * GiB


def test_0_33_lmcache_lives_in_the_lmcache_server() -> None:
    plan = _plan("0.33.0", kv_offloading_size=64.0, kv_offloading_backend="lmcache")
    assert plan.offload is not None and plan.offload.backend == "lmcache-server" and plan.offload.host_bytes == 0


def test_lmcache_connector_reads_its_environment() -> None:
    connector = json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    default = _plan("0.19.0", kv_transfer_config=connector)
    assert default.offload is not None and default.offload.host_bytes == 5 * GiB  # LMCache's 5.0 GB default
    sized = _plan("0.19.0", kv_transfer_config=connector, env={"LMCACHE_MAX_LOCAL_CPU_SIZE": "40"})
    assert sized.offload is not None and sized.offload.host_bytes == 40 * GiB
    assert sized.offload.cpu_tokens == 40 * GiB // (128 * 1024)
    # Offloading is not disaggregation: no KVP202.
    assert not any(w.startswith("KVP202") for w in sized.warnings)


def test_disaggregation_keeps_a_named_warning() -> None:
    plan = _plan("0.19.0", kv_transfer_config=json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}))
    (warning,) = [w for w in plan.warnings if w.startswith("KVP202")]
    assert "NixlConnector" in warning and "disaggregated" in warning and plan.offload is None


MANIFEST = """
apiVersion: apps/v1
kind: Deployment
metadata: {{name: chat, namespace: ml}}
spec:
  selector: {{matchLabels: {{a: b}}}}
  template:
    metadata: {{labels: {{a: b}}}}
    spec:
      nodeSelector: {{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.19.0
        args: [--model, {model}, --max-model-len, "32768", --kv-offloading-size, "64"]
        resources: {{limits: {{nvidia.com/gpu: 1, memory: {memory}}}}}
"""


@pytest.mark.parametrize(
    ("memory", "decision", "code"),
    [("32Gi", "deny", "KVP008"), ("65Gi", "mutate", "KVP015"), ("128Gi", "mutate", None)],
)
def test_memory_limit_must_hold_the_offload_buffers(memory: str, decision: str, code: str | None) -> None:
    text = MANIFEST.format(model=LLAMA, memory=memory)
    report = run_check(read_documents(text, "m"), policy=check_policy({"mutation": "fill"}), backend=CoreBackend())
    (entry,) = [e for e in report.workloads if e.vllm]
    assert entry.decision == decision
    offload_codes = {c for c in entry.codes if c in ("KVP008", "KVP015")}
    assert offload_codes == ({code} if code else set())
