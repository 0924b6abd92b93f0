"""The simulated scheduler follows vLLM V1's rules (chunked prefill, limits, recompute preemption)."""

from __future__ import annotations

import random

from planner.sim.engine import Engine, EngineConfig, SpeedModel
from planner.sim.scheduler import Request, Status


def _config(**overrides: object) -> EngineConfig:
    base: dict[str, object] = dict(
        num_gpu_blocks=200,
        block_size=16,
        max_model_len=4096,
        max_num_seqs=4,
        max_num_batched_tokens=256,
        enable_prefix_caching=False,
        check_invariants=True,
    )
    base.update(overrides)
    return EngineConfig(**base)  # type: ignore[arg-type]


def _prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1, 30000) for _ in range(n)]


def test_chunked_prefill_respects_the_token_budget_and_the_sequence_limit() -> None:
    engine = Engine(_config())
    rng = random.Random(1)
    for i in range(10):
        engine.add_request(Request(f"r{i}", _prompt(rng, 700), max_tokens=20))
    while engine.has_work:
        out = engine.scheduler.schedule()
        # Undo nothing: this test drives schedule() itself, so mirror Engine.step's bookkeeping.
        assert out.num_scheduled_tokens <= 256
        assert len(engine.scheduler.running) <= 4
        assert all(count > 0 for _, count in out.scheduled)
        for request, _ in out.scheduled:
            if request.num_computed_tokens >= request.num_tokens:
                request.append_output(1)
                if len(request.output_token_ids) >= request.max_tokens:
                    engine.scheduler.remove(request)
    assert engine.kv.pool.num_free_blocks() == 199


def test_a_long_prompt_is_prefilled_in_chunks() -> None:
    engine = Engine(_config(max_num_batched_tokens=128))
    request = Request("long", _prompt(random.Random(2), 1000), max_tokens=1)
    engine.add_request(request)
    chunks = []
    while engine.has_work:
        before = request.num_computed_tokens
        engine.step()
        chunks.append(request.num_computed_tokens - before if request.status is not Status.FINISHED else None)
    assert chunks[:7] == [128] * 7  # 1000 tokens = 7 full chunks of 128 + 104
    assert len(request.output_token_ids) == 1


def test_preemption_takes_the_newest_running_request_and_resets_it() -> None:
    engine = Engine(_config(num_gpu_blocks=21, max_num_seqs=3, max_num_batched_tokens=512, reserve_full_prompt=False))
    rng = random.Random(3)
    requests = [Request(f"r{i}", _prompt(rng, 64), max_tokens=200, ignore_eos=True) for i in range(3)]
    for request in requests:
        engine.add_request(request)
    for _ in range(2000):
        result = engine.step()
        if result.stats.num_preempted:
            break
    victim = requests[2]
    assert victim.status is Status.PREEMPTED
    assert victim.num_preemptions == 1
    assert victim.num_computed_tokens == 0
    assert engine.scheduler.waiting[0] is victim  # prepended to the waiting queue
    assert engine.kv.blocks_of(victim.request_id) == []
    assert all(r.status is Status.RUNNING for r in requests[:2])
    while engine.has_work:
        engine.step()
    assert all(len(r.output_token_ids) == 200 for r in requests)  # recompute, then continue


def test_same_seed_same_run_different_seed_different_tokens() -> None:
    def run(seed: int) -> tuple[list[list[int]], float, int]:
        engine = Engine(_config(seed=seed, num_gpu_blocks=40, eos_probability=0.02))
        rng = random.Random(4)
        requests = [Request(f"r{i}", _prompt(rng, 90), max_tokens=120) for i in range(6)]
        for request in requests:
            engine.add_request(request)
        while engine.has_work:
            engine.step()
        return [r.output_token_ids for r in requests], engine.now, engine.total_preemptions

    assert run(5) == run(5)
    assert run(5)[0] != run(6)[0]


def test_prefix_cache_hits_are_counted_in_tokens() -> None:
    engine = Engine(_config(enable_prefix_caching=True))
    prompt = _prompt(random.Random(5), 100)
    first = Request("a", list(prompt), max_tokens=4)
    engine.add_request(first)
    while engine.has_work:
        engine.step()
    second = Request("b", list(prompt), max_tokens=4)
    engine.add_request(second)
    result = engine.step()
    # 6 full blocks (96 tokens) of the 100-token prompt are reused; the rest is computed.
    assert second.num_cached_tokens == 96
    assert (result.stats.prefix.queries, result.stats.prefix.hits) == (100, 96)


def test_step_time_follows_the_speed_model() -> None:
    speed = SpeedModel(base_s=0.01, per_token_s=0.001, per_context_token_s=0.0)
    engine = Engine(_config(speed=speed))
    engine.add_request(Request("a", _prompt(random.Random(6), 100), max_tokens=2))
    first = engine.step()  # prefill of 100 tokens
    second = engine.step()  # one decode token
    assert abs(first.duration - (0.01 + 0.1)) < 1e-12
    assert abs(second.duration - 0.011) < 1e-12
    assert abs(engine.now - 0.121) < 1e-12


def test_full_prompt_reservation_blocks_admission_from_0_19() -> None:
    def running_after_first_step(reserve: bool) -> int:
        rng = random.Random(8)
        engine = Engine(_config(num_gpu_blocks=20, max_num_batched_tokens=256, reserve_full_prompt=reserve))
        for i in range(2):
            engine.add_request(Request(f"r{i}", _prompt(rng, 200), max_tokens=5))
        engine.step()
        return len(engine.scheduler.running)

    # r0 takes 200 tokens (13 of 19 usable blocks); 56 tokens of budget remain for r1. Before 0.19 only
    # r1's first chunk (4 blocks) must fit; from 0.19 its whole prompt (13 blocks) must.
    assert running_after_first_step(reserve=False) == 2
    assert running_after_first_step(reserve=True) == 1
