"""Shared GPUs as clusters express them: per-pod budget, decision and patch, from manifests.

Each manifest in ``manifests/`` is one sharing mechanism (see planner/k8s/sharing.py for the table and
its sources). Model Qwen/Qwen2.5-7B-Instruct (catalog), vLLM 0.19.0 (image tag), A100-80GB / H100-80GB
(79.15 GiB as CUDA reports them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.k8s.nodes import nodes_from_documents
from planner.plan.shared import CONTEXT_RESERVE_BYTES
from planner.policy.check import CheckReport, check_policy, run_check
from planner.policy.decide import WorkloadEntry
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend

MANIFESTS = Path(__file__).parent / "manifests"
GiB = 1 << 30
CARD = 84_987_084_800  # A100-80GB and H100-80GB in the catalog (79.15 GiB)


@pytest.fixture(scope="module")
def backend() -> CoreBackend:
    return CoreBackend()


def check(
    backend: CoreBackend, name: str, *, action: str = "Enforce", mutation: str = "fill", nodes: str | None = None
) -> CheckReport:
    text = (MANIFESTS / name).read_text()
    inventory = None
    if nodes is not None:
        inventory = nodes_from_documents(yaml.safe_load_all((MANIFESTS / nodes).read_text()))
    policy = check_policy({"validationAction": action, "mutation": mutation})
    return run_check(read_documents(text, name), policy=policy, backend=backend, inventory=inventory)


def vllm_entries(report: CheckReport) -> list[WorkloadEntry]:
    return [e for e in report.workloads if e.vllm]


def added(entry: WorkloadEntry) -> dict[str, str]:
    """Flags the patch appends, as flag -> value."""
    words = [str(op["value"]) for op in entry.patch if str(op["path"]).endswith("/args/-")]
    return dict(zip(words[::2], words[1::2], strict=True))


def sharing(entry: WorkloadEntry) -> Any:
    assert entry.plan is not None and entry.plan.sharing is not None
    return entry.plan.sharing


def test_time_slicing_four_replicas_gets_a_quarter_and_never_the_whole_card(backend: CoreBackend) -> None:
    (entry,) = vllm_entries(check(backend, "time-slicing-4.yaml"))
    report = sharing(entry)
    assert report.mechanism == "time-slicing" and report.replicas == 4 and not report.isolated
    assert report.budget_bytes == CARD // 4
    flags = added(entry)
    # The share, not vLLM 0.19's whole-card default of 0.9 (the bug this fixes: fill wrote 0.9).
    utilization = float(flags["--gpu-memory-utilization"])
    assert utilization < 0.25 and utilization != 0.9
    assert report.demand_bytes <= report.budget_bytes  # it stays within its quarter
    assert report.co_tenant_bytes >= 3 * CARD // 4
    # --kv-cache-memory-bytes (0.19 has it) is exactly the planned blocks.
    kv = int(flags["--kv-cache-memory-bytes"])
    assert entry.plan is not None
    assert kv == entry.plan.kv_cache.num_gpu_blocks * entry.plan.kv_cache.bytes_per_block
    assert entry.decision == "mutate" and {"KVP013", "KVP022", "KVP027"} <= set(entry.codes)


def test_time_slicing_without_mutation_warns_and_does_not_deny(backend: CoreBackend) -> None:
    """One pod over its share of a time-sliced card starts; its co-tenants may not: a warning."""
    (entry,) = vllm_entries(check(backend, "time-slicing-4.yaml", mutation="off"))
    assert entry.decision == "warn" and "KVP012" in entry.codes and not entry.patch


def test_mps_pinned_limit_denies_a_whole_card_utilization(backend: CoreBackend) -> None:
    """0=20G: vLLM sees 79.15 GiB total, 20 GiB free, asks 0.9 x 79.15: "Free memory on device ... less
    than desired GPU memory utilization" — it cannot start, so Enforce denies with the fix."""
    (entry,) = vllm_entries(check(backend, "mps-pinned.yaml"))
    report = sharing(entry)
    assert report.mechanism == "mps" and report.isolated and report.budget_bytes == 20 * GiB
    assert report.visible_bytes == CARD
    assert entry.decision == "deny" and "KVP006" in entry.codes
    cap = report.max_gpu_memory_utilization
    assert cap is not None and (cap * CARD) + CONTEXT_RESERVE_BYTES <= 20 * GiB
    assert f"--gpu-memory-utilization {cap:g}" in " ".join(entry.messages)


def test_mps_pinned_limit_is_clamped_when_the_policy_clamps(backend: CoreBackend) -> None:
    (entry,) = vllm_entries(check(backend, "mps-pinned.yaml", mutation="clamp"))
    assert entry.decision == "mutate" and "KVP026" in entry.codes
    assert float(_replaced(entry, "--gpu-memory-utilization")) < 0.25


def _replaced(entry: WorkloadEntry, flag: str) -> str:
    for op in entry.patch:
        if op["op"] == "replace" and str(op["path"]).endswith("/args/5"):
            return str(op["value"])
    raise AssertionError(f"{flag} not replaced: {entry.patch}")


def test_hami_gpumem_plans_on_the_limit_vllm_sees(backend: CoreBackend) -> None:
    """HAMi-core reports nvidia.com/gpumem as the card's total: the default utilization applies to it."""
    (entry,) = vllm_entries(check(backend, "hami-gpumem.yaml"))
    report = sharing(entry)
    assert report.mechanism == "hami" and report.isolated
    assert report.budget_bytes == report.visible_bytes == 24576 << 20
    assert entry.plan is not None and entry.plan.memory.total_bytes == 24576 << 20
    assert entry.plan.memory.budget_bytes <= 24576 << 20
    assert not report.over_budget and entry.decision != "deny"


def test_dra_claim_shared_by_two_replicas_with_mps(backend: CoreBackend) -> None:
    entries = vllm_entries(check(backend, "dra-claim.yaml"))
    (entry,) = entries
    assert entry.gpu.source == "dra" and entry.gpu.name == "H100-80GB" and entry.gpu.count == 1
    report = sharing(entry)
    assert report.mechanism == "mps" and report.budget_bytes == 30 * GiB and report.replicas == 2
    flags = added(entry)
    assert float(flags["--gpu-memory-utilization"]) < 30 / 79.15
    assert "KVP007" not in entry.codes  # 2 x 30 GiB fit on the card
    assert entry.decision == "mutate"


def test_two_pods_on_one_time_sliced_card_are_denied_in_enforce(backend: CoreBackend) -> None:
    report = check(backend, "two-pods-one-card.yaml", nodes="nodes-time-sliced.yaml")
    entries = vllm_entries(report)
    assert len(entries) == 2
    for entry in entries:
        assert "KVP007" in entry.codes and entry.decision == "deny" and not entry.patch
        assert entry.tenancy is not None and entry.tenancy.placement == "node:gpu-a"
    assert report.exit_code() == 1


def test_two_pods_on_one_card_only_warn_in_audit(backend: CoreBackend) -> None:
    report = check(backend, "two-pods-one-card.yaml", nodes="nodes-time-sliced.yaml", action="Audit", mutation="off")
    for entry in vllm_entries(report):
        assert "KVP007" in entry.codes and entry.decision == "warn"
    assert report.exit_code() == 0


def test_one_pod_alone_on_the_card_is_not_a_cotenancy_problem(backend: CoreBackend) -> None:
    text = (MANIFESTS / "two-pods-one-card.yaml").read_text().split("\n---\n")[0]
    inventory = nodes_from_documents(yaml.safe_load_all((MANIFESTS / "nodes-time-sliced.yaml").read_text()))
    policy = check_policy({"validationAction": "Enforce", "mutation": "off"})
    report = run_check(read_documents(text, "one"), policy=policy, backend=backend, inventory=inventory)
    (entry,) = vllm_entries(report)
    assert "KVP007" not in entry.codes and entry.decision == "warn"  # over its share: KVP012 only


def test_deployment_replicas_on_one_pinned_card_are_cotenants(backend: CoreBackend) -> None:
    """Placement known inside one object: 2 replicas pinned to the one-GPU node, the webhook's case."""
    doc = yaml.safe_load((MANIFESTS / "two-pods-one-card.yaml").read_text().split("\n---\n")[0])
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "pair", "namespace": "ml"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": "gpu-a"}, "containers": doc["spec"]["containers"]},
            },
        },
    }
    from planner.policy.decide import decide

    inventory = nodes_from_documents(yaml.safe_load_all((MANIFESTS / "nodes-time-sliced.yaml").read_text()))
    policy = check_policy({"validationAction": "Enforce", "mutation": "off"}).for_namespace("ml")
    result = decide(deployment, policy=policy, backend=backend, inventory=inventory, allow_local_models=True)
    assert result.decision == "deny" and "KVP007" in result.codes
