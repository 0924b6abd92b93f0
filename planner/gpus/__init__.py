"""GPU catalog: what CUDA reports for each card, and every name clusters give it."""

from planner.gpus.catalog import (
    all_gpus,
    gpu_for_instance_type,
    gpu_for_memory,
    gpu_for_mig_profile,
    gpu_from_memory,
    instance_types,
    lookup_gpu,
)
from planner.gpus.spec import GpuSpec, MigProfile

__all__ = [
    "GpuSpec",
    "MigProfile",
    "all_gpus",
    "gpu_for_instance_type",
    "gpu_for_memory",
    "gpu_for_mig_profile",
    "gpu_from_memory",
    "instance_types",
    "lookup_gpu",
]
