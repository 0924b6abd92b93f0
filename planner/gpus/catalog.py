"""GPU lookup: every name a user or a cluster gives a GPU -> the catalog's :class:`GpuSpec`.

Names come from many places: ``--gpu A100-80GB``, GPU feature discovery's ``nvidia.com/gpu.product``
(``NVIDIA-A100-SXM4-80GB``, ``...-SHARED`` under time-slicing, ``...-MIG-3g.40gb`` under MIG),
GKE's ``cloud.google.com/gke-accelerator`` (``nvidia-a100-80gb``), karpenter's
``karpenter.k8s.aws/instance-gpu-name`` (``a100``), cloud instance types (``p4de.24xlarge``), MIG
resources (``nvidia.com/mig-3g.40gb``) and ``nvidia-smi``'s device names. Lookup ignores case, spaces,
``-`` and ``_``; a name that means two cards (``A100``) is refused unless the memory settles it; an
unknown name raises :class:`~planner.errors.UnknownGPUError` with close matches.
"""

from __future__ import annotations

import difflib

import re2

from planner.errors import AmbiguousGPUError, PlannerInputError, UnknownGPUError
from planner.gpus._data import InstanceType, instance_key, load_catalog, normalize
from planner.gpus.spec import GpuSpec, MigProfile
from planner.units import GiB, parse_size

__all__ = [
    "InstanceType",
    "UnknownInstanceTypeError",
    "all_gpus",
    "gpu_for_instance_type",
    "gpu_for_memory",
    "gpu_for_mig_profile",
    "gpu_from_memory",
    "instance_types",
    "lookup_gpu",
]


class UnknownInstanceTypeError(UnknownGPUError):
    kind = "instance type"


# "3g.40gb", "mig-3g.40gb", "nvidia.com/mig-3g.40gb", "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
# "NVIDIA A100 80GB PCIe MIG 1g.10gb" (the CUDA device name inside an instance), "A100-80GB-MIG-3g.40gb".
_MIG = re2.compile(r"^(?:(?P<parent>.*?)[\s_\-/]*)?(?:nvidia\.com/)?(?:mig[\s_\-]*)?(?P<profile>\d+g\.\d+gb(?:\+me)?)$")
_SHARED_SUFFIX = "shared"  # GFD appends -SHARED to the product label when time-slicing is on
_AMBIGUITY_TOLERANCE = 0.15  # a memory hint must be within 15% of a candidate to pick it


def all_gpus() -> list[GpuSpec]:
    """Every catalog GPU, in catalog order (by vendor and generation)."""
    return list(load_catalog().gpus)


def instance_types() -> list[InstanceType]:
    """Every known cloud instance type with its GPU and GPU count."""
    return list(load_catalog().instances.values())


def lookup_gpu(name: str, *, memory_bytes: int | None = None) -> GpuSpec:
    """The catalog GPU for any of its names (see module doc). ``memory_bytes`` (per GPU, e.g. from
    ``nvidia.com/gpu.memory`` in MiB x 2**20) settles an ambiguous name such as ``A100``.
    """
    if not isinstance(name, str) or not name.strip():
        raise UnknownGPUError(str(name), [], hint="Give a GPU name, e.g. A100-80GB.")
    catalog = load_catalog()
    key = normalize(name)
    if key in catalog.by_key:
        return catalog.by_key[key]
    if key.endswith(_SHARED_SUFFIX) and key[: -len(_SHARED_SUFFIX)] in catalog.by_key:
        return catalog.by_key[key[: -len(_SHARED_SUFFIX)]]
    if key in catalog.ambiguous:
        return _disambiguate(name, catalog.ambiguous[key], memory_bytes)
    if instance_key(name) in catalog.instances:
        return catalog.by_name(catalog.instances[instance_key(name)].gpu)
    if _MIG.match(name.strip().lower()):
        return gpu_for_mig_profile(name)
    raise UnknownGPUError(
        name,
        _suggest(key),
        hint="Run `planner gpus` for the catalog, or plan for any card with --gpu-memory SIZE (79.15GiB).",
    )


def _disambiguate(name: str, candidates: list[str], memory_bytes: int | None) -> GpuSpec:
    catalog = load_catalog()
    specs = [catalog.by_name(c) for c in candidates]
    if memory_bytes:
        best = min(specs, key=lambda s: abs(s.memory_bytes - memory_bytes))
        if abs(best.memory_bytes - memory_bytes) <= _AMBIGUITY_TOLERANCE * best.memory_bytes:
            return best
    raise AmbiguousGPUError(
        name,
        candidates,
        hint=f"Name one of them (e.g. --gpu {candidates[-1]}), or give the card's memory with --gpu-memory.",
    )


def _suggest(key: str) -> list[str]:
    """Canonical names of the closest spellings (difflib), then of names containing the input."""
    catalog = load_catalog()
    close = difflib.get_close_matches(key, list(catalog.by_key), n=8, cutoff=0.6)
    found: list[str] = []
    for match in close:
        canonical = catalog.by_key[match].name
        if canonical not in found:
            found.append(canonical)
    if not found and len(key) >= 2:
        found = [g.name for g in catalog.gpus if key in normalize(g.name) or normalize(g.name) in key]
    return found[:3]


def gpu_for_instance_type(instance_type: str) -> tuple[GpuSpec, int]:
    """``p4de.24xlarge`` -> (A100-80GB, 8). Azure's ``Standard_`` prefix is optional."""
    catalog = load_catalog()
    key = instance_key(instance_type) if isinstance(instance_type, str) else ""
    entry = catalog.instances.get(key)
    if entry is None:
        close = difflib.get_close_matches(key, list(catalog.instances), n=3, cutoff=0.7)
        raise UnknownInstanceTypeError(
            str(instance_type),
            [catalog.instances[c].name for c in close],
            hint="Known: AWS p3/p4d/p4de/p5/p5e/p5en/p6/g4dn/g5/g6/g6e, GCP a2/a3/a4/g2, Azure NC/ND/NV.",
        )
    return catalog.by_name(entry.gpu), entry.count


def gpu_for_mig_profile(resource_or_profile: str, *, gpu: str | None = None) -> GpuSpec:
    """A MIG instance as a GPU of its own: ``nvidia.com/mig-3g.40gb`` on an A100-80GB becomes a
    :class:`GpuSpec` named ``A100-80GB-MIG-3g.40gb`` with the instance's memory, its share of the
    bandwidth, and no MIG profiles of its own.

    The parent GPU comes from ``gpu`` or from the name itself (``NVIDIA-A100-SXM4-80GB-MIG-3g.40gb``).
    Without either, a profile that several GPUs offer is planned on the one with the least memory in
    that profile (the safe side), and the returned spec's ``notes`` say so.
    """
    text = resource_or_profile.strip().lower() if isinstance(resource_or_profile, str) else ""
    match = _MIG.match(text)
    if not match:
        raise UnknownGPUError(
            str(resource_or_profile),
            [],
            hint="A MIG profile looks like 3g.40gb, mig-3g.40gb or nvidia.com/mig-3g.40gb.",
        )
    profile_name = match.group("profile")
    parent_name = gpu or (match.group("parent") or "").strip(" -_/") or None
    catalog = load_catalog()
    if parent_name:
        return _mig_spec(lookup_gpu(parent_name), profile_name, note=None)
    owners = [g for g in catalog.gpus if any(p.name == profile_name for p in g.mig_profiles)]
    if not owners:
        known = sorted({p.name for g in catalog.gpus for p in g.mig_profiles})
        raise UnknownGPUError(
            resource_or_profile,
            difflib.get_close_matches(profile_name, known, n=3),
            hint="No catalog GPU offers this MIG profile.",
        )
    parent = min(owners, key=lambda g: _profile(g, profile_name).memory_bytes)
    note = None
    if len(owners) > 1:
        others = ", ".join(g.name for g in owners if g is not parent)
        note = (
            f"MIG profile {profile_name} also exists on {others}; planned with {parent.name}'s, "
            "the smallest. Name the GPU to be exact."
        )
    return _mig_spec(parent, profile_name, note=note)


def _profile(parent: GpuSpec, profile_name: str) -> MigProfile:
    for profile in parent.mig_profiles:
        if profile.name == profile_name:
            return profile
    raise UnknownGPUError(
        f"{parent.name} MIG {profile_name}",
        [p.name for p in parent.mig_profiles][:3],
        hint=f"{parent.name} offers: {', '.join(p.name for p in parent.mig_profiles) or 'no MIG profiles'}.",
    )


def _mig_spec(parent: GpuSpec, profile_name: str, *, note: str | None) -> GpuSpec:
    profile = _profile(parent, profile_name)
    whole = max(p.memory_bytes for p in parent.mig_profiles)
    # Memory bandwidth follows the memory slices (each slice owns its memory controllers).
    bandwidth = max(1, round(parent.bandwidth_bytes_per_s * profile.memory_bytes / whole))
    return GpuSpec(
        name=f"{parent.name}-MIG-{profile.name}",
        vendor=parent.vendor,
        memory_bytes=profile.memory_bytes,
        memory_source=f"MIG profile {profile.name} of {parent.name}: {profile.memory_source or 'catalog'}",
        bandwidth_bytes_per_s=bandwidth,
        architecture=parent.architecture,
        compute_capability=parent.compute_capability,
        form_factor=parent.form_factor,
        nvlink=False,  # NVLink P2P is not available between MIG instances
        nvswitch_multicast=False,
        fp8=parent.fp8,
        aliases=[f"nvidia.com/mig-{profile.name}"],
        mig_profiles=[],
        notes=note,
    )


def gpu_from_memory(memory: int | str, *, name: str | None = None) -> GpuSpec:
    """An ad-hoc GPU for ``--gpu-memory SIZE``: ``memory`` is the total CUDA reports (bytes, or a
    size such as ``79.15GiB`` / ``24G``). Memory bandwidth is unknown, so the spec borrows the
    bandwidth of the catalog card with the nearest memory (used only for throughput hints).
    """
    size = parse_size(memory)
    if size <= 0:
        raise PlannerInputError(f"--gpu-memory must be positive, got {memory!r}")
    if size > 16 * 1024 * GiB:
        raise PlannerInputError(f"--gpu-memory {memory!r} is larger than any GPU (16 TiB); give the per-GPU size")
    nearest = min(all_gpus(), key=lambda g: abs(g.memory_bytes - size))
    label = name or f"custom-{size / GiB:.2f}GiB"
    return GpuSpec(
        name=label,
        vendor=nearest.vendor,
        memory_bytes=size,
        memory_source=f"given ({memory}); not from the catalog",
        bandwidth_bytes_per_s=nearest.bandwidth_bytes_per_s,
        architecture="unknown",
        notes=f"ad-hoc GPU; bandwidth borrowed from {nearest.name} (nearest memory) for throughput hints",
    )


gpu_for_memory = gpu_from_memory
"""Alias used in the internal contracts (``gpu_for_memory(bytes)``)."""
