"""The block allocator against an independent oracle, and proof that the oracle catches one-block errors.

The oracle does not use the allocator's own bookkeeping:

* a request of P prompt and O output tokens never holds more than ceil((P + O - 1) / block_size)
  blocks (the last sampled token is never computed), and a running request holds exactly
  ceil(num_computed_tokens / block_size);
* block 0 is vLLM's null block, so N blocks serve N - 1 blocks of requests;
* free blocks = N - 1 - (distinct blocks referenced by running requests), and
  ``kv_cache_usage = 1 - free / (N - 1)``.

Four requests decoding in lock-step that need exactly 8 blocks each fit in 33 blocks (32 usable) with
no preemption and must be preempted with 32. An allocator that forgot the null block, reserved one
block too many at a block boundary, or leaked a block on free fails one of these checks; the
mutation tests below inject each of those errors and assert that the oracle notices.
"""

from __future__ import annotations

import math
import random

import pytest

from planner.sim import blocks as blocks_module
from planner.sim.engine import Engine, EngineConfig
from planner.sim.scheduler import Request, Status

BLOCK = 16
PROMPT = 100
OUTPUT = 29  # PROMPT + OUTPUT - 1 = 128 = exactly 8 blocks
PER_REQUEST = math.ceil((PROMPT + OUTPUT - 1) / BLOCK)
REQUESTS = 4


class OracleViolation(AssertionError):
    pass


def _engine(num_gpu_blocks: int, *, caching: bool = False, seqs: int = REQUESTS) -> Engine:
    return Engine(
        EngineConfig(
            num_gpu_blocks=num_gpu_blocks,
            block_size=BLOCK,
            max_model_len=2048,
            max_num_seqs=seqs,
            max_num_batched_tokens=4096,
            enable_prefix_caching=caching,
        )
    )


def _check_step(engine: Engine, requests: list[Request]) -> None:
    kv = engine.kv
    n = engine.config.num_gpu_blocks
    held: set[int] = set()
    for request in requests:
        table = kv.blocks_of(request.request_id)
        if request.status is Status.RUNNING:
            expected = math.ceil(min(request.num_computed_tokens, engine.config.max_model_len) / BLOCK)
            if len(table) != expected:
                raise OracleViolation(
                    f"{request.request_id} holds {len(table)} blocks for {request.num_computed_tokens} tokens"
                )
            bound = math.ceil((request.num_prompt_tokens + request.max_tokens - 1) / BLOCK)
            if len(table) > bound:
                raise OracleViolation(f"{request.request_id} holds {len(table)} > {bound} blocks")
            held.update(block.block_id for block in table)
        elif table:
            raise OracleViolation(f"{request.request_id} is {request.status.value} but holds blocks")
    if 0 in held:
        raise OracleViolation("the null block (block 0) was handed to a request")
    free = (n - 1) - len(held)
    if kv.pool.num_free_blocks() != free:
        raise OracleViolation(f"pool reports {kv.pool.num_free_blocks()} free blocks, oracle counts {free}")
    if abs(kv.usage() - (1 - free / (n - 1))) > 1e-12:
        raise OracleViolation(f"usage {kv.usage()} != 1 - {free}/{n - 1}")


def run_lockstep(num_gpu_blocks: int) -> tuple[int, float]:
    """Four equal requests arriving together; returns (preemptions, peak usage)."""
    engine = _engine(num_gpu_blocks)
    rng = random.Random(7)
    requests = [
        Request(f"r{i}", [rng.randrange(1, 30000) for _ in range(PROMPT)], max_tokens=OUTPUT, ignore_eos=True)
        for i in range(REQUESTS)
    ]
    for request in requests:
        engine.add_request(request)
    peak = 0.0
    for _ in range(10_000):
        if not engine.has_work:
            break
        result = engine.step()
        peak = max(peak, result.stats.kv_cache_usage)
        _check_step(engine, requests)
    else:
        raise OracleViolation("the engine did not finish")
    if any(len(r.output_token_ids) != OUTPUT for r in requests):
        raise OracleViolation("a request did not generate max_tokens")
    _check_step(engine, requests)
    if engine.kv.pool.num_free_blocks() != num_gpu_blocks - 1:
        raise OracleViolation("blocks leaked after every request finished")
    return engine.total_preemptions, peak


def assert_capacity_boundary() -> None:
    fits = REQUESTS * PER_REQUEST + 1  # + the null block
    preemptions, peak = run_lockstep(fits)
    if preemptions != 0:
        raise OracleViolation(f"{preemptions} preemptions although {REQUESTS} x {PER_REQUEST} blocks fit")
    if peak != 1.0:
        raise OracleViolation(f"peak usage {peak} at an exact fit, expected 1.0")
    preemptions, _ = run_lockstep(fits - 1)
    if preemptions == 0:
        raise OracleViolation("no preemption although the cache is one block short")


def test_allocator_matches_oracle_at_the_capacity_boundary() -> None:
    assert_capacity_boundary()


def test_random_workloads_keep_block_accounting_exact() -> None:
    rng = random.Random(11)
    for trial in range(6):
        engine = _engine(rng.randrange(20, 60), caching=trial % 2 == 0, seqs=rng.randrange(2, 9))
        shared = [rng.randrange(1, 30000) for _ in range(48)]  # shared prefix: exercises cache hits
        requests = []
        for i in range(14):
            prompt = (shared if rng.random() < 0.5 else []) + [
                rng.randrange(1, 30000) for _ in range(rng.randrange(1, 150))
            ]
            requests.append(Request(f"t{trial}-{i}", prompt, max_tokens=rng.randrange(1, 120), ignore_eos=True))
        pending = list(requests)
        for _ in range(20_000):
            if pending and rng.random() < 0.3:
                engine.add_request(pending.pop(0))
            if not engine.has_work and not pending:
                break
            if engine.has_work:
                engine.step()
                _check_step(engine, requests)
                engine.kv.check_invariants()
        assert all(r.status is Status.FINISHED for r in requests)
        assert engine.kv.pool.num_free_blocks() == engine.config.num_gpu_blocks - 1


# --- mutation tests: inject a one-block error, the oracle must fail ---------------------------


def test_oracle_catches_a_forgotten_null_block(monkeypatch: pytest.MonkeyPatch) -> None:
    original = blocks_module.BlockPool.__init__

    def no_null_block(self: blocks_module.BlockPool, num_gpu_blocks: int, *, enable_caching: bool) -> None:
        original(self, num_gpu_blocks, enable_caching=enable_caching)
        self._free[self.null_block.block_id] = self.null_block  # block 0 handed out like any other
        self._free.move_to_end(self.null_block.block_id, last=False)

    monkeypatch.setattr(blocks_module.BlockPool, "__init__", no_null_block)
    with pytest.raises(OracleViolation):
        assert_capacity_boundary()


def test_oracle_catches_one_block_too_many_at_a_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    def off_by_one(tokens: int, block_size: int) -> int:
        return tokens // block_size + 1  # wrong when tokens is a multiple of block_size

    monkeypatch.setattr(blocks_module, "cdiv", off_by_one)
    with pytest.raises(OracleViolation):
        assert_capacity_boundary()


def test_oracle_catches_a_block_leaked_on_free(monkeypatch: pytest.MonkeyPatch) -> None:
    original = blocks_module.KVCacheManager.free

    def leaky_free(self: blocks_module.KVCacheManager, request_id: str) -> None:
        table = self.req_blocks.get(request_id, [])
        if table:
            self.req_blocks[request_id] = table[:-1]  # the last block is never returned
        original(self, request_id)

    monkeypatch.setattr(blocks_module.KVCacheManager, "free", leaky_free)
    with pytest.raises(OracleViolation):
        assert_capacity_boundary()


def test_oracle_catches_usage_without_the_null_block_correction(monkeypatch: pytest.MonkeyPatch) -> None:
    def usage_over_all_blocks(self: blocks_module.BlockPool) -> float:
        return 1.0 - self.num_free_blocks() / self.num_gpu_blocks

    monkeypatch.setattr(blocks_module.BlockPool, "usage", usage_over_all_blocks)
    with pytest.raises(OracleViolation):
        assert_capacity_boundary()
