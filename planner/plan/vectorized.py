"""The per-point arithmetic of :mod:`planner.plan.sweep` in numpy, for sweeps of thousands of points.

The engine stage of each template (planner/plan/sweep.py) stays in Python; what a point adds — the budget
of its GPU, the KV layout of what is left, vLLM's fit check and context search, capacity, the KV band and
the recommended limits — is the same integer arithmetic as ``kv_layout`` / ``KvLayout`` /
``startup_fit`` / ``capacity`` / ``band_low_end`` / ``safe_context``, over arrays of points. A stage's
need is the sum of terms of :class:`planner.kv.capacity.FitTerms`; vLLM's binary search for the longest
context is the guess of ``FitTerms.longest`` proven by two evaluations of the need, and the binary
search itself for the points where the guess fails. The recommended limits are recommend.settle's: every
point's search (``settle_steps``) runs side by side with the others, and each round plans every search's
request at once — flags with a shorter context or a ``--max-num-seqs`` vLLM would run differently, each
with its own template — through the same columns (a catalog sweep takes about ten rounds, most searches
ending after one or two). The count is a float product and floor, kept in Python's own arithmetic (the
search reads the rows as Python numbers). Templates of one engine base whose flags differ only in the
limits mostly share their KV layout's shape (:class:`_Shape`). Points whose KV groups are
packed (DeepSeek-V4, vLLM 0.29+) are planned by the Python sweep too: a packed group's need is the most any
of its members needs, which is not a sum of terms.

Imported only for large sweeps: importing numpy costs more than a catalog table's arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.errors import KvPlannerError
from planner.kv.capacity import FitTerms
from planner.plan.engine import in_flight_tokens, kv_layout
from planner.plan.recommend import Settled, Steps, nominal_context, settle_steps
from planner.plan.sweep import SearchRow

if TYPE_CHECKING:
    from collections.abc import Sequence

    from planner.gpus.spec import GpuSpec
    from planner.models.spec import ModelSpec
    from planner.plan.sweep import PointPlan, _Sweeper, _Template
    from planner.vllm.args import ServingArgs

Array = Any  # numpy arrays (numpy's stubs are not part of the strict gates)

_INT = np.int64
_NO_CAP = 1 << 62  # an uncapped term: min(cap, t) is t
_BIG = 1 << 62  # an absent stage: never the minimum
_FORMULAS = {"blocks_x_block_size": 0, "blocks_div_groups": 1, "concurrency_x_len": 2}


def _cdiv(a: Array, b: Array) -> Array:
    return -((-a) // b)


@dataclass
class _Terms:
    """FitTerms of many rows, padded to the same number of terms (padding: coefficient 0)."""

    constant: Array  # (R,)
    coef: Array  # (R, K)
    cap: Array
    div: Array
    block: Array

    def needed(self, tokens: Array) -> Array:
        t = _cdiv(tokens[:, None], self.div)
        return self.constant + (self.coef * _cdiv(np.minimum(self.cap, t), self.block)).sum(axis=1)

    def take(self, rows: Array) -> _Terms:
        return _Terms(self.constant[rows], self.coef[rows], self.cap[rows], self.div[rows], self.block[rows])


def _pack(terms: Sequence[FitTerms]) -> _Terms:
    width = max([1, *(len(t.terms) for t in terms)])
    rows = len(terms)
    coef = np.zeros((rows, width), _INT)
    cap = np.full((rows, width), _NO_CAP, _INT)
    div = np.ones((rows, width), _INT)
    block = np.ones((rows, width), _INT)
    for r, fit in enumerate(terms):
        for k, (c, limit, d, b) in enumerate(fit.terms):
            coef[r, k], div[r, k], block[r, k] = c, d, b
            if limit is not None:
                cap[r, k] = limit
    return _Terms(np.array([t.constant for t in terms], _INT), coef, cap, div, block)


def _guess_parts(fit: FitTerms) -> tuple[int, int, int, int]:
    """(mode, rest, weight, step) of ``FitTerms.longest``: mode 0 = the upper bound, 1 = ``(budget - rest)
    // weight x step``, 2 = no guess."""
    rest, weight, growing = fit.constant, 0, set()
    for coef, cap, div, block in fit.terms:
        if cap is None:
            growing.add((div, block))
            weight += coef
        else:
            rest += coef * -(-cap // block)
    if not growing:
        return 0, 0, 1, 1
    if len(growing) > 1 or weight <= 0:
        return 2, 0, 1, 1
    ((div, block),) = growing
    return 1, rest, weight, div * block


@dataclass(frozen=True)
class _Shape:
    """What a template's KV layout is made of besides its memory: per stage the bytes per block and vLLM's fit
    check terms, the per-request and per-sequence terms, and the layout's constants. Templates of one engine
    base whose flags differ only in the limits mostly share one (the sweep's replans)."""

    stages: int
    bytes_per_block: tuple[int, ...]
    check: tuple[FitTerms, ...]
    guess: tuple[tuple[int, int, int, int], ...]
    per_request: FitTerms
    sequence: FitTerms
    in_flight: int
    scalars: tuple[int, ...]
    """block_size, v0, override (-1: none), override in the fit check, null-block check, first-group check,
    the tokens formula, groups, the smallest group block, dcp, stages."""

    @classmethod
    def of(cls, t: _Template) -> _Shape:
        layout = kv_layout(t.engine, t.release, t.resolved, t.args, [0] * len(t.fixed))
        fits = tuple(layout.fit_terms(stage) for stage in layout.stages)
        grouping = t.engine.grouping
        counts = list(grouping.spec_counts)
        override = layout.num_gpu_blocks_override
        return cls(
            stages=len(layout.stages),
            bytes_per_block=tuple(stage.bytes_per_block for stage in layout.stages),
            check=fits,
            guess=tuple(_guess_parts(fit) for fit in fits),
            per_request=FitTerms.of(counts, in_flight=layout.in_flight, dcp=layout.dcp),
            sequence=FitTerms.of(counts, in_flight=layout.in_flight, dcp=1),
            in_flight=layout.in_flight,
            scalars=(
                layout.block_size,
                layout.v0,
                -1 if override is None else override,
                layout.override_in_fit_check,
                layout.fit_check == "all_groups_null_block",
                layout.fit_check == "first_group_global",
                _FORMULAS[t.release.tokens_formula],
                max(1, len(grouping.groups)),
                min((g.spec.block_size for g in grouping.groups), default=layout.block_size),
                layout.dcp,
                len(layout.stages),
            ),
        )


def _shape_key(t: _Template) -> tuple[object, ...]:
    """Every input of ``kv_layout`` but the memory (the grouping by identity: the sweeper keeps it alive)."""
    engine, resolved, args = t.engine, t.resolved, t.args
    in_flight = in_flight_tokens(
        t.release, resolved, args.pipeline_parallel_size, engine.model_runner_v2, engine.async_scheduling
    )
    return (
        id(engine.grouping),
        tuple(engine.partition),
        engine.drafter_layers,
        engine.rank.block_size,
        id(engine.rank),  # its raw layers (and block size) by identity, like the grouping
        in_flight,
        id(t.release),
        args.decode_context_parallel_size,
        args.num_gpu_blocks_override,
        resolved.engine,
    )


class _Layouts:
    """The per-stage constants of every template, and vLLM's layout arithmetic over points."""

    def __init__(
        self,
        templates: list[_Template],
        tid: Array,
        band_memo: dict[tuple[object, ...], tuple[int, int]],
        shapes: dict[tuple[object, ...], _Shape],
    ) -> None:
        count = len(templates)
        # Distinct shapes (``shapes``: the sweep's, by _shape_key), and each template's.
        shape_index: dict[int, int] = {}
        distinct: list[_Shape] = []
        of_template: list[int] = []
        for t in templates:
            key = _shape_key(t)
            shape = shapes.get(key)
            if shape is None:
                shape = shapes[key] = _Shape.of(t)
            j = shape_index.get(id(shape))
            if j is None:
                j = shape_index[id(shape)] = len(distinct)
                distinct.append(shape)
            of_template.append(j)
        stages = max(shape.stages for shape in distinct)
        self.stages = stages
        # Per template and stage: fixed, weights, activation, non-torch, graphs, band down, band up (padding
        # stages: zeros, inactive by their shape, never limiting).
        per_stage: list[tuple[int, ...]] = []
        pad = (0,) * 7
        scalars: list[tuple[Any, ...]] = []
        for t, j in zip(templates, of_template, strict=True):
            n = distinct[j].stages
            for stage in range(n):
                memory = t.engine.memory[stage]
                down, up = t.offsets(stage, band_memo)
                per_stage.append(
                    (
                        t.fixed[stage],
                        memory.weights_bytes,
                        memory.activation_peak_bytes,
                        memory.non_torch_bytes,
                        memory.cuda_graph_bytes,
                        down,
                        up,
                    )
                )
            per_stage.extend([pad] * (stages - n))
            scalars.append(
                (
                    t.resolved.gpu_memory_utilization,
                    t.release.budget_ceil,
                    -1 if t.args.kv_cache_memory_bytes is None else t.args.kv_cache_memory_bytes,
                    t.heaviest_weights,
                    t.max_len,
                    t.auto,
                    t.derived,
                    t.engine.memory[0].cuda_graph_counted,
                )
            )
        table = np.array(per_stage, _INT).reshape(count, stages, 7)
        self.fixed, self.weights, self.activation, self.non_torch = (
            table[:, :, 0],
            table[:, :, 1],
            table[:, :, 2],
            table[:, :, 3],
        )
        self.graphs, self.down, self.up = table[:, :, 4], table[:, :, 5], table[:, :, 6]
        # Per shape and stage.
        empty = FitTerms(0, ())
        bpb = np.zeros((len(distinct), stages), _INT)
        active = np.zeros((len(distinct), stages), bool)
        check: list[FitTerms] = []
        guess: list[tuple[int, int, int, int]] = []
        for j, shape in enumerate(distinct):
            bpb[j, : shape.stages] = shape.bytes_per_block
            active[j, : shape.stages] = True
            check += [*shape.check, *[empty] * (stages - shape.stages)]
            guess += [*shape.guess, *[(0, 0, 1, 1)] * (stages - shape.stages)]
        sid = np.array(of_template, _INT)[tid]
        self.tid = tid
        self.in_flight = [distinct[j].in_flight for j in sid.tolist()]
        # Per point: the template's and its shape's constants.
        names = ("util", "ceil", "given", "heavy", "max_len", "auto", "derived", "counted")
        self.s = {name: np.array(values)[tid] for name, values in zip(names, zip(*scalars, strict=True), strict=True)}
        shape_names = (
            "block_size",
            "v0",
            "override",
            "override_fit",
            "null_block",
            "global_first",
            "formula",
            "groups",
            "min_block",
            "dcp",
            "n_stages",
        )
        shape_columns = zip(*(shape.scalars for shape in distinct), strict=True)
        self.s.update({name: np.array(values)[sid] for name, values in zip(shape_names, shape_columns, strict=True)})
        for name in ("v0", "override_fit", "null_block", "global_first"):
            self.s[name] = self.s[name].astype(bool)
        self.point_fixed = self.fixed[tid]
        self.point_bpb = bpb[sid]
        self.point_active = active[sid]
        self.checked = self.point_active & (self.point_bpb > 0)
        rows = (sid[:, None] * stages + np.arange(stages)[None, :]).reshape(-1)
        self.check = _pack(check).take(rows)
        parts = np.array(guess, _INT).reshape(len(distinct), stages, 4)[sid]
        self.guess_mode, self.guess_rest, self.guess_weight, self.guess_step = (
            parts[:, :, 0],
            parts[:, :, 1],
            parts[:, :, 2],
            parts[:, :, 3],
        )
        self.per_request = _pack([shape.per_request for shape in distinct]).take(sid)
        self.sequence = _pack([shape.sequence for shape in distinct]).take(sid)
        self.templates = templates

    def spread_needs(self) -> tuple[Array, Array, Array, Array]:
        """Per point: (has a ceil release, its most fixed memory, has a floor release, its most)."""
        ceil_need, floor_need = [], []
        for t in self.templates:
            fixed = t.release_fixed()
            ceil_need.append(max([-1, *(need for up, need in fixed if up)]))
            floor_need.append(max([-1, *(need for up, need in fixed if not up)]))
        c = np.array(ceil_need, _INT)[self.tid]
        f = np.array(floor_need, _INT)[self.tid]
        return c >= 0, c, f >= 0, f

    # --- vLLM's layout arithmetic (planner/kv/capacity.py), over points x stages -------------------------

    def blocks(self, available: Array) -> tuple[Array, Array]:
        """(limiting stage, num_gpu_blocks) per point."""
        bpb = self.point_bpb
        per_stage = np.where(bpb > 0, np.maximum(0, available // np.where(bpb > 0, bpb, 1)), 1)
        per_stage = np.where(self.point_active, per_stage, _BIG)
        limiting = np.argmin(per_stage, axis=1)
        count = per_stage[np.arange(len(limiting)), limiting]
        override = self.s["override"]
        return limiting, np.where(override >= 0, override, count)

    def check_memory(self, available: Array) -> Array:
        first = np.where(self.point_active, available, _BIG).min(axis=1, keepdims=True)
        memory = np.where(self.s["global_first"][:, None], first, available)
        override = self.s["override"][:, None]
        memory = np.where((override >= 0) & self.s["override_fit"][:, None], override * self.point_bpb, memory)
        return memory - np.where(self.s["null_block"][:, None], self.point_bpb, 0)

    def _needed(self, tokens: Array) -> Array:
        """Need of every (point, stage) for ``tokens`` per point."""
        return self.check.needed(np.repeat(tokens, self.stages)).reshape(-1, self.stages)

    def fits(self, available: Array, blocks: Array, tokens: Array) -> Array:
        memory = self.check_memory(available)
        ok = (self._needed(tokens) <= memory) | ~self.checked
        v0_ok = tokens <= self.s["block_size"] * (blocks // self.s["n_stages"])
        return np.where(self.s["v0"], v0_ok, ok.all(axis=1))

    def longest(self, available: Array, blocks: Array, upper: Array) -> Array:
        """``KvLayout.max_len_that_fits(upper)`` per point."""
        memory = self.check_memory(available)
        stages = self.stages
        up = np.repeat(upper, stages).reshape(-1, stages)
        ones = np.ones_like(upper)
        zero = ((self._needed(ones) > memory) & self.checked).any(axis=1)
        mode = self.guess_mode
        weight = self.guess_weight
        guessed = (memory - self.guess_rest) // weight * self.guess_step
        guess = np.where(mode == 0, up, np.minimum(up, np.maximum(1, guessed)))
        flat_guess = guess.reshape(-1)
        need = self.check.needed(flat_guess).reshape(-1, stages)
        after = self.check.needed(flat_guess + 1).reshape(-1, stages)
        proven = (mode != 2) & (up >= 1) & (need <= memory) & ((guess == up) | (after > memory))
        search = self.checked & ~zero[:, None] & ~proven
        found = guess
        if search.any():
            rows = np.flatnonzero(search.reshape(-1))
            terms = self.check.take(rows)
            budget = memory.reshape(-1)[rows]
            lo = np.ones(len(rows), _INT)
            hi = up.reshape(-1)[rows].copy()
            best = np.ones(len(rows), _INT)
            while True:
                going = lo <= hi
                if not going.any():
                    break
                mid = (lo + hi) // 2
                ok = terms.needed(mid) <= budget
                best = np.where(going & ok, mid, best)
                lo = np.where(going & ok, mid + 1, lo)
                hi = np.where(going & ~ok, mid - 1, hi)
            found = found.reshape(-1).copy()
            found[rows] = best
            found = found.reshape(-1, stages)
        result = np.minimum(upper, np.where(self.checked, found, _BIG).min(axis=1))
        result = np.where(zero, 0, result)
        v0 = np.minimum(upper, self.s["block_size"] * (blocks // self.s["n_stages"]))
        return np.where(self.s["v0"], v0, result)


@dataclass
class SweepTable:
    """A sweep as columns (numpy arrays, one entry per point, in the order given). Refused points
    (``errors[i]`` set) hold 0 / False; ``has_recommendation`` False where ``make_plan`` recommends
    nothing. :meth:`point` gives one point as a :class:`PointPlan` (with its ``fit_error``)."""

    points: list[tuple[ModelSpec, GpuSpec, ServingArgs]]
    errors: list[str | None]
    columns: dict[str, Array]
    sweeper: _Sweeper
    """Plans :meth:`point` (sweep_table gives the table a sweeper of its own, not the one it swept with)."""

    def __len__(self) -> int:
        return len(self.points)

    def __getitem__(self, name: str) -> Array:
        return self.columns[name]

    def point(self, index: int) -> PointPlan:
        model, gpu, args = self.points[index]
        return self.sweeper.plan(model, gpu, args)


def evaluate(sweeper: _Sweeper, points: list[tuple[ModelSpec, GpuSpec, ServingArgs]]) -> SweepTable:
    count = len(points)
    errors: list[str | None] = [None] * count
    ok = np.ones(count, bool)
    packed: list[int] = []
    found: list[_Template | None] = []
    for i, (model, gpu, args) in enumerate(points):
        template = sweeper.template(model, gpu, args)
        if isinstance(template, KvPlannerError):
            errors[i] = str(template)
            ok[i] = False
            found.append(None)
        elif template.engine.grouping.packed:
            ok[i] = False
            packed.append(i)
            found.append(None)
        else:
            found.append(template)
    live = np.flatnonzero(ok)
    columns: dict[str, Array] = {}
    if not len(live):
        if packed:
            _fill_from_plans(columns, sweeper, points, packed, list(_PLAN_COLUMNS))
            for name in ("vllm_version", "kv_cache_dtype"):
                columns[name] = columns[name].astype(str)
        return SweepTable(points, errors, columns, sweeper)
    live_points = [points[i] for i in live.tolist()]
    figures = _Figures(sweeper, [t for t in found if t is not None], live_points)
    out = figures.columns
    if sweeper.with_margin:
        settled = _settle_all(sweeper, live_points, figures.rows())
        rec_len = np.array([0 if one is None else one.max_model_len for one in settled], _INT)
        rec_seqs = np.array([0 if one is None else one.max_num_seqs for one in settled], _INT)
        out.update(
            recommended_max_model_len=rec_len,
            recommended_max_num_seqs=rec_seqs,
            has_recommendation=rec_len > 0,
        )
    for name, values in out.items():
        column = np.zeros(count, values.dtype)
        column[live] = values
        columns[name] = column
    for name, strings in (
        ("vllm_version", [str(t.version) if t is not None else "" for t in found]),
        ("kv_cache_dtype", [t.engine.kv_dtype.name if t is not None else "" for t in found]),
    ):
        columns[name] = np.array(strings, dtype=object)
    if packed:
        _fill_from_plans(columns, sweeper, points, packed, list(columns))
    for name in ("vllm_version", "kv_cache_dtype"):
        columns[name] = columns[name].astype(str)
    return SweepTable(points, errors, columns, sweeper)


class _Figures:
    """Every point's figures (a PointPlan's, as columns) from its template, which is neither refused nor
    packed: ``templates[i]`` is the template of ``points[i]``."""

    def __init__(
        self, sweeper: _Sweeper, templates: list[_Template], points: list[tuple[ModelSpec, GpuSpec, ServingArgs]]
    ) -> None:
        index: dict[int, int] = {}
        distinct: list[_Template] = []
        tid = np.zeros(len(points), _INT)
        for i, t in enumerate(templates):
            j = index.get(id(t))
            if j is None:
                j = index[id(t)] = len(distinct)
                distinct.append(t)
            tid[i] = j
        self.templates = templates
        self.points = points
        lay = _Layouts(distinct, tid, sweeper.band_memo, sweeper.shapes)
        self.in_flight = lay.in_flight
        s = lay.s
        mem = np.array([gpu.memory_bytes for _, gpu, _ in points], _INT)
        product = mem.astype(np.float64) * s["util"]
        budget_ceil = np.ceil(product).astype(_INT)
        budget_floor = np.floor(product).astype(_INT)
        budget = np.where(s["ceil"], budget_ceil, budget_floor)
        given = s["given"]
        available = np.where(given[:, None] >= 0, given[:, None], budget[:, None] - lay.point_fixed)
        available = np.where(lay.point_active, available, _BIG)
        limiting, blocks = lay.blocks(available)
        n = len(points)
        pick = np.arange(n)
        least_available = available.min(axis=1)
        # startup_fit
        weights_fail = s["heavy"] >= budget
        memory_fail = ~weights_fail & (least_available <= 0)
        max_len = s["max_len"].astype(_INT)
        auto = s["auto"] & ~weights_fail & ~memory_fail
        fit = np.zeros(n, _INT)
        if auto.any():
            fit = lay.longest(available, blocks, max_len)
        fits_plain = lay.fits(available, blocks, max_len)
        fits = ~weights_fail & ~memory_fail & np.where(s["auto"], fit > 0, fits_plain)
        # models.kv_past_card for a given cache, the limiting stage's figures (build.given_kv_overflows)
        resident = lay.weights[lay.tid, limiting] + lay.non_torch[lay.tid, limiting]
        given_over = (given >= 0) & (resident + np.maximum(given, 0) > mem)
        fits &= ~given_over
        max_len = np.where(auto & (fit > 0), np.minimum(max_len, fit), max_len)
        # capacity
        block_size = s["block_size"]
        per_request = lay.per_request.needed(max_len)
        concurrency = blocks / np.maximum(1, per_request)
        formula = s["formula"]
        by_blocks = (formula == 0) | s["v0"]
        tokens = np.where(
            by_blocks,
            blocks * block_size,
            np.where(
                formula == 1,
                blocks // s["groups"] * s["min_block"] * s["dcp"],
                (concurrency * max_len).astype(_INT),
            ),
        )
        concurrency = np.where(by_blocks, (blocks * block_size) / max_len, concurrency)
        kv = np.maximum(0, available[pick, limiting])
        derived = s["derived"]
        estimated = lay.longest(available, blocks, np.maximum(derived, max_len))
        self.columns: dict[str, Array] = {
            "fits": fits,
            "gpu_memory_utilization": s["util"],
            "budget_bytes": budget,
            "weights_bytes": lay.weights[lay.tid, limiting],
            "activation_peak_bytes": lay.activation[lay.tid, limiting],
            "non_torch_bytes": lay.non_torch[lay.tid, limiting],
            "cuda_graph_bytes": lay.graphs[lay.tid, limiting],
            "cuda_graph_counted": s["counted"],
            "kv_cache_bytes": kv,
            "block_size": block_size,
            "bytes_per_block": lay.point_bpb[pick, limiting],
            "num_gpu_blocks": blocks,
            "tokens": tokens,
            "max_concurrency": concurrency,
            "max_model_len": max_len,
            "blocks_per_request": per_request,
            "estimated_max_model_len": estimated,
            "derived_max_model_len": derived,
        }
        self.safe_len: Array | None = None
        self.safe_blocks: Array | None = None
        if not sweeper.with_margin:
            return
        spread_on = np.zeros(n, bool)
        spread = np.zeros(n, _INT)
        if not sweeper.version_known:
            spread_on = given < 0
            has_c, need_c, has_f, need_f = lay.spread_needs()
            least = np.minimum(least_available, np.where(has_c, budget_ceil - need_c, _BIG))
            least = np.minimum(least, np.where(has_f, budget_floor - need_f, _BIG))
            spread = np.where(spread_on, least_available - least, 0)
        down = lay.down[lay.tid, limiting] + np.where(spread_on, np.maximum(0, spread), 0)
        low = np.maximum(0, kv - down)
        low_available = np.where(lay.point_active, available - (kv - low)[:, None], _BIG)
        _, low_blocks = lay.blocks(low_available)
        low_blocks = np.where(low_available.min(axis=1) > 0, low_blocks, 0)
        fits_low = (low_blocks > 0) & lay.fits(low_available, low_blocks, max_len)
        estimated_low = np.where(
            low_blocks > 0, lay.longest(low_available, low_blocks, np.maximum(derived, max_len)), 0
        )
        safe_blocks = np.minimum(blocks, low_blocks)
        longest = np.minimum(estimated, estimated_low)
        # safe_context / round_context
        big = longest >= 4096
        rounded = np.where(
            big,
            longest // 1024 * 1024,
            np.where(longest >= block_size, np.maximum(block_size, longest // block_size * block_size), longest),
        )
        keep = fits & fits_low
        shorter = ~keep & (longest > 0) & (safe_blocks > 0)
        has_safe = (keep | shorter) & ~given_over  # recommend.recommendation: no context helps
        self.safe_len = np.where(has_safe, np.where(keep, max_len, np.minimum(max_len, rounded)), -1)
        self.safe_blocks = safe_blocks
        self.columns.update(
            band_low_bytes=low,
            band_high_bytes=kv + lay.up[lay.tid, limiting],
            num_gpu_blocks_low=low_blocks,
            max_model_len_fits_low=fits_low,
            estimated_max_model_len_low=estimated_low,
            version_spread_bytes=spread,
            has_version_spread=spread_on,
        )

    def rows(self) -> list[SearchRow]:
        """Each point as recommend.settle reads it (the sweep has its band)."""
        assert self.safe_len is not None and self.safe_blocks is not None
        c = self.columns
        estimated, blocks = c["estimated_max_model_len"].tolist(), c["num_gpu_blocks"].tolist()
        return [
            SearchRow(
                fits=fits,
                context=context,
                safe_len=None if safe < 0 else safe,
                safe_blocks=safe_blocks,
                block_size=block_size,
                nominal_context=nominal_context(estimate, count, block_size),
                template=t,
                args=point[2],
                in_flight=in_flight,
            )
            for fits, context, safe, safe_blocks, block_size, estimate, count, t, point, in_flight in zip(
                c["fits"].tolist(),
                c["max_model_len"].tolist(),
                self.safe_len.tolist(),
                self.safe_blocks.tolist(),
                c["block_size"].tolist(),
                estimated,
                blocks,
                self.templates,
                self.points,
                self.in_flight,
                strict=True,
            )
        ]


def _settle_all(
    sweeper: _Sweeper, points: list[tuple[ModelSpec, GpuSpec, ServingArgs]], firsts: list[SearchRow]
) -> list[Settled[SearchRow] | None]:
    """recommend.settle for every point, the searches run side by side: each round plans every search's
    request at once (the Python sweep's replan: the same flags, or flags vLLM resolves alike, answer with the
    plan they came from; others are planned with their own template), as columns."""
    results: list[Settled[SearchRow] | None] = [None] * len(points)
    searches: dict[int, Steps[SearchRow, Settled[SearchRow] | None]] = {}
    requests: dict[int, tuple[int, int | None, SearchRow]] = {}
    for i, first in enumerate(firsts):
        steps = settle_steps(first, sweeper.headroom)
        try:
            requests[i] = next(steps)
        except StopIteration as done:
            results[i] = done.value
            continue
        searches[i] = steps
    while requests:
        answers: dict[int, SearchRow | None] = {}
        asked: list[int] = []
        templates: list[_Template] = []
        planned: list[tuple[ModelSpec, GpuSpec, ServingArgs]] = []
        for i, (max_len, seqs, base) in requests.items():
            model, gpu, args = points[i]
            if sweeper.same_run(base.template, base.args, gpu, base.context, max_len, seqs):
                answers[i] = base
                continue
            flags = sweeper.with_limits(args, max_len, seqs)
            template = sweeper.template(model, gpu, flags)
            if isinstance(template, KvPlannerError):
                answers[i] = None
            elif template.engine.grouping.packed:  # not reached from the sweep's own points; kept exact
                answers[i] = SearchRow.of(sweeper.point(model, gpu, flags))
            else:
                asked.append(i)
                templates.append(template)
                planned.append((model, gpu, flags))
        if planned:
            answers.update(zip(asked, _Figures(sweeper, templates, planned).rows(), strict=True))
        requests = {}
        for i, answer in answers.items():
            try:
                requests[i] = searches[i].send(answer)
            except StopIteration as done:
                results[i] = done.value
                del searches[i]
    return results


# Every column a sweep with its band fills (the names of PointPlan fields, plus two flags).
_PLAN_COLUMNS = (
    "fits",
    "gpu_memory_utilization",
    "budget_bytes",
    "weights_bytes",
    "activation_peak_bytes",
    "non_torch_bytes",
    "cuda_graph_bytes",
    "cuda_graph_counted",
    "kv_cache_bytes",
    "block_size",
    "bytes_per_block",
    "num_gpu_blocks",
    "tokens",
    "max_concurrency",
    "max_model_len",
    "blocks_per_request",
    "estimated_max_model_len",
    "derived_max_model_len",
    "band_low_bytes",
    "band_high_bytes",
    "num_gpu_blocks_low",
    "max_model_len_fits_low",
    "estimated_max_model_len_low",
    "version_spread_bytes",
    "has_version_spread",
    "recommended_max_model_len",
    "recommended_max_num_seqs",
    "has_recommendation",
    "vllm_version",
    "kv_cache_dtype",
)


def _fill_from_plans(
    columns: dict[str, Array],
    sweeper: _Sweeper,
    points: list[tuple[ModelSpec, GpuSpec, ServingArgs]],
    rows: list[int],
    names: list[str],
) -> None:
    """Rows planned by the Python sweep (packed groups) into the columns (``names``: the columns to fill,
    created where missing; the band's are left out when the sweep has no band)."""
    count = len(points)
    plans = {i: sweeper.plan(*points[i]) for i in rows}
    for name in names:
        if not sweeper.with_margin and name in _BAND_COLUMNS:
            continue
        values = [_column_value(plans[i], name) for i in rows]
        column = columns.get(name)
        if column is None:
            text = name in ("vllm_version", "kv_cache_dtype")
            kind = object if text else type(values[0]) if values else int
            column = np.full(count, "", dtype=object) if text else np.zeros(count, kind)
            columns[name] = column
        column[rows] = values


_BAND_COLUMNS = frozenset(_PLAN_COLUMNS[_PLAN_COLUMNS.index("band_low_bytes") : _PLAN_COLUMNS.index("vllm_version")])


def _column_value(plan: PointPlan, name: str) -> object:
    if name == "has_version_spread":
        return plan.version_spread_bytes is not None
    if name == "has_recommendation":
        return plan.recommended_max_model_len is not None
    value = getattr(plan, name)
    return 0 if value is None else value
