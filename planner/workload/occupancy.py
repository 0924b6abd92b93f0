"""What one running sequence holds: the distribution of its KV blocks at a random moment.

Model (docs/workload.md, "What a running sequence holds"):

* A request has prompt ``P`` and output ``O`` tokens, drawn independently from the profile. vLLM
  refuses prompts of ``max_model_len`` tokens or more, and stops an output at ``max_model_len - P``
  tokens, so a request runs ``min(O, M - P)`` decode steps.
* While it generates its ``t``-th token it holds ``blocks_for_sequence(P + t)`` blocks (all KV groups,
  whole blocks, sliding windows capped, Mamba state constant: :meth:`KvCapacity.blocks_for_sequence`).
* In steady state a running request seen at a random decode step is **length-biased**: a request that
  runs twice as many steps is twice as likely to be seen. Seen at a uniformly random one of its steps,
  the step ``T`` it is at has ``P(T = t) = P(O >= t) / E[O]`` (the renewal "equilibrium" law), and for
  a given prompt ``p`` only ``t <= M - p`` occur. So the tokens held, ``L = P + T``, have
  ``P(L = l) ∝ sum_{p + t = l} P(P = p) P(O >= t)`` for ``l <= M`` — one convolution, then a
  normalisation by ``E[min(O, M - P)]``.
* Prefix caching credit ``h``: a fraction ``h`` of each prompt is held in blocks shared with other
  requests, so a sequence holds its own blocks for ``ceil((1 - h) P) + T`` tokens. The context cap is
  then applied to the credited length, which lets outputs run slightly longer than vLLM would: a
  conservative error.

Prefill time is not modelled (a prompt is computed in one or a few steps, decode takes ``O`` steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.errors import WorkloadProfileError
from planner.workload.capacity import KvCapacity
from planner.workload.convolution import convolve
from planner.workload.distribution import FloatArray, IntArray, LengthDistribution
from planner.workload.profile import WorkloadProfile

MAX_TOKEN_CELLS = 1 << 18
"""Token lengths are exact up to 262,144-token contexts; longer contexts use cells of ``r`` tokens,
each rounded up to its upper edge (conservative: a sequence is never counted shorter than it is)."""


@dataclass(frozen=True)
class Occupancy:
    """The per-running-sequence block distribution and the request statistics behind it."""

    block_pmf: FloatArray
    """``block_pmf[b]`` = P(a running sequence holds ``b`` blocks)."""
    token_resolution: int
    max_model_len: int
    rejected_fraction: float
    """Share of prompts vLLM refuses (``>= max_model_len`` tokens); they hold no blocks."""
    mean_prompt_tokens: float
    mean_output_tokens: float
    """Mean output of an admitted request, cut at ``max_model_len - prompt``."""
    mean_decode_steps: float
    """``E[min(O, M - P)]``: decode steps per request (after the prefix credit)."""
    mean_tokens_held: float
    """Mean tokens a running sequence holds (length-biased)."""

    @property
    def mean_blocks(self) -> float:
        return float((np.arange(len(self.block_pmf)) * self.block_pmf).sum())

    def blocks_quantile(self, level: float) -> int:
        cumulative = np.cumsum(self.block_pmf)
        return int(np.searchsorted(cumulative, level - 1e-12, side="left"))


def block_lookup(kv: KvCapacity, tokens: IntArray) -> IntArray:
    """``kv.blocks_for_sequence(t)`` for every ``t`` in ``tokens`` (the capacity's array form: the same
    integer arithmetic in one numpy pass instead of a Python call per block boundary, which was a fifth of
    a long-context risk search). A capacity without the array form (it is optional in
    :class:`KvCapacity`) is asked entry by entry: the same numbers, slower."""
    batched = getattr(kv, "blocks_for_sequences", None)
    if batched is None:
        return np.fromiter((kv.blocks_for_sequence(int(t)) for t in tokens), dtype=np.int64, count=len(tokens))
    blocks: IntArray = np.asarray(batched(tokens), dtype=np.int64)
    return blocks


def running_occupancy(kv: KvCapacity, profile: WorkloadProfile, *, max_model_len: int) -> Occupancy:
    """The block distribution of one running sequence under ``profile`` (see the module docstring)."""
    m = max_model_len
    if m < 2:
        raise WorkloadProfileError(f"max_model_len must be at least 2 tokens, got {m}")
    r = max(1, math.ceil(m / MAX_TOKEN_CELLS))
    k = math.ceil(m / r)
    edges = np.minimum(np.arange(k + 1, dtype=np.float64) * r, m)

    prompt_pmf, prompt_values, rejected = _prompt_cells(profile.prompt_distribution, m, edges)
    # Means are products summed, not np.dot: BLAS splits a long dot product over its threads, and the
    # split changes the last bits with the thread count (a library caller may run several).
    mean_prompt = float((prompt_pmf * prompt_values).sum())
    survival = _output_survival(profile.output_distribution, m, r, k)
    # E[min(O, M - P)]: a prompt in cell i leaves room for k - i cells of output.
    room = np.cumsum(survival)[::-1]
    mean_output = float((prompt_pmf * room).sum())

    h = profile.prefix_cache_hit_rate
    if h > 0.0:
        held = np.ceil((1.0 - h) * prompt_values)
        cells = np.ceil(held / r).astype(np.int64)
        prompt_pmf = np.bincount(cells, weights=prompt_pmf, minlength=k + 1)[: k + 1].astype(np.float64)

    joint = convolve(prompt_pmf, survival)[: k + 1]  # cells beyond k are longer than max_model_len
    decode_steps = float(joint.sum())
    if decode_steps <= 0.0:
        raise WorkloadProfileError("no request of this profile can run within max_model_len")
    length_pmf = joint / decode_steps

    held_tokens = np.minimum(np.arange(k + 1, dtype=np.int64) * r, m)
    held_tokens[0] = 0
    blocks = block_lookup(kv, held_tokens[1:])
    block_pmf = np.bincount(blocks, weights=length_pmf[1:], minlength=1).astype(np.float64)
    return Occupancy(
        block_pmf=block_pmf,
        token_resolution=r,
        max_model_len=m,
        rejected_fraction=rejected,
        mean_prompt_tokens=mean_prompt,
        mean_output_tokens=mean_output,
        mean_decode_steps=decode_steps,
        mean_tokens_held=float((held_tokens * length_pmf).sum()),
    )


def _prompt_cells(dist: LengthDistribution, m: int, edges: FloatArray) -> tuple[FloatArray, FloatArray, float]:
    """Prompt mass per token cell (admitted prompts only, normalised) and each cell's token value."""
    # One cell per token (r = 1: edges are 0..m) reads the distribution's kept table (the same values).
    if len(edges) == m + 1:
        cdf = dist.cdf_tokens(m + 1, cap=m)
        accepted = float(cdf[m - 1])
    else:
        cdf = dist.cdf(edges, cap=m)
        accepted = float(dist.cdf(np.array([m - 1.0]), cap=m)[0])
    if accepted <= 0.0:
        raise WorkloadProfileError(
            f"every prompt of this profile is {m} tokens or longer: vLLM would refuse all of them",
            hint="raise --max-model-len or check the prompt percentiles",
        )
    pmf = np.diff(cdf, prepend=0.0)
    pmf[0] = 0.0
    # The last cell ends at max_model_len - 1: a prompt of max_model_len tokens is refused.
    pmf[-1] = max(0.0, accepted - float(cdf[-2]))
    values = edges.copy()
    values[-1] = m - 1
    pmf = np.clip(pmf, 0.0, None)
    return pmf / pmf.sum(), values, 1.0 - accepted


def _output_survival(dist: LengthDistribution, m: int, r: int, k: int) -> FloatArray:
    """``P(O >= t)`` summed over each cell of ``r`` decode steps (index 0 = no step)."""
    if r == 1:  # F(t - 1) for t = 0..k, from the distribution's kept table (t = 0 is set to 0 below)
        below = np.concatenate(([0.0], dist.cdf_tokens(k, cap=m)))
    else:
        below = dist.cdf((np.arange(k + 1, dtype=np.float64) - 1.0) * r + (r - 1) / 2.0, cap=m)
    survival: FloatArray = (1.0 - below) * r
    survival[0] = 0.0
    return survival
