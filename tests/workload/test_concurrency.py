"""risk_bounded_concurrency: the answer's properties, the comparisons, the preemption estimate."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from planner.errors import WorkloadProfileError
from planner.plan.models import KvCacheReport, KvGroupReport
from planner.workload import ConcurrencyAdvice, capacity_for_blocks, parse_workload, risk_bounded_concurrency
from planner.workload.concurrency import MAX_SEQS, risk_bounded_limit
from planner.workload.convolution import _ROUND_OFF_PER_SEQUENCE, TruncatedSums, _kept_mass, _Truncated, convolve
from planner.workload.occupancy import block_lookup
from planner.workload.profile import WorkloadProfile

CHAT = parse_workload(
    {"prompt_tokens": {"p50": 800, "p90": 3000, "p99": 12000}, "output_tokens": {"p50": 200, "p90": 800, "p99": 2000}}
)
KV = capacity_for_blocks(num_gpu_blocks=30_000, block_size=16, max_model_len=32_768)


@pytest.fixture(scope="module")
def advice() -> ConcurrencyAdvice:
    return risk_bounded_concurrency(KV, CHAT, headroom=0.1)


def test_the_answer_is_the_largest_within_target(advice: ConcurrencyAdvice) -> None:
    n = advice.max_num_seqs
    assert advice.risk == advice.risk_at(n) <= advice.target_risk < advice.risk_at(n + 1)
    assert advice.capacity_blocks == math.floor(29_999 * 0.9)
    assert advice.usable_blocks == 29_999


def test_risk_bounded_lies_between_worst_case_and_average(advice: ConcurrencyAdvice) -> None:
    assert advice.worst_case_max_num_seqs == advice.capacity_blocks // 2048 == 13
    assert advice.worst_case_max_num_seqs < advice.max_num_seqs < advice.average_max_num_seqs
    assert advice.worst_case_risk == 0.0
    assert advice.average_risk > 0.3  # sizing on the average request overflows most of the time
    assert advice.vllm_max_concurrency == pytest.approx(30_000 * 16 / 32_768)


def test_risk_curve_is_monotone(advice: ConcurrencyAdvice) -> None:
    risks = [p.risk for p in sorted(advice.risk_curve, key=lambda p: p.max_num_seqs)]
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(risks))


def test_more_headroom_or_a_stricter_target_never_allows_more(advice: ConcurrencyAdvice) -> None:
    roomier = risk_bounded_concurrency(KV, CHAT, headroom=0.3)
    stricter = risk_bounded_concurrency(KV, CHAT, headroom=0.1, target_risk=1e-4)
    looser = risk_bounded_concurrency(KV, CHAT, headroom=0.1, target_risk=0.2)
    assert roomier.max_num_seqs < advice.max_num_seqs
    assert stricter.max_num_seqs < advice.max_num_seqs < looser.max_num_seqs


def test_prefix_cache_credit_allows_more() -> None:
    credited = parse_workload({**CHAT.model_dump(), "prefix_cache_hit_rate": 0.5})
    plain = risk_bounded_concurrency(KV, CHAT)
    assert risk_bounded_concurrency(KV, credited).max_num_seqs > plain.max_num_seqs
    assert any("Prefix-cache credit" in line for line in risk_bounded_concurrency(KV, credited).explanation)


def test_json_round_trip_keeps_an_interpolated_risk(advice: ConcurrencyAdvice) -> None:
    copy = ConcurrencyAdvice.model_validate_json(advice.model_dump_json())
    assert copy.max_num_seqs == advice.max_num_seqs
    n = advice.max_num_seqs
    assert copy.risk_at(n) == pytest.approx(advice.risk_at(n))
    # Between curve points the interpolation stays on the safe side of the exact value.
    for m in (n - 5, n + 3, n + 10):
        assert copy.risk_at(m) >= advice.risk_at(m) - 1e-9


def test_preemption_estimate(advice: ConcurrencyAdvice) -> None:
    n = advice.max_num_seqs
    assert advice.expected_preemptions_per_s(0.0) == 0.0
    saturated = advice.expected_preemptions_per_s(2.0)
    assert saturated == pytest.approx(2.0 * advice.risk)
    assert advice.expected_preemptions_per_s(2.0, max_num_seqs=advice.average_max_num_seqs) > 10 * saturated
    # Little's law: 2 req/s x 20 s = 40 running on average, far below n: hardly any overflow.
    light = advice.expected_preemptions_per_s(2.0, mean_request_seconds=20.0)
    heavy = advice.expected_preemptions_per_s(2.0, mean_request_seconds=n / 2.0 * 1.5)
    assert light < 1e-6 < heavy <= saturated + 1e-12
    with pytest.raises(WorkloadProfileError):
        advice.expected_preemptions_per_s(-1.0)


def test_requests_longer_than_the_context_are_left_out_and_reported() -> None:
    long_prompts = parse_workload({"prompt_tokens": {"p50": 3000, "p90": 9000}, "output_tokens": 100})
    advice = risk_bounded_concurrency(capacity_for_blocks(5000, 16, 8192), long_prompts)
    assert 0.1 < advice.rejected_fraction < 0.2
    assert any("vLLM refuses them" in line for line in advice.explanation)
    too_long = parse_workload({"prompt_tokens": 9000, "output_tokens": 100})
    with pytest.raises(WorkloadProfileError, match="refuse all of them"):
        risk_bounded_concurrency(capacity_for_blocks(5000, 16, 8192), too_long)


def test_no_safe_concurrency_when_one_request_does_not_fit() -> None:
    profile = parse_workload({"prompt_tokens": 4000, "output_tokens": 100})
    advice = risk_bounded_concurrency(capacity_for_blocks(200, 16, 8192), profile, headroom=0.0)
    assert advice.max_num_seqs == 0 and advice.risk_at(1) == pytest.approx(1.0)
    assert "Even one running request" in advice.explanation[2]


@pytest.mark.parametrize(("headroom", "target"), [(-0.1, None), (1.0, None), (0.1, 0.0), (0.1, 0.9)])
def test_bad_arguments(headroom: float, target: float | None) -> None:
    with pytest.raises(WorkloadProfileError):
        risk_bounded_concurrency(KV, CHAT, headroom=headroom, target_risk=target)


def test_block_lookup_matches_blocks_for_sequence_on_hybrid_layouts() -> None:
    kv = KvCacheReport(
        bytes_per_token=0,
        state_bytes_per_sequence=0,
        kv_cache_dtype="auto",
        block_size=32,
        bytes_per_block=0,
        num_gpu_blocks=1000,
        tokens=32_000,
        max_concurrency=1.0,
        max_model_len=32_768,
        blocks_per_request=1024,
        estimated_max_model_len=32_000,
        groups=[
            KvGroupReport(kind="full", num_layers=8, page_bytes=0, block_size=32),
            KvGroupReport(
                kind="sliding_window", num_layers=24, page_bytes=0, block_size=16, window=4096, tokens_cap=4096 + 2047
            ),
            KvGroupReport(
                kind="chunked_local", num_layers=4, page_bytes=0, block_size=64, window=8192, tokens_cap=8192 + 2047
            ),
            KvGroupReport(kind="mamba", num_layers=2, page_bytes=0, block_size=16, blocks_per_sequence_const=3),
        ],
    )
    tokens = np.concatenate([np.arange(1, 20_000), np.random.default_rng(0).integers(1, 32_768, 5000)])
    expected = np.array([kv.blocks_for_sequence(int(t)) for t in tokens])
    assert np.array_equal(block_lookup(kv, tokens), expected)


def test_typical_plan_is_fast_enough_for_admission() -> None:
    # Not a timing assertion: the number of FFT products is bounded (search + curve), checked by the
    # size of the risk cache.
    advice = risk_bounded_concurrency(KV, CHAT)
    assert advice._engine is not None
    assert len(advice._engine._powers) <= 17 and len(advice.risk_curve) <= 20


def _largest_within_every_digit(engine: TruncatedSums, target: float, n_max: int) -> tuple[int, float]:
    """The search before it skipped digits: a product for every binary digit of ``n_max``."""
    n, acc = 0, _Truncated(0, np.ones(1))
    for k in range(max(n_max, 1).bit_length() - 1, -1, -1):
        if n + (1 << k) > n_max:
            continue
        candidate = engine._mul(acc, engine._power(k))
        if 1.0 - candidate.mass + (n + (1 << k)) * _ROUND_OFF_PER_SEQUENCE <= target:
            acc, n = candidate, n + (1 << k)
    return n, engine._risk_of(n, acc)


LONG = parse_workload({"prompt_tokens": {"p50": 6000, "p99": 30000}, "output_tokens": 500, "target_risk": 1e-6})
SHORT = parse_workload({"prompt_tokens": 100, "output_tokens": {"p50": 20, "p99": 80}, "target_risk": 0.05})


@pytest.mark.parametrize(
    ("blocks", "max_len", "profile", "headroom"),
    [
        (30_000, 32_768, CHAT, 0.1),
        (65_467, 1_120, CHAT, 0.1),
        (5_230, 1_024, CHAT, 0.0),
        (200_000, 8_192, CHAT, 0.2),  # counted in units of several blocks
        (1_543, 32_768, LONG, 0.1),
        (90_000, 131_072, LONG, 0.05),
        (12_000, 2_048, SHORT, 0.1),
        (3, 4_096, CHAT, 0.1),  # nothing fits
    ],
)
def test_the_plan_figures_are_those_of_the_full_advice(
    blocks: int, max_len: int, profile: WorkloadProfile, headroom: float
) -> None:
    """risk_bounded_limit (what plans record) skips the report-only figures and digits whose power of two
    already overflows; every figure it gives is bit-identical to the advice plans used before (without
    the curve: with it, the curve's sums fill the risk cache first, in another order of products) and to
    the search that tried every digit."""
    kv = capacity_for_blocks(num_gpu_blocks=blocks, block_size=16, max_model_len=max_len)
    full = risk_bounded_concurrency(kv, profile, headroom=headroom, with_curve=False)
    lean = risk_bounded_limit(kv, profile, headroom=headroom)
    assert (lean.max_num_seqs, lean.risk, lean.target_risk) == (full.max_num_seqs, full.risk, full.target_risk)
    assert (lean.worst_case_max_num_seqs, lean.average_max_num_seqs, lean.average_risk) == (
        full.worst_case_max_num_seqs,
        full.average_max_num_seqs,
        full.average_risk,
    )
    assert lean.average_request_tokens == full.average_request_tokens
    engine = full._engine
    assert engine is not None and full._unit_pmf is not None
    fresh = TruncatedSums(full._unit_pmf, full.capacity_blocks // full.block_unit)
    smallest = int(np.flatnonzero(full._unit_pmf > 0)[0])
    n_max = min(MAX_SEQS, (full.capacity_blocks // full.block_unit) // max(1, smallest))
    reference = TruncatedSums(full._unit_pmf, full.capacity_blocks // full.block_unit)
    for target in (1e-9, 1e-4, full.target_risk, 0.3):
        assert fresh.largest_within(target, n_max) == _largest_within_every_digit(reference, target, n_max)


class _Textbook(TruncatedSums):
    """Every product transformed from scratch with :func:`convolve`, as before transforms were kept."""

    def _mul(self, a: _Truncated, b: _Truncated) -> _Truncated:
        if len(a.values) == 0 or len(b.values) == 0:
            return _Truncated(self.capacity + 1, np.zeros(0))
        return self._trim(a.offset + b.offset, convolve(a.values, b.values, clip=False))


@pytest.mark.parametrize("seed", range(12))
def test_kept_transforms_give_the_same_bits(seed: int) -> None:
    """Each power's and each sum's transform is computed once per size and reused by later products (a
    square transforms its operand once): every risk is bit-identical to products computed from scratch."""
    rng = np.random.default_rng(seed)
    pmf = rng.random(int(rng.choice([40, 300, 2_000]))) ** 3
    pmf[: int(rng.integers(0, len(pmf) // 2))] = 0.0
    pmf /= pmf.sum()
    capacity = int(rng.choice([500, 6_000, 40_000]))
    kept, textbook = TruncatedSums(pmf, capacity), _Textbook(pmf, capacity)
    for target in (1e-6, 1e-2):
        n, risk = kept.largest_within(target, MAX_SEQS)
        expected_n, expected_risk = textbook.largest_within(target, MAX_SEQS)
        assert (n, risk.hex()) == (expected_n, expected_risk.hex())
    probes = [1, 3, 17, max(1, capacity // 30), capacity // 7 + 1]
    assert [kept.risk(n).hex() for n in probes] == [textbook.risk(n).hex() for n in probes]
    kept.release()
    assert [r.hex() for r in kept.risks(probes[::-1])] == [r.hex() for r in textbook.risks(probes[::-1])]


@pytest.mark.parametrize("seed", range(20))
def test_the_array_block_counts_are_the_scalar_ones_for_any_layout(seed: int) -> None:
    """KvCacheReport.blocks_for_sequences (what the occupancy reads) against blocks_for_sequence, on random
    layouts: every group kind, with and without a cap, block sizes that share no factor, lengths from 0."""
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(int(rng.integers(1, 5))):
        kind = str(rng.choice(["full", "sliding_window", "chunked_local", "mamba"]))
        size = int(rng.choice([1, 3, 16, 32, 64, 256, 528]))
        cap = int(rng.integers(1, 70_000)) if kind != "full" and rng.random() < 0.8 else None
        const = int(rng.integers(1, 9)) if kind == "mamba" else None
        groups.append(
            KvGroupReport(
                kind=kind, num_layers=1, page_bytes=0, block_size=size, tokens_cap=cap, blocks_per_sequence_const=const
            )
        )
    kv = KvCacheReport(
        bytes_per_token=0, state_bytes_per_sequence=0, kv_cache_dtype="auto", block_size=16, bytes_per_block=0,
        num_gpu_blocks=1000, tokens=16_000, max_concurrency=1.0, max_model_len=131_072, blocks_per_request=1,
        estimated_max_model_len=1, groups=groups,
    )  # fmt: skip
    tokens = np.concatenate([np.arange(0, 3_000), rng.integers(0, 1 << 20, 3_000)]).astype(np.int64)
    assert kv.blocks_for_sequences(tokens).tolist() == [kv.blocks_for_sequence(int(t)) for t in tokens]
    single = capacity_for_blocks(num_gpu_blocks=10, block_size=int(rng.choice([1, 16, 48])), max_model_len=8)
    assert single.blocks_for_sequences(tokens).tolist() == [single.blocks_for_sequence(int(t)) for t in tokens]


def _random_engine(seed: int) -> TruncatedSums:
    rng = np.random.default_rng(seed)
    pmf = rng.random(int(rng.choice([40, 300, 2_000]))) ** 3
    pmf[: int(rng.integers(0, len(pmf) // 2))] = 0.0
    return TruncatedSums(pmf / pmf.sum(), int(rng.choice([500, 6_000, 40_000])))


@pytest.mark.parametrize("seed", range(12))
def test_the_kept_mass_is_the_products_mass(seed: int) -> None:
    """_kept_mass (the direct sum that screens candidates) against the mass of the FFT product it stands
    for, on powers and sums of every size: the same to ~1e-13, far inside the 1e-9 the screen leaves."""
    engine = _random_engine(seed)
    sums = [engine._sum_of(n) for n in (1, 3, 7, 12, 40)]
    for a, b in itertools.product(sums + [engine._power(k) for k in range(5)], repeat=2):
        assert _kept_mass(a, b, engine.capacity) == pytest.approx(engine._mul(a, b).mass, abs=1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_the_screen_skips_products_and_changes_no_bit(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the kept-mass screen the search computes fewer FFT products, and its answer and risk are
    bit-identical to the search that computes every product (the screen patched to decide nothing)."""
    products: dict[str, int] = {}

    def search(label: str, target: float) -> tuple[int, str]:
        engine = _random_engine(seed)
        original = engine._mul

        def counted(a: _Truncated, b: _Truncated) -> _Truncated:
            products[label] = products.get(label, 0) + 1
            return original(a, b)

        engine._mul = counted  # type: ignore[method-assign]
        n, risk = engine.largest_within(target, MAX_SEQS)
        return n, risk.hex()

    for target in (1e-6, 1e-3, 0.05):
        screened = search("screened", target)
        with monkeypatch.context() as patched:
            patched.setattr("planner.workload.convolution._kept_mass", lambda a, b, capacity: 1.0)
            assert search("every product", target) == screened
    every = products.get("every product", 0)
    # (some draws leave nothing to multiply: one sequence already overflows a small capacity)
    assert products.get("screened", 0) < every or every == 0


class _ScalarOnlyCapacity:
    """A capacity written against the protocol's required members only (no ``blocks_for_sequences``)."""

    def __init__(self, inner: KvCacheReport) -> None:
        self._inner = inner
        self.block_size, self.max_model_len = inner.block_size, inner.max_model_len
        self.max_concurrency, self.usable_blocks, self.groups = inner.max_concurrency, inner.usable_blocks, inner.groups

    def blocks_for_sequence(self, tokens: int) -> int:
        return self._inner.blocks_for_sequence(tokens)


def test_a_capacity_without_the_array_form_gives_the_same_advice() -> None:
    kv = KvCacheReport(
        bytes_per_token=0, state_bytes_per_sequence=0, kv_cache_dtype="auto", block_size=16, bytes_per_block=0,
        num_gpu_blocks=9_000, tokens=144_000, max_concurrency=1.1, max_model_len=8_192, blocks_per_request=512,
        estimated_max_model_len=1, groups=[
            KvGroupReport(kind="full", num_layers=1, page_bytes=0, block_size=16),
            KvGroupReport(kind="sliding_window", num_layers=1, page_bytes=0, block_size=16, tokens_cap=1_024),
        ],
    )  # fmt: skip
    scalar = _ScalarOnlyCapacity(kv)
    tokens = np.arange(0, 9_000, dtype=np.int64)
    assert block_lookup(scalar, tokens).tolist() == block_lookup(kv, tokens).tolist()
    assert risk_bounded_concurrency(scalar, CHAT).model_dump() == risk_bounded_concurrency(kv, CHAT).model_dump()
