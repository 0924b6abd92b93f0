"""Safe limits from a plan, and what would make a plan fit when it does not.

Every limit emitted here holds at the low end of its own plan's KV band (:mod:`planner.plan.margin`): the
KV memory vLLM finds when the prediction errs as much as it did on the calibration data, with the user's
``headroom`` of the blocks kept free. "Its own plan" is the plan of the flags emitted: a shorter context
or another ``--max-num-seqs`` changes what vLLM profiles (V0's profile batch is the context up to 32K;
the activation peak, the sampler and the CUDA-graph capture sizes follow ``max_num_seqs``), so the
limits are planned again with those flags (:func:`settle`) and stepped down until they hold there.

* ``--max-model-len``: the context in force when it fits at the low end and one sequence of it keeps the
  headroom free; otherwise the longest that does (vLLM's own estimate at the low end, then the blocks one
  sequence may hold), rounded down to a multiple of 1,024 tokens (of the block size below 4k).
* ``--max-num-seqs``: with a workload profile, the risk-bounded concurrency of :mod:`planner.workload`;
  without one, the worst case — every sequence at the full context — keeping ``headroom`` of the usable
  blocks free; never above what vLLM would run (the release's default or the given count) nor above
  ``--max-num-batched-tokens`` (every release's SchedulerConfig refuses ``max_num_batched_tokens <
  max_num_seqs``: vllm/config.py 0.6.4, vllm/config/scheduler.py 0.10.1-0.33.0).
* alternatives when it does not fit, or fits only nominally (no safe limits at the low end): a shorter
  context, an fp8 KV cache, a higher utilization, more GPUs by tensor parallelism, a bigger GPU — each
  with limits settled the same way; an option fits only when they exist.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from planner.errors import KvPlannerError, PlannerInputError
from planner.findings import Code, Finding
from planner.gpus.spec import GpuSpec
from planner.models.spec import ModelSpec
from planner.plan.build import Prediction
from planner.plan.models import Alternative, KvCacheReport, Plan, Recommendation
from planner.units import GiB
from planner.vllm.args import ServingArgs
from planner.vllm.defaults import ResolvedArgs

PlanFn = Callable[[ModelSpec, GpuSpec, ServingArgs], Plan]


def check_headroom(headroom: float) -> None:
    """Raise :class:`PlannerInputError` unless ``0 <= headroom < 1`` (the share of blocks kept free)."""
    if not 0 <= headroom < 1:
        raise PlannerInputError(f"headroom must be in [0, 1), got {headroom}")


def round_context(tokens: int, block_size: int) -> int:
    """A friendly context length at or below ``tokens``."""
    if tokens >= 4096:
        return tokens // 1024 * 1024
    return max(block_size, tokens // block_size * block_size) if tokens >= block_size else tokens


def nominal_context(estimated: int, blocks: int, block_size: int) -> int | None:
    """:attr:`Candidate.nominal_context` from a plan's figures: vLLM's own estimate of the longest context
    (``estimated``), rounded; None when there is no block or no estimate."""
    return round_context(estimated, block_size) if estimated > 0 and blocks > 0 else None


def worst_case_max_num_seqs(kv: KvCacheReport, headroom: float) -> int:
    """Sequences that fit with every one at ``max_model_len`` and ``headroom`` of the blocks kept free."""
    usable = kv.usable_blocks * (1.0 - headroom)
    return int(usable // max(1, kv.blocks_per_request))


def safe_cache(plan: Plan) -> KvCacheReport:
    """The plan's KV cache at the low end of its band: the blocks recommendations may count on."""
    band = plan.margin
    if band is None or band.num_gpu_blocks_low is None:
        return plan.kv_cache
    return plan.kv_cache.model_copy(
        update={"num_gpu_blocks": min(plan.kv_cache.num_gpu_blocks, band.num_gpu_blocks_low)}
    )


def safe_max_model_len(plan: Plan) -> int | None:
    """The context to recommend: the one in force when it fits at the low end of the band, else the
    longest that does (rounded), None when nothing fits."""
    kv, band = plan.kv_cache, plan.margin
    fits_low = plan.fits if band is None or band.max_model_len_fits_low is None else band.max_model_len_fits_low
    longest = kv.estimated_max_model_len
    if band is not None and band.estimated_max_model_len_low is not None:
        longest = min(longest, band.estimated_max_model_len_low)
    return safe_context(
        fits=plan.fits,
        fits_low=fits_low,
        max_model_len=kv.max_model_len,
        longest=longest,
        safe_blocks=safe_cache(plan).num_gpu_blocks,
        block_size=kv.block_size,
    )


def safe_context(
    *, fits: bool, fits_low: bool, max_model_len: int, longest: int, safe_blocks: int, block_size: int
) -> int | None:
    """:func:`safe_max_model_len` from the figures it reads (``longest``: the longest context at the low end
    of the band, ``safe_blocks``: the blocks there)."""
    if fits and fits_low:
        return max_model_len
    if longest > 0 and safe_blocks > 0:
        return min(max_model_len, round_context(longest, block_size))
    return None


def safe_max_num_seqs(plan: Plan, max_len: int, headroom: float) -> int:
    """Worst case at the low end of the band: every sequence at ``max_len``, ``headroom`` kept free."""
    kv = safe_cache(plan)
    return worst_case_seqs(kv.num_gpu_blocks, kv.blocks_for_sequence(max_len), headroom)


def worst_case_seqs(blocks: int, blocks_per_sequence: int, headroom: float) -> int:
    """Sequences of ``blocks_per_sequence`` blocks each in ``blocks`` (one is vLLM's null block), ``headroom``
    of them kept free."""
    usable = max(0, blocks - 1)
    return int(usable * (1.0 - headroom) // max(1, blocks_per_sequence))


def vllm_args_for(
    args: ServingArgs, max_model_len: int, max_num_seqs: int | None, utilization: float, kv_cache_dtype: str
) -> list[str]:
    """The flags to paste: the recommended limits, plus every sizing flag the plan was computed with
    (pasting the limits without e.g. ``--enforce-eager`` or ``--quantization`` would describe another
    deployment, which may not fit). ``max_num_seqs`` None: no ``--max-num-seqs`` (an option that does not
    fit has no safe count)."""
    out = ["--max-model-len", str(max_model_len)]
    if max_num_seqs is not None:
        out += ["--max-num-seqs", str(max_num_seqs)]
    out += ["--gpu-memory-utilization", f"{utilization:g}"]
    if kv_cache_dtype != "auto":
        out += ["--kv-cache-dtype", kv_cache_dtype]
    numbers: list[tuple[str, int | float | None, int | float | None]] = [
        ("--tensor-parallel-size", args.tensor_parallel_size, 1),
        ("--pipeline-parallel-size", args.pipeline_parallel_size, 1),
        ("--data-parallel-size", args.data_parallel_size, 1),
        ("--decode-context-parallel-size", args.decode_context_parallel_size, 1),
        ("--max-num-batched-tokens", args.max_num_batched_tokens, None),
        ("--block-size", args.block_size, None),
        ("--kv-cache-memory-bytes", args.kv_cache_memory_bytes, None),
        ("--num-gpu-blocks-override", args.num_gpu_blocks_override, None),
        ("--cpu-offload-gb", args.cpu_offload_gb, 0.0),
    ]
    out += [
        item
        for flag, value, default in numbers
        if value is not None and value != default
        for item in (flag, f"{value:g}" if isinstance(value, float) else str(value))
    ]
    if args.dtype != "auto":
        out += ["--dtype", args.dtype]
    if args.quantization:
        out += ["--quantization", args.quantization]
    if args.moe_backend and args.moe_backend != "auto":
        out += ["--moe-backend", args.moe_backend]  # the MXFP4 kernel, so the experts' padding, follows it
    switches = [
        ("--enforce-eager", args.enforce_eager),
        ("--enable-expert-parallel", args.enable_expert_parallel),
        ("--disable-hybrid-kv-cache-manager", args.disable_hybrid_kv_cache_manager),
    ]
    out += [flag for flag, on in switches if on]
    if args.enable_prefix_caching is not None:
        out.append("--enable-prefix-caching" if args.enable_prefix_caching else "--no-enable-prefix-caching")
    if args.enable_lora:
        out += ["--enable-lora", "--max-loras", str(args.max_loras), "--max-lora-rank", str(args.max_lora_rank)]
    return out


def seqs_cap(resolved: ResolvedArgs) -> int:
    """The most sequences the flags may set: what vLLM would run (the given count, or the release's default,
    which vLLM already lowers to the batch's token budget) and never more than ``--max-num-batched-tokens``:
    vLLM refuses ``max_num_batched_tokens < max_num_seqs`` at startup in every checked release (vllm/config.py
    SchedulerConfig._verify_args in 0.6.4, vllm/config/scheduler.py in 0.10.1 to 0.33.0)."""
    return min(resolved.max_num_seqs, resolved.max_num_batched_tokens)


class Candidate(Protocol):
    """What the search for safe limits reads of one plan: :class:`PlanView` here, a sweep point in
    planner/plan/sweep.py (the same search, so the batched figures stay make_plan's)."""

    @property
    def fits(self) -> bool:
        """vLLM's startup check passes (as predicted)."""

    @property
    def context(self) -> int:
        """The ``--max-model-len`` in force."""

    @property
    def safe_len(self) -> int | None:
        """:func:`safe_context`: the context the low end of the band allows; None when none."""

    @property
    def safe_blocks(self) -> int:
        """The blocks at the low end of the band (:func:`safe_cache`)."""

    @property
    def block_size(self) -> int: ...

    @property
    def seqs_cap(self) -> int:
        """:func:`seqs_cap` of the flags planned."""

    @property
    def nominal_context(self) -> int | None:
        """The longest context vLLM's own estimate allows as predicted (rounded), None when no block."""

    def sequence_blocks(self, tokens: int) -> int: ...


C = TypeVar("C", bound=Candidate)
# Plans the same deployment with ``--max-model-len`` (and ``--max-num-seqs``, None: as given) set; the third
# argument is the plan these flags came from (a plan of the very same flags may be returned as is). None
# when vLLM refuses the flags.
Replan = Callable[[int, int | None, C], C | None]
R = TypeVar("R")
# A search for limits that asks for each plan it needs: it yields a Replan's arguments (the context, the
# count or None, the plan the flags came from), is sent that plan (None: vLLM refuses the flags), and returns
# its result. One driver plans one search (run_steps); the batched sweep answers a round of many at once.
Steps = Generator[tuple[int, int | None, C], C | None, R]


def run_steps(steps: Steps[C, R], replan: Replan[C]) -> R:
    """The result of ``steps`` with ``replan`` planning each request in turn."""
    answer: C | None = None
    started = False
    while True:
        try:  # (only the search's own end: a StopIteration out of replan must not pass for it)
            request = steps.send(answer) if started else next(steps)
        except StopIteration as done:
            result: R = done.value
            return result
        started = True
        answer = replan(*request)


def target_context(plan: Candidate, headroom: float) -> int | None:
    """The context to recommend from one plan: the one the band allows (:attr:`Candidate.safe_len`), shortened
    (and rounded) until one sequence of it keeps ``headroom`` of the blocks free at the low end of the band;
    None when not even that fits.

    Emitting one sequence that takes more than the headroom would break the headroom's one meaning (the
    share of the blocks kept free at the planned concurrency, DESIGN.md): the context gives way instead,
    and ``--headroom 0`` gives it back."""
    found = plan.safe_len
    if found is None:
        return None
    blocks = plan.safe_blocks
    if worst_case_seqs(blocks, plan.sequence_blocks(found), headroom) >= 1:
        return found
    low, high = 0, found - 1
    while low < high:  # the longest context one sequence of which keeps the headroom
        middle = (low + high + 1) // 2
        if worst_case_seqs(blocks, plan.sequence_blocks(middle), headroom) >= 1:
            low = middle
        else:
            high = middle - 1
    return round_context(low, plan.block_size) if low > 0 else None


def settle_context_steps(first: C, headroom: float) -> Steps[C, tuple[int, C] | None]:
    """The longest context, up to the one ``first`` plans, that holds at the low end of its own plan's band
    with one sequence keeping the headroom (:func:`target_context` of the plan made with it): (the context,
    its plan), None when none does.

    A context is checked by planning it: a shorter one can leave a different KV memory. V0 turns chunked
    prefill off at or below 32K tokens, so its profile batch becomes the context itself (vLLM #10517 on an
    RTX 3090: 20K and 35K start, 29K does not; an unknown release's spread holds V0's rows). So the search
    steps down to what each plan's band allows, halves the context when a band allows nothing, and when a
    shorter context left more memory than a longer one that failed, bisects between the two. Each plan is
    asked for (:data:`Steps`): :func:`settle_context` answers with a :data:`Replan`."""
    if first.fits and target_context(first, headroom) == first.context:
        return first.context, first

    def holds(plan: C, max_len: int) -> bool:
        return plan.fits and target_context(plan, headroom) == max_len

    failed, failed_blocks = first.context, first.safe_blocks  # the shortest context known not to hold
    candidate = _shorter(first, first.context, headroom) or _half(first.context, first.block_size)
    found: tuple[int, C] | None = None
    for _ in range(_VERIFY_STEPS):
        if candidate is None:
            return None
        plan = yield (candidate, None, first)
        if plan is None:
            return None
        if holds(plan, candidate):
            found = (candidate, plan)
            break
        grew = plan.safe_blocks > failed_blocks
        failed, failed_blocks = candidate, plan.safe_blocks
        step = _shorter(plan, candidate, headroom)
        if step is None and grew:
            step = _half(candidate, plan.block_size)  # a shorter context left more memory: shorter still may hold
        candidate = step
    if found is None:
        return None
    length, plan = found
    if plan.safe_blocks <= failed_blocks:
        return found  # the memory does not grow as the context shrinks: nothing longer holds
    for _ in range(_BISECT_STEPS):  # between the longest that holds and the shortest that does not
        middle = round_context((length + failed) // 2, plan.block_size)
        if not length < middle < failed:
            break
        tried = yield (middle, None, first)
        if tried is not None and holds(tried, middle):
            length, plan = middle, tried
        else:
            failed = middle
    return length, plan


def settle_context(first: C, replan: Replan[C], headroom: float) -> tuple[int, C] | None:
    """:func:`settle_context_steps` with ``replan`` planning each context."""
    return run_steps(settle_context_steps(first, headroom), replan)


def _shorter(plan: Candidate, max_len: int, headroom: float) -> int | None:
    """The next context to try below ``max_len`` (the context ``plan`` plans): what its band allows, else
    vLLM's own estimate as predicted; None when neither is shorter."""
    for found in (target_context(plan, headroom), plan.nominal_context):
        if found is not None and 0 < found < max_len:
            return found
    return None


def _half(max_len: int, block_size: int) -> int | None:
    found = round_context(max_len // 2, block_size)
    return found if 0 < found < max_len else None


@dataclass(frozen=True)
class Settled(Generic[C]):
    """Limits that hold: planned with their own flags, at the low end of that plan's band."""

    max_model_len: int
    max_num_seqs: int
    at: C
    """The plan of the context (with the deployment's own ``--max-num-seqs``): the figures shown with it."""
    emitted: C
    """The plan of the flags emitted, ``--max-num-seqs`` included."""


def settle_steps(
    first: C, headroom: float, limit: Callable[[C, int], int] | None = None
) -> Steps[C, Settled[C] | None]:
    """Safe ``--max-model-len`` and ``--max-num-seqs`` for the deployment ``first`` plans, or None.

    The context is :func:`settle_context`'s. The count is ``limit`` (a workload's risk-bounded count; default
    the worst case: every sequence at the full context, ``headroom`` of the blocks free) at the low end of
    the band, capped by :func:`seqs_cap`. Then the flags as emitted — ``--max-num-seqs`` set changes what
    vLLM profiles (activation peak, sampler, CUDA-graph capture sizes, the defaulted batch budget) — are
    planned again, and the count lowered until it holds at the low end of that plan's own band. Each plan
    is asked for (:data:`Steps`): :func:`settle` answers with a :data:`Replan`, the batched sweep answers
    many searches' requests at once (planner/plan/vectorized.py)."""
    found = yield from settle_context_steps(first, headroom)
    if found is None:
        return None
    max_len, at = found

    def allowed(plan: C) -> int:
        count = (
            worst_case_seqs(plan.safe_blocks, plan.sequence_blocks(max_len), headroom)
            if limit is None
            else limit(plan, max_len)
        )
        return min(count, plan.seqs_cap)

    seqs = allowed(at)
    for _ in range(_VERIFY_STEPS):
        if seqs < 1:
            return None
        emitted = yield (max_len, seqs, at)
        if emitted is None or not emitted.fits or emitted.safe_len != max_len:
            return None
        holds = allowed(emitted)
        if holds >= seqs:
            return Settled(max_len, seqs, at, emitted)
        seqs = holds
    return None


def settle(
    first: C, replan: Replan[C], headroom: float, limit: Callable[[C, int], int] | None = None
) -> Settled[C] | None:
    """:func:`settle_steps` with ``replan`` planning each request."""
    return run_steps(settle_steps(first, headroom, limit), replan)


def alternative_context(first: Candidate, settled: Settled[C] | None, headroom: float) -> int | None:
    """The shorter context to try an option with when it does not hold at its own: the one its limits settled
    on, else the one its band allows, else vLLM's own estimate as predicted (a shorter context can leave more
    KV memory: V0's profile batch); None when none is shorter."""
    for found in (
        settled.max_model_len if settled is not None else None,
        target_context(first, headroom),
        first.nominal_context,
    ):
        if found is not None and found < first.context:
            return found
    return None


@dataclass(frozen=True)
class PlanView:
    """A Plan with what its limits read: the prediction behind it (vLLM's resolved flags) and the flags."""

    plan: Plan
    prediction: Prediction
    args: ServingArgs

    @property
    def fits(self) -> bool:
        return self.plan.fits

    @property
    def context(self) -> int:
        return self.plan.kv_cache.max_model_len

    @property
    def safe_len(self) -> int | None:
        if self.plan.memory.given_kv_overflows:
            return None  # no context helps: the given cache itself does not fit on the card
        return safe_max_model_len(self.plan)

    @property
    def safe_blocks(self) -> int:
        return safe_cache(self.plan).num_gpu_blocks

    @property
    def block_size(self) -> int:
        return self.plan.kv_cache.block_size

    @property
    def seqs_cap(self) -> int:
        return seqs_cap(self.prediction.resolved)

    @property
    def nominal_context(self) -> int | None:
        kv = self.plan.kv_cache
        return nominal_context(kv.estimated_max_model_len, kv.num_gpu_blocks, kv.block_size)

    def sequence_blocks(self, tokens: int) -> int:
        return self.plan.kv_cache.blocks_for_sequence(tokens)


PredictFn = Callable[[ModelSpec, GpuSpec, ServingArgs], tuple[Plan, Prediction]]


@dataclass(frozen=True)
class Replanner:
    """One deployment (``args`` on ``gpu``) planned with other limits, each plan with its own band
    (``plan_fn``: :func:`planner.plan.build.plan_without_recommendation` with the caller's release and
    corrections). A :data:`Replan` for :func:`settle`."""

    model: ModelSpec
    gpu: GpuSpec
    args: ServingArgs
    plan_fn: PredictFn

    def first(self) -> PlanView | None:
        """The flags as given; None when vLLM refuses them."""
        return self._plan(self.args)

    def __call__(self, max_len: int, seqs: int | None, base: PlanView) -> PlanView | None:
        update: dict[str, int] = {"max_model_len": max_len}
        if seqs is not None:
            update["max_num_seqs"] = seqs
        flags = self.args.model_copy(update=update)
        if flags == base.args or (
            base.args.max_model_len is None
            and max_len == base.context
            and flags.model_copy(update={"max_model_len": None}) == base.args
        ):
            return base  # the same flags (the model's own context spelled out): the same plan
        return self._plan(flags)

    def _plan(self, flags: ServingArgs) -> PlanView | None:
        try:
            plan, prediction = self.plan_fn(self.model, self.gpu, flags)
        except KvPlannerError:
            return None
        return PlanView(plan, prediction, flags)


def recommendation(
    first: PlanView,
    replan: Replan[PlanView],
    *,
    headroom: float,
    limit: Callable[[PlanView, int], int] | None = None,
    basis: str = "worst-case",
) -> tuple[Recommendation, Settled[PlanView]] | None:
    """Safe limits for the deployment ``first`` plans (:func:`settle`), or None when none hold at the low end
    of the band (see the alternatives)."""
    settled = settle(first, replan, headroom, limit)
    if settled is None:
        return None
    args, at = first.args, settled.at.plan
    max_len, seqs = settled.max_model_len, settled.max_num_seqs
    utilization = at.memory.gpu_memory_utilization
    requested_dtype = args.kv_cache_dtype
    notes = []
    band_len = first.safe_len
    if band_len is not None and band_len > max_len and target_context(first, headroom) != band_len:
        notes.append(
            f"--max-model-len {max_len:,}: one sequence of {band_len:,} tokens would leave less than {headroom:.0%} "
            f"of the KV blocks free at the low end of the band (--headroom {headroom:g})"
        )
    return (
        Recommendation(
            max_model_len=max_len,
            max_num_seqs=seqs,
            gpu_memory_utilization=utilization,
            kv_cache_dtype=requested_dtype if requested_dtype != "auto" else at.kv_cache.kv_cache_dtype,
            vllm_args=vllm_args_for(args, max_len, seqs, utilization, requested_dtype),
            basis=basis,
            notes=notes,
        ),
        settled,
    )


def no_safe_limits(plan: Plan, headroom: float) -> Finding:
    """KVP115: the plan passes vLLM's startup check as predicted, but no limits hold at the low end of its band."""
    band, kv = plan.margin, plan.kv_cache
    low = f"{band.low_bytes / GiB:.2f} GiB of {band.kv_cache_bytes / GiB:.2f}" if band is not None else "?"
    return Finding.of(
        Code.NO_SAFE_LIMITS,
        f"no safe limits: vLLM's startup check passes as predicted, but if vLLM finds as little KV memory as the "
        f"planner's measured error allows ({low} GiB per GPU) it cannot hold one sequence of {kv.max_model_len:,} "
        f"tokens with {headroom:.0%} of the blocks free, nor a shorter context that would; see the alternatives",
    )


def verified_context(
    plan: Plan, max_len: int, args: ServingArgs, model: ModelSpec, gpu: GpuSpec, replan: PlanFn
) -> tuple[int | None, Plan]:
    """``max_len`` checked by planning it, stepping down until a context fits at the low end of its own band.

    A shorter context can leave less KV memory: V0 turns chunked prefill off at or below 32K tokens, so its
    profile batch becomes the context itself (vLLM #10517 on an RTX 3090: 20K and 35K start, 29K does not).
    Returns the context (None when none fits) and the plan made with it. (:func:`settle_context` does the
    same with the headroom kept by one sequence.)"""
    current = plan
    for _ in range(_VERIFY_STEPS):
        if max_len == current.kv_cache.max_model_len and current.fits:
            return max_len, current
        try:
            current = replan(model, gpu, args.model_copy(update={"max_model_len": max_len}))
        except KvPlannerError:
            return None, current
        found = safe_max_model_len(current)
        if found == max_len and current.fits:
            return max_len, current
        if found is None or found >= max_len:
            return None, current
        max_len = found
    return None, current


# Each step plans a shorter context (or a lower count); two suffice in V0 (past the 32K switch, then inside it).
_VERIFY_STEPS = 6
# Bisecting a context between one that holds and one that does not: 2^8 steps of the rounding (1,024 tokens).
_BISECT_STEPS = 8

Plans = Callable[[GpuSpec, ServingArgs], Replanner]


def _try(
    change: str, flags: list[str], changed: ServingArgs, gpu: GpuSpec, plans: Plans, headroom: float
) -> tuple[Alternative, PlanView, int | None] | None:
    """One option: (the alternative, its plan, a shorter context to try it with when it does not fit);
    None when vLLM refuses its flags. It fits when safe limits settle at the context it states."""
    replan = plans(gpu, changed)
    first = replan.first()
    if first is None:
        return None
    settled = settle(first, replan, headroom)
    states_context = "--max-model-len" in flags
    if settled is None or (settled.max_model_len != first.context and not states_context):
        kv = first.plan.kv_cache
        alt = Alternative(
            change=change,
            args=flags,
            vllm_args=vllm_args_for(
                changed, kv.max_model_len, None, first.plan.memory.gpu_memory_utilization, changed.kv_cache_dtype
            ),
            fits=False,
            max_model_len=kv.max_model_len,
            max_concurrency=kv.max_concurrency,
        )
        return alt, first, alternative_context(first, settled, headroom)
    max_len, plan = settled.max_model_len, settled.at.plan
    if states_context:
        # The option says the context its arguments carry: the one that holds at the low end of its own band,
        # which can be shorter than the context tried.
        at = flags.index("--max-model-len") + 1
        tried = flags[at]
        if tried != str(max_len):
            flags = [*flags[:at], str(max_len), *flags[at + 1 :]]
            change = change.replace(f"--max-model-len {tried}", f"--max-model-len {max_len}")
    kv = plan.kv_cache
    alt = Alternative(
        change=change,
        args=flags,
        vllm_args=vllm_args_for(
            changed, max_len, settled.max_num_seqs, plan.memory.gpu_memory_utilization, changed.kv_cache_dtype
        ),
        fits=True,
        max_model_len=kv.max_model_len,
        max_concurrency=kv.max_concurrency,
    )
    return alt, settled.at, None


def alternatives(
    plan: PlanView,
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    *,
    plans: Plans,
    headroom: float,
    bigger_gpus: Sequence[GpuSpec] = (),
    first_fitting: Callable[[Sequence[GpuSpec]], int | None] | None = None,
) -> list[tuple[Alternative, PlanView]]:
    """What would fit, with the plan behind each option: for a deployment without safe limits (it does not
    fit, or fits only as predicted and not at the low end of its band). ``plans``: a :class:`Replanner` for
    other flags or another GPU; ``first_fitting``: the index of the first of ``bigger_gpus`` whose (quiet)
    offer adds an option, found without planning the others one by one (the same answer as the loop that
    would).

    Single changes first (a shorter context, an fp8 KV cache, a higher utilization, more GPUs, a bigger
    GPU); a change that is not enough on its own is also offered together with the context it allows. Every
    option's limits are settled like a recommendation's (:func:`settle`, with ``headroom``).
    """
    out: list[tuple[Alternative, PlanView]] = []

    def offer(
        change: str, flags: list[str], changed: ServingArgs, target: GpuSpec = gpu, *, quiet: bool = False
    ) -> bool:
        """Add the option (``quiet``: only if it fits, alone or with a shorter context)."""
        tried = _try(change, flags, changed, target, plans, headroom)
        if tried is None:
            return False
        alt, alt_plan, shorter = tried
        if alt.fits or not quiet:
            out.append((alt, alt_plan))
        if not alt.fits and shorter is not None:
            combined = _try(
                f"{change} and --max-model-len {shorter}",
                [*flags, "--max-model-len", str(shorter)],
                changed.model_copy(update={"max_model_len": shorter}),
                target,
                plans,
                headroom,
            )
            if combined is not None and combined[0].fits:
                out.append(combined[:2])
                return True
        return alt.fits

    shorter = alternative_context(plan, None, headroom)
    if shorter is not None:
        offer(
            f"shorter context: --max-model-len {shorter}",
            ["--max-model-len", str(shorter)],
            args.model_copy(update={"max_model_len": shorter}),
        )
    kv = plan.plan.kv_cache
    if not kv.kv_cache_dtype.startswith("fp8") and gpu.vendor == "nvidia":
        offer(
            "fp8 KV cache: --kv-cache-dtype fp8",
            ["--kv-cache-dtype", "fp8"],
            args.model_copy(update={"kv_cache_dtype": "fp8"}),
        )
    if plan.plan.memory.gpu_memory_utilization < 0.95:
        offer(
            "higher utilization: --gpu-memory-utilization 0.95",
            ["--gpu-memory-utilization", "0.95"],
            args.model_copy(update={"gpu_memory_utilization": 0.95}),
        )
    for tp in (2, 4, 8):
        if tp <= args.tensor_parallel_size or model.num_attention_heads % tp:
            continue
        if offer(
            f"more GPUs: --tensor-parallel-size {tp} ({tp * args.pipeline_parallel_size} GPUs)",
            ["--tensor-parallel-size", str(tp)],
            args.model_copy(update={"tensor_parallel_size": tp}),
        ):
            break
    if first_fitting is not None and bigger_gpus:
        # The GPUs before the first that fits add nothing (quiet offers): the batched sweep finds it
        # (planner/plan/sweep.py: first_fitting_gpu), and only its option is planned here.
        rest = list(bigger_gpus)
        while rest:
            found = first_fitting(rest)
            if found is None or offer(f"bigger GPU: {rest[found].name}", [], args, rest[found], quiet=True):
                break
            rest = rest[found + 1 :]  # (the sweep and this plan disagree: go on as the loop would)
        return out
    for bigger in bigger_gpus:
        if offer(f"bigger GPU: {bigger.name}", [], args, bigger, quiet=True):
            break
    return out


def recommendation_from_alternative(alt: Alternative, alt_plan: PlanView) -> Recommendation:
    """When the requested deployment has no safe limits: the limits of the first option that does."""
    kv = alt_plan.plan.kv_cache
    seqs = int(alt.vllm_args[alt.vllm_args.index("--max-num-seqs") + 1])
    max_len = int(alt.vllm_args[alt.vllm_args.index("--max-model-len") + 1])
    return Recommendation(
        max_model_len=max_len,
        max_num_seqs=seqs,
        gpu_memory_utilization=alt_plan.plan.memory.gpu_memory_utilization,
        kv_cache_dtype=kv.kv_cache_dtype,
        vllm_args=alt.vllm_args,
        basis=f"alternative: {alt.change}",
    )
