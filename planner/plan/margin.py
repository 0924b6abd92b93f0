"""How wrong the planner may be about the KV memory vLLM will find, and the margin recommendations keep.

The KV memory is what is left of ``ceil(total x util)`` after weights, non-torch memory, the activation
peak and (from 0.20) CUDA graphs. The planner models each term; on the calibration data each term misses
by a measured amount (``planner/calibration/margin_fit.py`` measures it, docs/accuracy.md shows it). A
miss on the low side of a term means vLLM finds *less* KV memory than predicted — the dangerous
direction: a ``--max-model-len`` at the predicted capacity then fails vLLM's startup check. So the band
is built per term, in each direction, from the largest relative miss measured on that release's records:

* weights: exact (unquantized, loaded size known), quantized checkpoints (kernels pad and repack), or
  estimated from the architecture;
* activation peak (relative), non-torch memory (absolute), CUDA graphs (relative, where counted);
* rank asymmetry: vLLM sizes every rank with the minimum free memory over ranks
  (``get_kv_cache_configs``), and the planner predicts one rank per pipeline stage;
* tensor parallelism across nodes (issue 12 cause d): vLLM disables its custom all-reduce ("this process
  group spans across nodes") and NCCL runs over the network with buffers the single-node model does not
  have. The shipped evidence disagrees (one such startup has 0.86 GiB more non-KV memory, another none),
  so it is a margin, not a term: the largest miss measured on a multi-node record;
* NCCL's channel buffers at TP communicator creation (releases up to 0.10.1 with P2P between the GPUs,
  planner/memory/nontorch.py ``nccl_at_init_bytes``): one public startup measures them (0.7.2, TP=2 on A100),
  and NCCL sizes them by its channel count and a rank's peers, which follow the interconnect and TP; a node
  without P2P keeps them in host memory. So the band keeps the planned figure again on both sides;
* an unknown vLLM release: the spread of what the checked releases compute for the same flags;
* an MXFP4 MoE kernel that depends on the install (issue 12 cause c): up to 0.11 the OAI Triton kernels
  run only where the optional ``triton_kernels`` package was installed, and up to 0.11.0 FlashInfer was an
  optional extra, so the plan takes the default install's kernel and keeps the weights the heaviest
  other candidate would hold (planner/memory/mxfp4.py ``choose_backend``); 0 where the kernel is known;
* a multimodal model whose vision-encoder profile is not derived (planner/memory/encoder.py, KVP131): the
  estimated encoder peak, below;
* a warm torch.compile cache: a cold start compiles inside the profile run and Inductor's compile-time
  autotuning copies the embedding table (planner/memory/activation.py compile_example_bytes), which the
  plan counts (a new pod starts with an empty cache); with the cache on a persistent volume vLLM loads the
  compiled graphs instead and finds up to that much more KV memory (upper side only);
* the 0.01 GiB the log prints, so a band is never tighter than the evidence.

A release without calibration records gets the widest bounds measured on any release, and a release
measured on fewer than :data:`THIN_RELEASE_RECORDS` records at least those. With
``--kv-cache-memory-bytes`` vLLM does not profile: the KV memory is exactly the given figure, band 0.
"""

from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from planner.models.memo import IdentityMemo
from planner.models.spec import ModelSpec
from planner.plan.models import KvBand, MarginTerm, MemoryReport, Plan
from planner.units import GiB

MARGIN_VERSION = 1


class TermBounds(BaseModel):
    """Largest relative (or absolute) miss of each term in one direction, on one release's records.
    None: no record of that kind on that release (filled from the other releases, then from the
    term's other kinds, by :meth:`MarginModel.bounds`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weights_exact: float | None = Field(description="weights with an exactly known loaded size, relative")
    weights_quantized: float | None = Field(description="quantized checkpoints, relative")
    weights_estimated: float | None = Field(description="weights estimated from the architecture, relative")
    activation_dense: float | None = Field(description="activation peak of dense attention models, relative")
    activation_moe: float | None = Field(description="activation peak of MoE models (fused-MoE workspace)")
    activation_mla: float | None = Field(description="activation peak of MLA models (prefill workspaces)")
    activation_vision: float | None = Field(
        default=None, description="activation peak of multimodal models (the vision encoder's profile run)"
    )
    non_torch_bytes: int | None = Field(description="non-torch memory, absolute")
    cuda_graph: float | None = Field(description="CUDA-graph estimate, relative (where the release counts it)")
    unattributed_bytes: int | None = Field(
        default=None, description="non-weight miss of records that log no per-term breakdown, absolute"
    )

    def value(self, name: str) -> float:
        found = getattr(self, name)
        return 0.0 if found is None else float(found)


_SIBLINGS = {
    "weights": ("weights_exact", "weights_quantized", "weights_estimated"),
    "activation": ("activation_dense", "activation_moe", "activation_mla", "activation_vision"),
}


# A release row measured on fewer records than this is thin evidence: each of its bounds is at least the
# widest measured on any release. Held out of the fit one at a time, records of such rows fell outside the
# band that their row's remaining records gave (c019: the only 0.12 record that logs no breakdown carries
# that row's whole unattributed bound), while the rows of 5 or more records cover each of their records
# held out (tests/core/test_margin.py, docs/accuracy.md "Held-out coverage of the margin").
THIN_RELEASE_RECORDS = 5


def _fill(rows: list[TermBounds], own: TermBounds | None, thin: bool = False) -> TermBounds:
    """``own`` with every missing value taken from the widest release, then from the widest sibling;
    ``thin``: every value at least the widest release's."""
    fields = list(TermBounds.model_fields)
    widest: dict[str, float | None] = {}
    for name in fields:
        values = [getattr(row, name) for row in rows if getattr(row, name) is not None]
        widest[name] = max(values) if values else None
    filled: dict[str, float | None] = {}
    for name in fields:
        value = getattr(own, name) if own is not None else None
        if value is not None and thin and widest[name] is not None:
            value = max(value, widest[name])
        filled[name] = value if value is not None else widest[name]
    for siblings in _SIBLINGS.values():
        known = [v for v in (filled[n] for n in siblings) if v is not None]
        for name in siblings:
            if filled[name] is None:
                filled[name] = max(known) if known else None
    return TermBounds.model_validate(filled)


class ReleaseBounds(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    records: int
    short: TermBounds = Field(description="terms larger than predicted: vLLM finds less KV memory")
    over: TermBounds = Field(description="terms smaller than predicted: vLLM finds more KV memory")


class MarginModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    by_release: dict[str, ReleaseBounds] = Field(description="release-table row (its 'since') -> measured bounds")
    rank_spread_bytes: int = Field(
        description="TP > 1: how much less KV memory another rank of the same stage may have than the one "
        "planned (the layout of multi-rank records reproduced from rank 0's logged memory bounds it)"
    )
    print_precision_bytes: int = Field(description="vLLM prints the KV memory to 0.01 GiB")
    tp_across_nodes_bytes: int = Field(
        default=0,
        description="TP group across nodes: the most KV memory a multi-node record found below the "
        "single-node prediction",
    )

    def bounds(self, release_since: str) -> tuple[ReleaseBounds, bool]:
        """(bounds, measured): the release's own where it has records of that kind, else the widest
        over every measured release."""
        # A per-release invariant of a frozen model: every plan asks it, filling costs two validations.
        return _BOUNDS.get(self, release_since, lambda: self._bounds(release_since))

    def _bounds(self, release_since: str) -> tuple[ReleaseBounds, bool]:
        own = self.by_release.get(release_since)
        rows = list(self.by_release.values())
        thin = own is not None and own.records < THIN_RELEASE_RECORDS
        short = _fill([r.short for r in rows], own.short if own else None, thin)
        over = _fill([r.over for r in rows], own.over if own else None, thin)
        return ReleaseBounds(records=own.records if own else 0, short=short, over=over), own is not None


_BOUNDS: IdentityMemo[tuple[ReleaseBounds, bool]] = IdentityMemo(size=256)


def activation_kind(model: ModelSpec) -> str:
    """Which activation error applies: a multimodal model's encoder profile, MLA prefill workspaces, fused-MoE
    workspaces, or dense layers. Multimodal models are a kind of their own because the encoder dominates
    their profile run: a miss there says nothing about a text model's forward, and the reverse."""
    if model.vision is not None:
        return "vision"
    if model.mla is not None:
        return "mla"
    return "moe" if model.moe is not None else "dense"


def kv_band(
    memory: MemoryReport,
    *,
    release_since: str,
    tensor_parallel_size: int,
    quantized: bool,
    activation_kind: str,
    version_spread_bytes: int | None,
    tp_across_nodes: bool = False,
    mxfp4_spread_bytes: int = 0,
    model: MarginModel | None = None,
    encoder_estimate_bytes: int = 0,
    cold_compile_bytes: int = 0,
    nccl_at_init_bytes: int = 0,
) -> KvBand:
    """The band around ``memory.kv_cache_bytes``. ``version_spread_bytes`` is how much less KV memory the
    checked releases compute for the same flags when the release is unknown (None: release known)."""
    kv = memory.kv_cache_bytes
    terms, measured = band_terms(
        weights_bytes=memory.weights_bytes,
        weights_estimated=memory.weights_estimated,
        activation_peak_bytes=memory.activation_peak_bytes,
        cuda_graph_bytes=memory.cuda_graph_bytes,
        cuda_graph_counted=memory.cuda_graph_counted,
        kv_cache_memory_bytes_given=memory.kv_cache_memory_bytes_given,
        release_since=release_since,
        tensor_parallel_size=tensor_parallel_size,
        quantized=quantized,
        activation_kind=activation_kind,
        version_spread_bytes=version_spread_bytes,
        tp_across_nodes=tp_across_nodes,
        mxfp4_spread_bytes=mxfp4_spread_bytes,
        model=model,
        encoder_estimate_bytes=encoder_estimate_bytes,
        cold_compile_bytes=cold_compile_bytes,
        nccl_at_init_bytes=nccl_at_init_bytes,
    )
    down = sum(low for _, low, _, _ in terms)
    up = sum(high for _, _, high, _ in terms)
    return KvBand(
        kv_cache_bytes=kv,
        low_bytes=max(0, kv - down),
        high_bytes=kv + up,
        release_measured=measured,
        terms=[MarginTerm(name=name, low_bytes=low, high_bytes=high, basis=basis) for name, low, high, basis in terms],
    )


def band_terms(
    *,
    weights_bytes: int,
    weights_estimated: bool,
    activation_peak_bytes: int,
    cuda_graph_bytes: int,
    cuda_graph_counted: bool,
    kv_cache_memory_bytes_given: bool,
    release_since: str,
    tensor_parallel_size: int,
    quantized: bool,
    activation_kind: str,
    version_spread_bytes: int | None,
    tp_across_nodes: bool = False,
    mxfp4_spread_bytes: int = 0,
    model: MarginModel | None = None,
    encoder_estimate_bytes: int = 0,
    cold_compile_bytes: int = 0,
    nccl_at_init_bytes: int = 0,
) -> tuple[list[tuple[str, int, int, str]], bool]:
    """The terms of :func:`kv_band` as (name, low bytes, high bytes, basis), and whether the release has
    records of its own: the figures without the report (a batched sweep sums them, planner/plan/sweep.py)."""
    if kv_cache_memory_bytes_given:
        return [("kv_cache_memory_bytes", 0, 0, "given, not profiled")], True
    margin = model or default_margin()
    bounds, measured = margin.bounds(release_since)
    short, over = bounds.short, bounds.over
    if weights_estimated:
        kind = "estimated"
    elif quantized:
        kind = "quantized"
    else:
        kind = "exact"
    w_short, w_over = short.value(f"weights_{kind}"), over.value(f"weights_{kind}")
    where = f"vLLM {release_since} records" if measured else "widest over measured releases"
    a_short, a_over = short.value(f"activation_{activation_kind}"), over.value(f"activation_{activation_kind}")
    terms = [
        ("weights", int(w_short * weights_bytes), int(w_over * weights_bytes), f"{kind} weights, {where}"),
        (
            "activation_peak",
            int(a_short * activation_peak_bytes),
            int(a_over * activation_peak_bytes),
            f"{activation_kind} models, {where}",
        ),
        ("non_torch", int(short.value("non_torch_bytes")), int(over.value("non_torch_bytes")), where),
        (
            "unattributed",
            int(short.value("unattributed_bytes")),
            int(over.value("unattributed_bytes")),
            "records without a per-term breakdown",
        ),
    ]
    if cuda_graph_counted:
        terms.append(
            (
                "cuda_graph",
                int(short.value("cuda_graph") * cuda_graph_bytes),
                int(over.value("cuda_graph") * cuda_graph_bytes),
                "vLLM's graph estimate vs the planner's, every record that logs it",
            )
        )
    if tensor_parallel_size > 1:
        terms.append(
            ("rank_asymmetry", margin.rank_spread_bytes, 0, "vLLM sizes every rank with the minimum over ranks")
        )
    if tp_across_nodes:
        terms.append(
            (
                "tp_across_nodes",
                margin.tp_across_nodes_bytes,
                0,
                "tensor parallelism across nodes: no custom all-reduce, NCCL over the network "
                "(largest miss of the multi-node records)",
            )
        )
    if nccl_at_init_bytes > 0:
        terms.append(
            (
                "nccl_at_init",
                nccl_at_init_bytes,
                nccl_at_init_bytes,
                "NCCL channel buffers of the TP communicators, connected at their creation: one startup "
                "measures them, their size follows the interconnect and TP (none without GPU P2P)",
            )
        )
    if mxfp4_spread_bytes > 0:
        terms.append(
            (
                "mxfp4_kernel",
                mxfp4_spread_bytes,
                0,
                "the MXFP4 MoE kernel depends on the install's extras: the heaviest candidate's weights",
            )
        )
    if encoder_estimate_bytes > 0:
        terms.append(
            (
                "vision_encoder",
                encoder_estimate_bytes,
                0,
                "the vision encoder's profile run is not derived for this model or engine (KVP131): its estimated peak",
            )
        )
    if cold_compile_bytes > 0:
        terms.append(
            (
                "compile_cache",
                0,
                cold_compile_bytes,
                "planned as a cold start: a warm torch.compile cache skips Inductor's compile-time "
                "autotuning and its copy of the embedding table",
            )
        )
    if version_spread_bytes is not None:
        terms.append(
            (
                "unknown_release",
                max(0, version_spread_bytes),
                0,
                "no vLLM version given: the least KV memory any checked release computes",
            )
        )
    terms.append(
        (
            "print_precision",
            margin.print_precision_bytes,
            margin.print_precision_bytes,
            "vLLM prints the KV memory to 0.01 GiB",
        )
    )
    return terms, measured


# The constants that are not measured per release; ``by_release`` is filled by the fit.
UNFITTED_MARGIN = MarginModel(
    by_release={},
    rank_spread_bytes=int(0.02 * GiB),
    print_precision_bytes=int(0.01 * GiB),
)


@lru_cache(maxsize=1)
def default_margin() -> MarginModel:
    """The margin measured on the shipped calibration data: ``planner/data/margin.json``, written by
    ``python scripts/fit_margin.py`` (a test keeps it equal to a fresh measurement)."""
    text = (resources.files("planner") / "data" / "margin.json").read_text()
    return MarginModel.model_validate_json(text)


def low_end_blocks(plan: Plan) -> int:
    """The KV blocks vLLM makes at the low end of ``plan``'s band: what a limit may count on (the nominal
    count without a band, or with a given ``--kv-cache-memory-bytes``, which has none)."""
    band = plan.margin
    if band is None or band.num_gpu_blocks_low is None:
        return plan.kv_cache.num_gpu_blocks
    return min(plan.kv_cache.num_gpu_blocks, band.num_gpu_blocks_low)


def fits_at_low_end(plan: Plan) -> bool:
    """vLLM's startup check passes for ``plan``'s context at the low end of its band, not only as predicted."""
    band = plan.margin
    if not plan.fits:
        return False
    return band is None or band.max_model_len_fits_low is None or band.max_model_len_fits_low


def terms_error_bytes(profiled: Plan | None) -> int:
    """How much more the non-KV terms (weights, activations, CUDA graphs, ...) may take than ``profiled``
    plans: its band downwards. With profiling vLLM gives that memory up from the KV cache; with a pinned
    ``--kv-cache-memory-bytes`` it lands on the pod's footprint instead. 0 without a band."""
    band = profiled.margin if profiled is not None else None
    return band.down_bytes if band is not None else 0
