"""KV block pool and per-request block tables, allocated block by block the way vLLM V1 does.

Modelled on vllm 0.19.0 ``vllm/v1/core/block_pool.py: BlockPool`` and
``vllm/v1/core/kv_cache_manager.py: KVCacheManager`` for one full-attention KV-cache group:

* block 0 is taken out of the free queue at start-up as the *null block* and never handed out, so
  ``num_gpu_blocks - 1`` blocks serve requests;
* free blocks sit in an LRU queue; a request's blocks are freed tail first, so the tail of a sequence
  is evicted before its (more shareable) head;
* with prefix caching, every *full* block gets a hash chained from its parent's hash and stays in the
  cache after it is freed, until the allocator pops it from the free queue for someone else
  ("evictable" blocks count as free, as in ``BlockPool.get_usage``);
* ``kv_cache_usage_perc = 1 - free / (num_gpu_blocks - 1)``.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from planner.errors import KvPlannerError
from planner.units import cdiv


class AllocatorInvariantError(KvPlannerError, AssertionError):
    """The simulator's block accounting contradicts itself (a simulator bug, never user input)."""


class Block:
    __slots__ = ("block_hash", "block_id", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: bytes | None = None

    def __repr__(self) -> str:
        return f"Block({self.block_id}, ref={self.ref_cnt})"


def hash_block(parent: bytes | None, tokens: Sequence[int]) -> bytes:
    """Chained block hash (vLLM hashes the parent hash with the block's token ids; sha256 by default)."""
    digest = hashlib.sha256(parent or b"root")
    digest.update(b",".join(str(token).encode() for token in tokens))
    return digest.digest()


class BlockPool:
    """All KV blocks of one engine."""

    def __init__(self, num_gpu_blocks: int, *, enable_caching: bool) -> None:
        if num_gpu_blocks < 2:
            raise AllocatorInvariantError("a block pool needs the null block plus at least one block")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.blocks = [Block(i) for i in range(num_gpu_blocks)]
        # OrderedDict as the doubly linked free list: O(1) pop from the head, append to the tail and
        # removal from the middle (a cache hit "touches" an evictable block).
        self._free: OrderedDict[int, Block] = OrderedDict((b.block_id, b) for b in self.blocks)
        self.cached: dict[bytes, Block] = {}
        # vLLM: "self.null_block = self.free_block_queue.popleft()".
        _, self.null_block = self._free.popitem(last=False)

    def num_free_blocks(self) -> int:
        return len(self._free)

    def usage(self) -> float:
        total = self.num_gpu_blocks - 1
        return 1.0 - self.num_free_blocks() / total

    def allocate(self, count: int) -> list[Block]:
        if count > len(self._free):
            raise AllocatorInvariantError(f"asked for {count} blocks with {len(self._free)} free")
        out: list[Block] = []
        for _ in range(count):
            _, block = self._free.popitem(last=False)
            if block.block_hash is not None:
                # Reusing an evictable cached block evicts it from the prefix cache.
                if self.cached.get(block.block_hash) is block:
                    del self.cached[block.block_hash]
                block.block_hash = None
            block.ref_cnt = 1
            out.append(block)
        return out

    def touch(self, blocks: Iterable[Block]) -> None:
        """A prefix-cache hit: take the blocks out of the free queue (if evictable) and reference them."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self._free[block.block_id]
            block.ref_cnt += 1

    def free(self, ordered: Iterable[Block]) -> None:
        for block in ordered:
            block.ref_cnt -= 1
            if block.ref_cnt < 0:
                raise AllocatorInvariantError(f"{block} freed more often than referenced")
            if block.ref_cnt == 0:
                self._free[block.block_id] = block

    def cache(self, block: Block, block_hash: bytes) -> None:
        if not self.enable_caching or block.block_hash is not None:
            return
        block.block_hash = block_hash
        # First writer wins, as in vLLM: a duplicate block stays private to its request.
        self.cached.setdefault(block_hash, block)

    def lookup(self, block_hash: bytes) -> Block | None:
        return self.cached.get(block_hash)

    def is_free(self, block: Block) -> bool:
        return block.block_id in self._free


class SequenceState:
    """The token sequence a request's blocks hold (prompt + generated tokens)."""

    __slots__ = ("block_hashes", "request_id", "token_ids")

    def __init__(self, request_id: str, token_ids: list[int]) -> None:
        self.request_id = request_id
        self.token_ids = token_ids
        self.block_hashes: list[bytes] = []

    def full_block_hashes(self, block_size: int) -> list[bytes]:
        """Hashes of every full block of the current tokens (extended lazily as tokens arrive)."""
        full = len(self.token_ids) // block_size
        while len(self.block_hashes) < full:
            index = len(self.block_hashes)
            parent = self.block_hashes[-1] if self.block_hashes else None
            chunk = self.token_ids[index * block_size : (index + 1) * block_size]
            self.block_hashes.append(hash_block(parent, chunk))
        return self.block_hashes[:full]


class KVCacheManager:
    """Block tables of running requests over one :class:`BlockPool`."""

    def __init__(self, num_gpu_blocks: int, block_size: int, max_model_len: int, *, enable_caching: bool):
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.pool = BlockPool(num_gpu_blocks, enable_caching=enable_caching)
        self.req_blocks: dict[str, list[Block]] = {}
        self._num_cached: dict[str, int] = {}

    @property
    def enable_caching(self) -> bool:
        return self.pool.enable_caching

    def usage(self) -> float:
        return self.pool.usage()

    def blocks_of(self, request_id: str) -> list[Block]:
        return self.req_blocks.get(request_id, [])

    def computed_blocks(self, seq: SequenceState, num_tokens: int) -> tuple[list[Block], int]:
        """Longest prefix-cache hit of a request that has computed nothing yet.

        At most ``num_tokens - 1`` tokens may hit: the last token must be computed to get logits.
        """
        if not self.enable_caching:
            return [], 0
        max_hit_blocks = (num_tokens - 1) // self.block_size
        hits: list[Block] = []
        for block_hash in seq.full_block_hashes(self.block_size)[:max_hit_blocks]:
            block = self.pool.lookup(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits, len(hits) * self.block_size

    def blocks_needed(self, request_id: str, num_tokens: int, new_computed: Sequence[Block] = ()) -> int:
        """Blocks that must come out of the free queue to hold ``num_tokens`` tokens."""
        tokens = min(num_tokens, self.max_model_len)
        required = cdiv(tokens, self.block_size)
        new_blocks = max(0, required - len(self.blocks_of(request_id)) - len(new_computed))
        # Evictable cache hits sit in the free queue: touching them uses free blocks too.
        evictable = sum(1 for block in new_computed if block.ref_cnt == 0)
        return new_blocks + evictable

    def can_fit(self, request_id: str, num_tokens: int, new_computed: Sequence[Block] = ()) -> bool:
        return self.blocks_needed(request_id, num_tokens, new_computed) <= self.pool.num_free_blocks()

    def allocate_slots(
        self,
        seq: SequenceState,
        num_computed_tokens: int,
        num_new_tokens: int,
        new_computed: Sequence[Block] = (),
    ) -> list[Block] | None:
        """Give the request blocks for ``num_new_tokens`` more tokens, or None if they do not fit.

        ``num_computed_tokens`` already includes the prefix-cache hit of ``new_computed``.
        """
        request_id = seq.request_id
        total = num_computed_tokens + num_new_tokens
        if self.blocks_needed(request_id, total, new_computed) > self.pool.num_free_blocks():
            return None
        table = self.req_blocks.setdefault(request_id, [])
        if new_computed:
            self.pool.touch(new_computed)
            table.extend(new_computed)
            self._num_cached[request_id] = len(table)
        required = cdiv(min(total, self.max_model_len), self.block_size)
        fresh = self.pool.allocate(max(0, required - len(table)))
        table.extend(fresh)
        self._cache_full_blocks(seq, min(total, len(seq.token_ids)))
        return fresh

    def _cache_full_blocks(self, seq: SequenceState, num_known_tokens: int) -> None:
        if not self.enable_caching:
            return
        table = self.req_blocks[seq.request_id]
        done = self._num_cached.get(seq.request_id, 0)
        full = min(num_known_tokens // self.block_size, len(table))
        if full <= done:
            return
        hashes = seq.full_block_hashes(self.block_size)
        for index in range(done, full):
            self.pool.cache(table[index], hashes[index])
        self._num_cached[seq.request_id] = full

    def cache_computed(self, seq: SequenceState, num_computed_tokens: int) -> None:
        """Hash blocks that became full once sampled tokens are known (vLLM caches on the next step)."""
        if seq.request_id in self.req_blocks:
            self._cache_full_blocks(seq, min(num_computed_tokens, len(seq.token_ids)))

    def free(self, request_id: str) -> None:
        table = self.req_blocks.pop(request_id, [])
        self._num_cached.pop(request_id, None)
        # Tail first, so the tail of the sequence is evicted before its head.
        self.pool.free(reversed(table))

    def check_invariants(self) -> None:
        """Independent recount of the pool (used by tests and by ``--check-invariants``)."""
        pool = self.pool
        counted: dict[int, int] = {}
        for table in self.req_blocks.values():
            for block in table:
                if block is pool.null_block:
                    raise AllocatorInvariantError("the null block was handed to a request")
                counted[block.block_id] = counted.get(block.block_id, 0) + 1
        for block in pool.blocks[1:]:
            refs = counted.get(block.block_id, 0)
            if block.ref_cnt != refs:
                raise AllocatorInvariantError(f"{block}: {refs} requests hold it")
            if (refs == 0) != pool.is_free(block):
                raise AllocatorInvariantError(f"{block}: free-queue membership disagrees with ref_cnt")
        if pool.is_free(pool.null_block):
            raise AllocatorInvariantError("the null block is in the free queue")
        in_use = sum(1 for block in pool.blocks[1:] if block.ref_cnt > 0)
        if in_use + pool.num_free_blocks() != pool.num_gpu_blocks - 1:
            raise AllocatorInvariantError(
                f"{in_use} used + {pool.num_free_blocks()} free != {pool.num_gpu_blocks - 1} usable blocks"
            )
