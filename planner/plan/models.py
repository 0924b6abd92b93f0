"""The Plan: what vLLM will compute at startup for one engine, and the safe limits.

This is the JSON contract of ``planner recommend --output json`` (see DESIGN.md); the webhook,
exporter, retuner, simulator and probe all consume it. Memory figures are per GPU.
"""

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from planner.findings import Finding
from planner.plan.offload import OffloadReport
from planner.plan.speculative import DrafterCost
from planner.units import GiB, cdiv

if TYPE_CHECKING:
    from planner.workload.distribution import IntArray

GroupKind = Literal["full", "sliding_window", "chunked_local", "mamba"]


class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelReport(_Report):
    id: str
    architecture: str
    model_type: str | None = None
    checkpoint_bytes: int | None = None
    parameters: int | None = None
    dtype: str
    quantization: str | None = None
    attention: str = Field(description="mha | gqa | mqa | mla, plus +sliding/+chunked/+mamba for hybrids")
    num_layers: int
    max_position_embeddings: int | None = None
    derived_max_model_len: int
    source: str | None = None


class GpuReport(_Report):
    name: str
    memory_bytes: int
    count: int = Field(description="GPUs per engine: tensor x pipeline parallel")
    bandwidth_bytes_per_s: int | None = None
    data_parallel_size: int = 1


class MemoryReport(_Report):
    """Per-GPU budget of the limiting rank: ``kv = budget - weights - non_torch - activation - graphs``."""

    total_bytes: int
    gpu_memory_utilization: float
    budget_bytes: int = Field(description="ceil(total * gpu_memory_utilization)")
    weights_bytes: int
    weights_estimated: bool
    activation_peak_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int = Field(description="subtracted only where the release counts CUDA graphs")
    cuda_graph_counted: bool
    kv_cache_bytes: int
    kv_cache_memory_bytes_given: bool = False
    limiting_rank: str = Field(default="tp0/pp0", description="the rank with the least KV memory")

    @property
    def given_kv_overflows(self) -> bool:
        """:func:`kv_past_card` for a given ``--kv-cache-memory-bytes``."""
        return self.kv_cache_memory_bytes_given and kv_past_card(
            self.weights_bytes, self.non_torch_bytes, self.kv_cache_bytes, self.total_bytes
        )


def kv_past_card(weights_bytes: int, non_torch_bytes: int, kv_bytes: int, card_bytes: int) -> bool:
    """A KV cache of ``kv_bytes`` beside the weights and the non-PyTorch memory is more than the card has.

    With ``--kv-cache-memory-bytes`` vLLM takes the given size without profiling (v1/worker/gpu_worker.py
    determine_available_memory) and allocates it after loading the weights: past the card's memory that is
    CUDA out of memory at startup. Only what is certainly resident is counted (the activation peak and CUDA
    graphs come on top). The sweeps' numpy form is in planner/plan/vectorized.py."""
    return weights_bytes + non_torch_bytes + kv_bytes > card_bytes


class KvGroupReport(_Report):
    """One KV-cache group (vLLM ``KVCacheGroupSpec``). All groups share one block pool."""

    kind: GroupKind
    num_layers: int = Field(description="layers in the group on the limiting rank, padding included")
    page_bytes: int = Field(
        description="bytes of one block for one layer (vLLM page_size_bytes); a packed group (DeepSeek-V4): "
        "its layers' pages together"
    )
    block_size: int
    window: int | None = Field(default=None, description="sliding window / attention chunk, tokens")
    tokens_cap: int | None = Field(
        default=None,
        description="tokens one request keeps in this group at most (window + in-flight); None = all",
    )
    blocks_per_sequence_const: int | None = Field(
        default=None, description="mamba/linear-attention groups: blocks per request, independent of length"
    )

    def blocks_for(self, tokens: int) -> int:
        """Blocks a request of ``tokens`` total tokens holds in this group (vLLM max_memory_usage/page)."""
        if self.blocks_per_sequence_const is not None:
            return self.blocks_per_sequence_const
        if self.kind == "sliding_window" and self.tokens_cap is not None:
            return cdiv(min(self.tokens_cap, tokens), self.block_size) + 1
        if self.tokens_cap is not None:
            return cdiv(min(self.tokens_cap, tokens), self.block_size)
        return cdiv(tokens, self.block_size)

    def blocks_for_each(self, tokens: "IntArray") -> "IntArray":
        """:meth:`blocks_for` of every entry of ``tokens`` (non-negative numpy integers), in one pass: the
        same integer arithmetic, for the workload model's thousands of lengths."""
        if self.blocks_per_sequence_const is not None:
            return tokens * 0 + self.blocks_per_sequence_const
        held = tokens if self.tokens_cap is None else tokens.clip(None, self.tokens_cap)
        blocks: IntArray = -(held // -self.block_size)
        return blocks + 1 if self.kind == "sliding_window" and self.tokens_cap is not None else blocks


class KvCacheReport(_Report):
    bytes_per_token: int = Field(description="K+V bytes per token summed over KV layers, whole model, TP=1")
    state_bytes_per_sequence: int = Field(description="Mamba/linear-attention state per sequence, TP=1")
    kv_cache_dtype: str = Field(description="the dtype in force after resolving auto")
    block_size: int
    bytes_per_block: int = Field(description="bytes of one block id across all layers of a group, per GPU")
    num_gpu_blocks: int
    tokens: int = Field(description='as vLLM logs "GPU KV cache size: N tokens"')
    max_concurrency: float = Field(description='as vLLM logs "Maximum concurrency for L tokens per request"')
    max_model_len: int = Field(description="the L in force (given, derived, or auto-fit)")
    blocks_per_request: int = Field(description="blocks one request of max_model_len tokens needs")
    estimated_max_model_len: int = Field(description="longest context one sequence can have (vLLM's search)")
    groups: list[KvGroupReport]

    def blocks_for_sequence(self, tokens: int) -> int:
        """Blocks one sequence of ``tokens`` tokens holds across all groups."""
        return sum(group.blocks_for(tokens) for group in self.groups)

    def blocks_for_sequences(self, tokens: "IntArray") -> "IntArray":
        """:meth:`blocks_for_sequence` of every entry of ``tokens`` (non-negative numpy integers)."""
        total: IntArray = tokens * 0
        for group in self.groups:
            total = total + group.blocks_for_each(tokens)
        return total

    @property
    def usable_blocks(self) -> int:
        """Blocks requests can use: vLLM's BlockPool keeps block 0 as the null block."""
        return max(0, self.num_gpu_blocks - 1)


class MarginTerm(_Report):
    name: str
    low_bytes: int = Field(description="how much less KV memory vLLM may find because of this term")
    high_bytes: int = Field(description="how much more")
    basis: str


class KvBand(_Report):
    """The predicted KV memory per GPU (limiting rank) and the range vLLM's figure falls in when the
    prediction errs as much as it did on the calibration data."""

    kv_cache_bytes: int
    low_bytes: int
    high_bytes: int
    release_measured: bool = Field(description="the release has calibration records of its own")
    terms: list[MarginTerm]
    num_gpu_blocks_low: int | None = Field(default=None, description="blocks vLLM would make of low_bytes")
    max_model_len_fits_low: bool | None = Field(default=None, description="the context still fits at low_bytes")
    estimated_max_model_len_low: int | None = Field(
        default=None, description="the longest context one sequence can have at low_bytes"
    )

    @property
    def down_bytes(self) -> int:
        return self.kv_cache_bytes - self.low_bytes

    @property
    def up_bytes(self) -> int:
        return self.high_bytes - self.kv_cache_bytes

    def describe(self) -> str:
        """``54.99 GiB +0.20/-0.40`` (per GPU)."""
        return f"{self.kv_cache_bytes / GiB:.2f} GiB +{self.up_bytes / GiB:.2f}/-{self.down_bytes / GiB:.2f}"


class Recommendation(_Report):
    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    vllm_args: list[str]
    basis: str = Field(description="how max_num_seqs was chosen: worst-case | workload")
    notes: list[str] = Field(default=[], description="the trade-off behind max_num_seqs")


class Alternative(_Report):
    change: str
    args: list[str] = Field(default=[], description="the vLLM flags this change sets (none for a GPU)")
    vllm_args: list[str]
    fits: bool
    max_model_len: int | None = None
    max_concurrency: float | None = None


class SharingReport(_Report):
    """A plan on a shared GPU (time-slicing, MPS, HAMi, fractions, DRA): what this pod may use and what
    it leaves the card's other tenants (per GPU)."""

    mechanism: str
    source: str
    card_bytes: int = Field(description="memory of the shared card (or MIG slice)")
    visible_bytes: int = Field(description="the total vLLM sees inside the container")
    budget_bytes: int | None = Field(description="memory this pod can count on; None when not known")
    isolated: bool = Field(description="an enforced limit keeps co-tenants out of this pod's memory")
    replicas: int | None = None
    demand_bytes: int = Field(description="what this pod takes from the card as planned (budget or sum of terms)")
    co_tenant_bytes: int = Field(description="card memory left for the other pods on the card")
    over_budget: bool = Field(description="the pod would take more than its share")
    max_gpu_memory_utilization: float | None = Field(
        description="the largest --gpu-memory-utilization that passes vLLM's startup check within the share"
    )
    recommended_kv_cache_memory_bytes: int | None = None
    recommended_gpu_memory_utilization: float | None = None
    explanation: str


class BudgetAdvice(_Report):
    """The answer of :func:`smallest_budget` (``budget`` in ``planner recommend --target-seqs`` JSON)."""

    target_seqs: int
    max_model_len: int
    headroom: float
    basis: Literal["worst-case", "workload"]
    target_risk: float | None = None
    risk: float | None = Field(default=None, description="overflow probability at target_seqs (workload basis)")
    blocks_per_sequence: int = Field(description="blocks one sequence of max_model_len holds (all groups)")
    num_gpu_blocks: int = Field(description="the smallest block count that holds target_seqs")
    bytes_per_block: int
    kv_cache_memory_bytes: int | None = Field(description="blocks x bytes per block; None before vLLM 0.10.2")
    gpu_memory_utilization: float | None = Field(
        description="the smallest utilization (2 digits) whose plan has those blocks; None if even 1.0 is short"
    )
    vllm_args: list[str]
    pod_bytes: int = Field(description="what the pod then takes per GPU (all terms + context)")
    left_for_co_tenants_bytes: int = Field(description="card memory the pod leaves free, per GPU")
    fits_on_gpu: bool = Field(description="the budget fits the GPU at some --gpu-memory-utilization <= 1")


class Plan(_Report):
    model: ModelReport
    gpu: GpuReport
    vllm_version: str
    memory: MemoryReport
    kv_cache: KvCacheReport
    fits: bool = Field(description="vLLM's own startup fit check passes")
    fit_error: str | None = Field(default=None, description="the error vLLM would raise, verbatim")
    recommendation: Recommendation | None = None
    alternatives: list[Alternative] = Field(default=[])
    sharing: SharingReport | None = Field(default=None, description="set when the GPU is shared")
    speculative: DrafterCost | None = Field(default=None, description="the drafter's cost (--speculative-config)")
    offload: OffloadReport | None = Field(default=None, description="the CPU tier of the KV cache, when offloading")
    budget: BudgetAdvice | None = Field(default=None, description="set by --target-seqs: the smallest KV budget")
    margin: KvBand | None = Field(
        default=None,
        description="the KV memory band the planner's measured error allows (planner/plan/margin.py); "
        "the recommendation fits at its low end",
    )
    findings: list[Finding] = Field(
        default=[], description="typed notes: code, severity, message and fix (see planner.findings)"
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def warnings(self) -> tuple[str, ...]:
        """The findings as the strings of DESIGN's ``"warnings": [str, ...]`` (``KVPnnn text``).

        A tuple, so that appending to it (a note that would be lost) fails: add to ``findings`` instead.
        """
        return tuple(finding.message for finding in self.findings)
