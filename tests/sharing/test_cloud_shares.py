"""Shared GPUs as GKE, Volcano and Alibaba ACK express them, planned like their NVIDIA / HAMi equivalents.

Manifests in ``manifests/`` (sources in each header). Model Qwen/Qwen2.5-7B-Instruct (14.25 GiB of weights)
unless said, vLLM 0.19.0 (image tag). Before these readers, every one of them was planned on the whole card
and filled with the release's whole-card utilization.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.k8s.gpus import GpuResolution
from planner.k8s.nodes import node_info, nodes_from_documents
from planner.k8s.sharing import resolve_share
from planner.plan.shared import CONTEXT_RESERVE_BYTES
from planner.policy.check import CheckReport, check_policy, run_check
from planner.policy.decide import WorkloadEntry
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend, CoreGpuCatalog

MANIFESTS = Path(__file__).parent / "manifests"
GiB, MiB = 1 << 30, 1 << 20
CATALOG = CoreGpuCatalog()
L4 = CATALOG.lookup("L4")
assert L4 is not None


@pytest.fixture(scope="module")
def backend() -> CoreBackend:
    return CoreBackend()


def check(
    backend: CoreBackend, name: str, *, text: str | None = None, mutation: str = "fill", nodes: str | None = None
) -> WorkloadEntry:
    inventory = None
    if nodes is not None:
        inventory = nodes_from_documents(yaml.safe_load_all((MANIFESTS / nodes).read_text()))
    policy = check_policy({"validationAction": "Enforce", "mutation": mutation})
    report: CheckReport = run_check(
        read_documents(text or (MANIFESTS / name).read_text(), name),
        policy=policy,
        backend=backend,
        inventory=inventory,
    )
    (entry,) = [e for e in report.workloads if e.vllm]
    return entry


def added(entry: WorkloadEntry) -> dict[str, str]:
    words = [str(op["value"]) for op in entry.patch if str(op["path"]).endswith("/args/-")]
    return dict(w.split("=", 1) if "=" in w else (w, "") for w in words)


def sharing(entry: WorkloadEntry) -> Any:
    assert entry.plan is not None and entry.plan.sharing is not None
    return entry.plan.sharing


# --- GKE -------------------------------------------------------------------------------------------


def test_gke_mps_limits_each_client_to_its_share_and_denies_a_model_that_cannot_fit(backend: CoreBackend) -> None:
    """Two MPS clients per L4: each is capped at half the card (GKE's device plugin sets the pinned memory
    limit), so 14.25 GiB of weights cannot load. Before: planned on the whole L4 and filled with 0.9."""
    entry = check(backend, "gke-mps.yaml")
    report = sharing(entry)
    assert report.mechanism == "mps" and report.isolated and report.replicas == 2
    assert report.budget_bytes == L4.memory_bytes // 2 and report.visible_bytes == L4.memory_bytes
    assert entry.decision == "deny" and "KVP006" in entry.codes
    assert "--gpu-memory-utilization" not in " ".join(str(op["value"]) for op in entry.patch)


def test_gke_mps_fills_the_share_for_a_model_that_fits(backend: CoreBackend) -> None:
    text = (MANIFESTS / "gke-mps.yaml").read_text().replace("Qwen2.5-7B-Instruct", "Qwen2.5-1.5B-Instruct")
    entry = check(backend, "gke-mps-small.yaml", text=text)
    flags = added(entry)
    utilization = float(flags["--gpu-memory-utilization"])
    assert utilization < 0.5 and utilization * L4.memory_bytes + CONTEXT_RESERVE_BYTES <= L4.memory_bytes // 2
    assert "--kv-cache-memory-bytes" in flags and entry.decision == "mutate"


def test_gke_time_sharing_is_a_share_without_isolation(backend: CoreBackend) -> None:
    entry = check(backend, "gke-time-sharing.yaml")
    report = sharing(entry)
    assert report.mechanism == "time-slicing" and not report.isolated and report.replicas == 4
    assert report.budget_bytes == report.card_bytes // 4
    assert float(added(entry)["--gpu-memory-utilization"]) < 0.25
    assert {"KVP013", "KVP022", "KVP027"} <= set(entry.codes)


def test_gke_sharing_read_from_the_node_inventory(backend: CoreBackend) -> None:
    """The pod names only the accelerator; the nodes it may land on are GKE MPS nodes."""
    text = (MANIFESTS / "gke-mps.yaml").read_text()
    text = text.replace("        cloud.google.com/gke-gpu-sharing-strategy: mps\n", "").replace(
        '        cloud.google.com/gke-max-shared-clients-per-gpu: "2"\n', ""
    )
    entry = check(backend, "gke-mps-no-selectors.yaml", text=text, nodes="nodes-gke-mps.yaml")
    report = sharing(entry)
    assert report.mechanism == "mps" and report.isolated and report.budget_bytes == L4.memory_bytes // 2
    assert entry.decision == "deny" and "KVP006" in entry.codes


def test_gke_mig_partition_is_planned_as_the_slice(backend: CoreBackend) -> None:
    """gke-gpu-partition-size 2g.10gb of an A100-40GB: 9.8 GiB, not the card's 39.4 (the 7B cannot load)."""
    entry = check(backend, "gke-mig.yaml")
    assert entry.gpu.name == "A100-40GB-MIG-2g.10gb" and entry.gpu.count == 1
    assert entry.decision == "deny" and "KVP001" in entry.codes
    bigger = (MANIFESTS / "gke-mig.yaml").read_text().replace("2g.10gb", "3g.20gb")
    fits = check(backend, "gke-mig-3g.yaml", text=bigger)
    assert fits.gpu.name == "A100-40GB-MIG-3g.20gb" and fits.decision != "deny"
    assert fits.plan is not None and fits.plan.gpu.memory_bytes < 21 * GiB


# --- Volcano vGPU ---------------------------------------------------------------------------------


def test_volcano_vgpu_memory_is_an_enforced_limit_vllm_sees(backend: CoreBackend) -> None:
    """volcano.sh/vgpu-memory 10240 MiB, one vGPU (vgpu-number): HAMi-core reports 10 GiB as the total."""
    entry = check(backend, "volcano-vgpu.yaml")
    assert entry.gpu.count == 1 and "KVP005" not in entry.codes
    report = sharing(entry)
    assert report.mechanism == "hami" and report.isolated
    assert report.budget_bytes == report.visible_bytes == 10240 * MiB
    assert entry.decision == "deny" and {"KVP006", "KVP001"} <= set(entry.codes)


# --- Alibaba ACK ------------------------------------------------------------------------------------


def test_ack_cgpu_node_pool_isolates_the_share(backend: CoreBackend) -> None:
    entry = check(backend, "ack-cgpu.yaml")
    assert entry.gpu.count == 1 and "KVP005" not in entry.codes
    report = sharing(entry)
    assert report.isolated and report.budget_bytes == report.visible_bytes == 10 * GiB
    assert entry.decision == "deny" and "KVP006" in entry.codes


def test_ack_without_the_scheduling_label_fills_nothing(backend: CoreBackend) -> None:
    """Whether ACK enforces gpu-mem (cgpu) or not (share) decides what vLLM sees: unknown, so KVP014 and no
    utilization is written (before: the whole-card 0.9)."""
    text = (MANIFESTS / "ack-cgpu.yaml").read_text().replace(", ack.node.gpu.schedule: cgpu", "")
    entry = check(backend, "ack-no-label.yaml", text=text)
    assert {"KVP013", "KVP014"} <= set(entry.codes)
    assert "--gpu-memory-utilization" not in added(entry)


def test_ack_share_mode_is_not_enforced(backend: CoreBackend) -> None:
    text = (MANIFESTS / "ack-cgpu.yaml").read_text().replace("schedule: cgpu", "schedule: share")
    entry = check(backend, "ack-share.yaml", text=text, mutation="off")
    report = sharing(entry)
    assert not report.isolated and report.visible_bytes == L4.memory_bytes and report.budget_bytes == 10 * GiB
    assert entry.decision == "warn" and "KVP012" in entry.codes


# --- the readers, one field at a time ---------------------------------------------------------------


def _l4(count: int = 1, resource: str = "nvidia.com/gpu") -> GpuResolution:
    return GpuResolution(name="L4", label="nvidia-l4", count=count, source="cloud-label", spec=L4, resource=resource)


def _share(limits: dict[str, Any], pod: dict[str, Any] | None = None, **kw: Any) -> Any:
    container = {"name": "vllm", "resources": {"limits": limits}}
    return resolve_share(
        container=container,
        pod_spec={"containers": [container], **(pod or {})},
        annotations=[],
        gpu=kw.pop("gpu", _l4()),
        **kw,
    )


def test_volcano_percentage_cores_only_and_the_older_gpu_share() -> None:
    pct = _share({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory-percentage": 25})
    assert pct.budget_bytes == pct.visible_bytes == L4.memory_bytes // 4 and pct.isolated
    cores = _share({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-cores": 50})
    assert cores.budget_bytes is None and not cores.isolated  # default memory: the whole card
    assert _share({"volcano.sh/vgpu-number": 1}) is None  # a whole vGPU's memory: not a share
    # volcano-sh/devices gpu-share: scheduled by memory (MiB), "without memory isolation"
    soft = _share({"volcano.sh/gpu-memory": 4096}, gpu=_l4(resource="volcano.sh/gpu-memory"))
    assert soft.budget_bytes == 4096 * MiB and soft.visible_bytes == L4.memory_bytes and not soft.isolated


@pytest.mark.parametrize(
    ("mode", "isolated", "sees_share"),
    [("cgpu", True, True), ("core_mem", True, True), ("share", False, False), ("mps", False, False)],
)
def test_ack_modes(mode: str, isolated: bool, sees_share: bool) -> None:
    share = _share({"aliyun.com/gpu-mem": 8}, {"nodeSelector": {"ack.node.gpu.schedule": mode}})
    assert share.budget_bytes == 8 * GiB and share.isolated is isolated
    assert share.visible_bytes == (8 * GiB if sees_share else L4.memory_bytes)


def test_ack_mode_from_the_nodes_multi_gpu_spread_and_mib_units() -> None:
    nodes = [
        node_info(
            {
                "metadata": {"name": "ack-1", "labels": {"ack.node.gpu.schedule": "cgpu"}},
                "status": {"allocatable": {"aliyun.com/gpu-mem": "44"}},
            }
        )
    ]
    gpu = _l4(resource="aliyun.com/gpu-mem")
    from_nodes = _share({"aliyun.com/gpu-mem": 8}, gpu=gpu, inventory=nodes)
    assert from_nodes.isolated and from_nodes.budget_bytes == 8 * GiB
    # aliyun.com/gpu-count: 2 (a pod label, read into the GPU count): 16 GiB over two cards, 8 GiB each
    spread = _share({"aliyun.com/gpu-mem": 16}, gpu=_l4(count=2, resource="aliyun.com/gpu-mem"), inventory=nodes)
    assert spread.budget_bytes == 8 * GiB and "over 2 GPUs" in spread.source
    # more GiB than the card holds: the device plugin counts MiB (--memory-unit=MiB)
    mib = _share({"aliyun.com/gpu-mem": 10240}, gpu=gpu, inventory=nodes)
    assert mib.budget_bytes == 10240 * MiB and "MiB" in mib.source
    assert _share({"aliyun.com/gpu-core.percentage": 30}).budget_bytes is None


def test_gke_and_gfd_labels_read_alike() -> None:
    gke = _share({"nvidia.com/gpu": 1}, {"nodeSelector": {"cloud.google.com/gke-max-shared-clients-per-gpu": "3"}})
    assert gke.mechanism == "time-slicing" and gke.replicas == 3 and gke.budget_bytes == L4.memory_bytes // 3
    mps = _share(
        {"nvidia.com/gpu": 1},
        {
            "nodeSelector": {
                "cloud.google.com/gke-gpu-sharing-strategy": "mps",
                "cloud.google.com/gke-max-shared-clients-per-gpu": "4",
            }
        },
    )
    assert mps.mechanism == "mps" and mps.isolated and mps.budget_bytes == L4.memory_bytes // 4
    unknown = _share({"nvidia.com/gpu": 1}, {"nodeSelector": {"cloud.google.com/gke-gpu-sharing-strategy": "mps"}})
    assert unknown.budget_bytes is None and not unknown.isolated
