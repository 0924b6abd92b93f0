"""The embedded GPU catalog: data integrity, known figures, every alias, instance types, MIG, --gpu-memory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.calibration.dataset import dataset_records
from planner.errors import AmbiguousGPUError, CatalogDataError, PlannerInputError, UnknownGPUError
from planner.gpus import (
    all_gpus,
    gpu_for_instance_type,
    gpu_for_memory,
    gpu_for_mig_profile,
    gpu_from_memory,
    instance_types,
    lookup_gpu,
)
from planner.gpus._data import DATA_DIR, build_catalog, normalize
from planner.gpus.catalog import UnknownInstanceTypeError

GiB = 1 << 30
MiB = 1 << 20

# The cards the catalog must carry (issue 2, item 5), by canonical name.
REQUIRED = [
    "T4",
    "V100-16GB",
    "V100-32GB",
    "A10",
    "A10G",
    "A30",
    "A40",
    "L4",
    "L40",
    "L40S",
    "L20",
    "A100-40GB",
    "A100-80GB",
    "A800-80GB",
    "H100-80GB",
    "H100-PCIe-80GB",
    "H100-NVL-94GB",
    "H800",
    "H20",
    "H200-141GB",
    "GH200-96GB",
    "B200",
    "RTX-3090",
    "RTX-4090",
    "RTX-5090",
    "RTX-A6000",
    "RTX-6000-Ada",
    "MI250X",
    "MI300X",
    "MI325X",
]


def test_catalog_has_every_required_gpu_with_sources() -> None:
    names = [g.name for g in all_gpus()]
    assert len(names) == len(set(names))
    assert set(REQUIRED) <= set(names)
    for gpu in all_gpus():
        assert re.fullmatch(r"[A-Z0-9][A-Za-z0-9-]*", gpu.name), gpu.name
        assert gpu.memory_source.split(":")[0] in ("torch", "torch (ROCm)", "vLLM", "OOM", "derived"), gpu.name
        assert gpu.bandwidth_bytes_per_s >= 100 * 10**9
        # CUDA's total lies below the marketed size (read as GiB) and above 85% of it (read as GB).
        marketed = re.search(r"(\d+)GB$", gpu.name)
        if marketed:
            assert 0.85 * int(marketed.group(1)) * 10**9 < gpu.memory_bytes < int(marketed.group(1)) * GiB


@pytest.mark.parametrize(
    ("name", "gib"),
    [
        ("A100-80GB", 79.15),
        ("H100-80GB", 79.19),
        ("A100-40GB", 39.50),
        ("RTX-3090", 23.58),
        ("L4", 21.96),
        ("T4", 14.56),
        ("H200-141GB", 139.80),
        ("MI300X", 191.98),
        ("RTX-PRO-6000", 94.97),
        ("RTX-PRO-4500", 31.38),
        ("RTX-A5000", 23.57),
        ("B300", 267.69),
        ("GB200", 184.31),
    ],
)
def test_known_figures_as_vllm_and_torch_report_them(name: str, gib: float) -> None:
    assert round(lookup_gpu(name).memory_bytes / GiB, 2) == gib


def test_calibration_records_agree_with_the_catalog() -> None:
    seen = 0
    for record in dataset_records():
        if record.total_gpu_memory_gib is None:
            continue
        gpu = lookup_gpu(record.gpu or "")
        assert round(gpu.memory_bytes / GiB, 2) == record.total_gpu_memory_gib, record.id
        seen += 1
    assert seen > 0


def test_every_name_and_alias_resolves_to_its_own_gpu() -> None:
    for gpu in all_gpus():
        for spelling in (gpu.name, *gpu.aliases):
            for variant in (
                spelling,
                spelling.upper(),
                spelling.lower().replace("-", " "),
                spelling.replace(" ", "_"),
                f"  {spelling} ",
            ):
                assert lookup_gpu(variant).name == gpu.name, variant


def test_no_alias_means_two_gpus() -> None:
    owners: dict[str, str] = {}
    for gpu in all_gpus():
        for spelling in (gpu.name, *gpu.aliases):
            key = normalize(spelling)
            assert owners.setdefault(key, gpu.name) == gpu.name, f"{spelling} is claimed twice"
    instance_keys = {normalize(t.name) for t in instance_types()}
    assert not instance_keys & set(owners)


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        # GPU feature discovery: nvidia.com/gpu.product
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA-A100-SXM4-40GB", "A100-40GB"),
        ("Tesla-T4", "T4"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("NVIDIA-H100-PCIe", "H100-PCIe-80GB"),
        ("NVIDIA-L4", "L4"),
        ("NVIDIA-A10G", "A10G"),
        ("NVIDIA-L40S", "L40S"),
        ("NVIDIA-H200", "H200-141GB"),
        ("NVIDIA-H100-NVL", "H100-NVL-94GB"),
        ("NVIDIA-GeForce-RTX-4090", "RTX-4090"),
        ("NVIDIA-RTX-6000-Ada-Generation", "RTX-6000-Ada"),
        ("NVIDIA-L4-SHARED", "L4"),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "RTX-PRO-6000"),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition", "RTX-PRO-6000"),
        ("NVIDIA-RTX-A5000", "RTX-A5000"),
        ("NVIDIA-H20-3e", "H20-141GB"),
        ("NVIDIA-H20", "H20"),
        ("NVIDIA-B300-SXM6-AC", "B300"),
        ("NVIDIA-GB200", "GB200"),
        # nvidia-smi / torch device names
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("Tesla T4", "T4"),
        ("AMD Instinct MI300X", "MI300X"),
        # GKE cloud.google.com/gke-accelerator
        ("nvidia-tesla-t4", "T4"),
        ("nvidia-l4", "L4"),
        ("nvidia-tesla-a100", "A100-40GB"),
        ("nvidia-a100-80gb", "A100-80GB"),
        ("nvidia-h100-80gb", "H100-80GB"),
        ("nvidia-h100-mega-80gb", "H100-80GB"),
        ("nvidia-h200-141gb", "H200-141GB"),
        ("nvidia-b200", "B200"),
        ("nvidia-rtx-pro-6000", "RTX-PRO-6000"),
        ("nvidia-tesla-v100", "V100-16GB"),
        # karpenter.k8s.aws/instance-gpu-name
        ("h100", "H100-80GB"),
        ("h200", "H200-141GB"),
        ("l4", "L4"),
        ("l40s", "L40S"),
        ("a10g", "A10G"),
        ("t4", "T4"),
        ("b200", "B200"),
        # marketing names
        ("RTX 3090", "RTX-3090"),
        ("H100 SXM", "H100-80GB"),
        ("GH200", "GH200-96GB"),
        ("A6000", "RTX-A6000"),
    ],
)
def test_cluster_labels(label: str, expected: str) -> None:
    assert lookup_gpu(label).name == expected


def test_ambiguous_names_need_the_memory() -> None:
    with pytest.raises(UnknownGPUError) as info:
        lookup_gpu("a100")  # karpenter's name for both p4d (40 GB) and p4de (80 GB)
    assert info.value.suggestions == ["A100-40GB", "A100-80GB"]
    assert isinstance(info.value, AmbiguousGPUError) and "Ambiguous GPU" in str(info.value)
    assert lookup_gpu("a100", memory_bytes=81920 * MiB).name == "A100-80GB"  # nvidia.com/gpu.memory=81920
    assert lookup_gpu("A100", memory_bytes=40960 * MiB).name == "A100-40GB"
    assert lookup_gpu("v100", memory_bytes=32 * GiB).name == "V100-32GB"
    with pytest.raises(UnknownGPUError):
        lookup_gpu("a100", memory_bytes=24 * GiB)  # matches neither


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("A100-80G", "A100-80GB"),
        ("H100-SXM-80GB", "H100-80GB"),
        ("L40-S", "L40S"),
        ("RTX4080", "RTX-4090"),
        ("MI300", "MI300X"),
    ],
)
def test_unknown_gpu_suggests_close_names(name: str, suggestion: str) -> None:
    try:
        found = lookup_gpu(name)
    except UnknownGPUError as error:
        assert isinstance(error, PlannerInputError) and isinstance(error, LookupError)
        assert suggestion in error.suggestions, error.suggestions
        assert "--gpu-memory" in str(error)
    else:  # a spelling the catalog already knows is fine too, as long as it is the right card
        assert found.name == suggestion


def test_unknown_gpu_without_any_close_match() -> None:
    with pytest.raises(UnknownGPUError) as info:
        lookup_gpu("Voodoo3")
    assert info.value.suggestions == []
    with pytest.raises(UnknownGPUError):
        lookup_gpu("   ")


@pytest.mark.parametrize(
    ("instance", "gpu", "count"),
    [
        ("p4d.24xlarge", "A100-40GB", 8),
        ("p4de.24xlarge", "A100-80GB", 8),
        ("p5.48xlarge", "H100-80GB", 8),
        ("p5e.48xlarge", "H200-141GB", 8),
        ("p5en.48xlarge", "H200-141GB", 8),
        ("g5.xlarge", "A10G", 1),
        ("g5.12xlarge", "A10G", 4),
        ("g5.48xlarge", "A10G", 8),
        ("g6.2xlarge", "L4", 1),
        ("g6.12xlarge", "L4", 4),
        ("g6e.48xlarge", "L40S", 8),
        ("g4dn.xlarge", "T4", 1),
        ("g4dn.12xlarge", "T4", 4),
        ("a2-highgpu-1g", "A100-40GB", 1),
        ("a2-ultragpu-8g", "A100-80GB", 8),
        ("a3-highgpu-8g", "H100-80GB", 8),
        ("a3-megagpu-8g", "H100-80GB", 8),
        ("g2-standard-24", "L4", 2),
        ("g2-standard-96", "L4", 8),
        ("g4-standard-48", "RTX-PRO-6000", 1),
        ("g4-standard-384", "RTX-PRO-6000", 8),
        ("Standard_NC24ads_A100_v4", "A100-80GB", 1),
        ("Standard_ND96isr_H100_v5", "H100-80GB", 8),
        ("Standard_NC40ads_H100_v5", "H100-NVL-94GB", 1),
        ("Standard_NV36ads_A10_v5", "A10", 1),
        ("standard_nd96amsr_a100_v4", "A100-80GB", 8),
        ("NC80adis_H100_v5", "H100-NVL-94GB", 2),
    ],
)
def test_instance_types(instance: str, gpu: str, count: int) -> None:
    spec, found = gpu_for_instance_type(instance)
    assert (spec.name, found) == (gpu, count)
    assert lookup_gpu(instance).name == gpu  # instance types are GPU names too


def test_unknown_instance_type() -> None:
    with pytest.raises(UnknownInstanceTypeError) as info:
        gpu_for_instance_type("p4d.24xlarg")
    assert "p4d.24xlarge" in info.value.suggestions
    assert str(info.value).startswith("Unknown instance type 'p4d.24xlarg'.")
    assert isinstance(info.value, UnknownGPUError)


def test_mig_profiles_are_consistent() -> None:
    have_mig = {g.name for g in all_gpus() if g.mig_profiles}
    assert {"A100-40GB", "A100-80GB", "A30", "H100-80GB", "H200-141GB"} <= have_mig
    for gpu in all_gpus():
        for profile in gpu.mig_profiles:
            slices, nominal = re.fullmatch(r"(\d+)g\.(\d+)gb(?:\+me)?", profile.name).groups()  # type: ignore[union-attr]
            assert profile.compute_fraction == pytest.approx(int(slices) / 7, abs=1e-3)
            # the profile name rounds the memory: between 85% of it in GB and all of it in GiB
            assert 0.85 * int(nominal) * 10**9 < profile.memory_bytes < int(nominal) * GiB
            assert profile.memory_bytes <= gpu.memory_bytes * 1.01
            assert profile.memory_source


@pytest.mark.parametrize(
    ("resource", "gpu", "name", "gib"),
    [
        ("nvidia.com/mig-3g.40gb", "A100-80GB", "A100-80GB-MIG-3g.40gb", 39.50),
        ("mig-1g.10gb", "H100-80GB", "H100-80GB-MIG-1g.10gb", 9.75),
        ("1g.5gb", "A100-40GB", "A100-40GB-MIG-1g.5gb", 4.75),
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", None, "A100-80GB-MIG-1g.10gb", 9.50),
        ("NVIDIA A100 80GB PCIe MIG 1g.10gb", None, "A100-80GB-MIG-1g.10gb", 9.50),
        ("NVIDIA-A30-MIG-2g.12gb", None, "A30-MIG-2g.12gb", 11.69),
        ("nvidia.com/mig-1g.12gb", None, "H100-NVL-94GB-MIG-1g.12gb", 11.46),
        ("nvidia.com/mig-7g.141gb", None, "H200-141GB-MIG-7g.141gb", 139.68),
    ],
)
def test_mig_instance_as_a_gpu(resource: str, gpu: str | None, name: str, gib: float) -> None:
    spec = gpu_for_mig_profile(resource, gpu=gpu)
    assert spec.name == name
    assert round(spec.memory_bytes / GiB, 2) == gib
    assert spec.mig_profiles == []
    parent = lookup_gpu(name.split("-MIG-", maxsplit=1)[0])
    assert 0 < spec.bandwidth_bytes_per_s <= parent.bandwidth_bytes_per_s
    assert lookup_gpu(name) == spec  # the generated name looks up again
    assert lookup_gpu(resource if gpu is None else f"{gpu}-MIG-{name.split('-MIG-')[1]}") == spec


def test_mig_profile_on_several_gpus_plans_with_the_smallest() -> None:
    spec = gpu_for_mig_profile("nvidia.com/mig-3g.40gb")
    owners = [g for g in all_gpus() if any(p.name == "3g.40gb" for p in g.mig_profiles)]
    assert len(owners) > 1
    smallest = min(p.memory_bytes for g in owners for p in g.mig_profiles if p.name == "3g.40gb")
    assert spec.memory_bytes == smallest
    assert spec.notes is not None and "also exists on" in spec.notes


def test_bad_mig_requests() -> None:
    with pytest.raises(UnknownGPUError) as info:
        gpu_for_mig_profile("nvidia.com/mig-3g.40gb", gpu="A100-40GB")
    assert "3g.20gb" in str(info.value)  # the parent's profiles are listed
    with pytest.raises(UnknownGPUError):
        gpu_for_mig_profile("nvidia.com/mig-5g.55gb")
    with pytest.raises(UnknownGPUError):
        gpu_for_mig_profile("not-a-profile")
    with pytest.raises(UnknownGPUError):
        gpu_for_mig_profile("1g.10gb", gpu="T4")  # no MIG on T4


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ("79.15GiB", int(79.15 * GiB)),
        ("24G", 24 * GiB),
        ("48GB", 48 * 10**9),
        (85_000_000_000, 85_000_000_000),
    ],
)
def test_gpu_from_memory(size: str | int, expected: int) -> None:
    gpu = gpu_from_memory(size, name="my-card")
    assert gpu.memory_bytes == expected
    assert gpu.name == "my-card"
    assert "given" in gpu.memory_source
    assert gpu.mig_profiles == [] and gpu.aliases == []
    assert gpu_for_memory(size).memory_bytes == expected  # the contract's spelling
    assert gpu_for_memory(size).name.startswith("custom-")


@pytest.mark.parametrize("size", ["0", "-5GiB", "lots", "100TiB"])
def test_gpu_from_memory_rejects_nonsense(size: str) -> None:
    with pytest.raises(PlannerInputError):
        gpu_from_memory(size)


# -------------------------------------------------------------------------------- broken catalogs


def _write(tmp_path: Path, gpus: str, instances: str = "instance_types: {aws: {}}\n") -> tuple[Path, Path]:
    gpu_file, instance_file = tmp_path / "gpus.yaml", tmp_path / "instance_types.yaml"
    gpu_file.write_text(gpus)
    instance_file.write_text(instances)
    return gpu_file, instance_file


_CARD = """
  - name: {name}
    vendor: nvidia
    memory_mib: 1000
    memory_source: "torch: a test figure"
    bandwidth_gb_s: 100
    architecture: test
    aliases: [{alias}]
"""


def test_real_catalog_files_build(tmp_path: Path) -> None:
    catalog = build_catalog(DATA_DIR / "gpus.yaml", DATA_DIR / "instance_types.yaml")
    assert [g.name for g in catalog.gpus] == [g.name for g in all_gpus()]


@pytest.mark.parametrize(
    ("gpus", "instances", "message"),
    [
        (
            "gpus:" + _CARD.format(name="X1", alias="Shared") + _CARD.format(name="X2", alias="shared"),
            "instance_types: {aws: {}}\n",
            "names both X1 and X2",
        ),
        (
            "gpus:" + _CARD.format(name="X1", alias="a").replace("memory_mib: 1000", "memory_mib: -1"),
            "instance_types: {aws: {}}\n",
            "does not validate",
        ),
        (
            "gpus:" + _CARD.format(name="X1", alias="a").replace('    memory_source: "torch: a test figure"\n', ""),
            "instance_types: {aws: {}}\n",
            "memory_source",
        ),
        (
            "gpus:" + _CARD.format(name="X1", alias="a"),
            "instance_types: {aws: {p9.big: {gpu: X9, count: 8}}}\n",
            "unknown GPU 'X9'",
        ),
        (
            "gpus:" + _CARD.format(name="X1", alias="a") + "ambiguous: {X: [X1]}\n",
            "instance_types: {aws: {}}\n",
            "needs two known GPUs",
        ),
        ("gpus: [", "instance_types: {aws: {}}\n", "cannot be read"),
    ],
)
def test_a_broken_catalog_fails_loudly(tmp_path: Path, gpus: str, instances: str, message: str) -> None:
    with pytest.raises(CatalogDataError, match=re.escape(message)):
        build_catalog(*_write(tmp_path, gpus, instances))
