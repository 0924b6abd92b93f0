"""GpuSpec: one GPU model in the embedded catalog."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class MigProfile(BaseModel):
    """A MIG partition (``nvidia.com/mig-3g.40gb``) and the memory CUDA reports inside it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="profile as in the resource name, e.g. 3g.40gb")
    memory_bytes: int = Field(gt=0)
    compute_fraction: float = Field(gt=0, le=1, description="share of the SMs (g slices / 7)")
    memory_source: str | None = Field(
        default=None, description="where memory_bytes comes from (nvidia-smi mig -lgip, derived)"
    )


class GpuSpec(BaseModel):
    """A GPU as vLLM sees it: ``memory_bytes`` is the total memory CUDA reports
    (``torch.cuda.mem_get_info()[1]``), the figure vLLM multiplies by ``gpu_memory_utilization``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="canonical name, hyphenated: A100-80GB, H100-80GB, L40S, MI300X")
    vendor: Literal["nvidia", "amd"]
    memory_bytes: int = Field(gt=0)
    memory_source: str = Field(description="where memory_bytes comes from (a vLLM log, nvidia-smi, derived)")
    bandwidth_bytes_per_s: int = Field(gt=0)
    architecture: str = Field(description="ampere, hopper, ada, blackwell, volta, turing, cdna2, cdna3 ...")
    compute_capability: str | None = Field(default=None, description="CUDA SM version, e.g. 9.0")
    form_factor: str | None = Field(default=None, description="SXM, PCIe, NVL ... where memory is equal")
    nvlink: bool = False
    nvswitch_multicast: bool = Field(
        default=False, description="NVLink SHARP / NVLS (H100/H200/B200 HGX): NCCL reserves larger buffers"
    )
    fp8: bool = Field(default=False, description="native FP8 tensor cores (Ada, Hopper, Blackwell, CDNA3)")
    aliases: list[str] = Field(default=[])
    mig_profiles: list[MigProfile] = Field(default=[])
    notes: str | None = None

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / (1 << 30)
