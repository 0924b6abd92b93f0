"""A closed-loop load on the simulator's engine, on its virtual clock (no server, no wall time).

``clients`` users each send one request of ``prompt`` + ``output`` tokens and send the next as soon as
the previous one finishes -- a queue that never drains, the load of issue 15. The engine is the
simulator's block-by-block vLLM 0.19 scheduler; pages are rendered by the simulator's own metrics
recorder and read back by the exporter's parser, so the retuner sees exactly what it would scrape.
A "rollout" is a new :class:`ClosedLoop` (a new pod: counters and histograms start again).
"""

from __future__ import annotations

import random
from functools import lru_cache

from admission.exporter.normalize import parse_page
from admission.observations.model import Snapshot, TargetObservation
from admission.observations.targets import Target
from planner.sim.plan_bridge import PlannedCache, plan_cache
from planner.sim.runtime import SimulatorRuntime
from planner.sim.scheduler import Request
from planner.sim.settings import SimulatorSettings
from planner.vllm.args import ServingArgs

MODEL, GPU, VERSION, CONTEXT = "meta-llama/Llama-3.1-8B-Instruct", "L4", "0.19.0", 8192


@lru_cache(maxsize=1)
def planned() -> PlannedCache:
    """The cache of ``planner simulate serve --model meta-llama/Llama-3.1-8B-Instruct --gpu L4
    --max-model-len 8192 --max-num-seqs 64 --vllm-version 0.19.0`` (1,799 blocks of 16 tokens), the
    deployment of issue 15. It is kept for every ``--max-num-seqs`` so that the limit is one number
    (on a GPU, fewer sequences leave a little more memory for KV: the retuner reads the real block
    count from each page anyway)."""
    return plan_cache(MODEL, GPU, ServingArgs(max_model_len=CONTEXT, max_num_seqs=64), vllm_version=VERSION)


class ClosedLoop:
    def __init__(
        self,
        max_num_seqs: int,
        *,
        clients: int = 64,
        prompt: int = 1024,
        output: int = 1024,
        spread: float = 0.0,
        seed: int = 0,
    ) -> None:
        cache = planned()
        self.max_num_seqs = max_num_seqs
        self.settings = SimulatorSettings(
            model=MODEL,
            num_gpu_blocks=cache.num_gpu_blocks,
            block_size=cache.block_size,
            max_model_len=cache.max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=cache.max_num_batched_tokens or 2048,
            vllm_version=VERSION,
            speed=cache.speed,
            time_scale=0,
            seed=seed,
        )
        self.runtime = SimulatorRuntime(self.settings)
        self.engine = self.runtime.engines[0]
        self.prompt, self.output, self.spread = prompt, output, spread
        self._rng = random.Random(seed)
        self._sent = 0
        for _ in range(clients):
            self._send()

    def _length(self, mean: int) -> int:
        """``mean``, or uniform within ``mean x (1 +- spread)`` (variable-length loads)."""
        if not self.spread:
            return mean
        return max(1, round(mean * (1 + self.spread * (2 * self._rng.random() - 1))))

    def _send(self) -> None:
        prompt, output = self._length(self.prompt), self._length(self.output)
        tokens = [self._rng.randrange(1, 30000) for _ in range(prompt)]  # distinct: no prefix-cache help
        self.engine.add_request(
            Request(f"req-{self._sent}", tokens, max_tokens=output, ignore_eos=True, max_tokens_param=output)
        )
        self._sent += 1

    @property
    def preemptions(self) -> int:
        return self.engine.total_preemptions

    def run(self, seconds: float, *, stop_on_preemption: bool = False) -> None:
        """Serve for ``seconds`` of the engine's virtual time; each finished request is replaced at once."""
        until = self.engine.now + seconds
        while self.engine.now < until:
            result = self.engine.step()
            self.runtime.recorder.record(0, result.stats)
            for _ in result.stats.finished:
                self._send()
            if stop_on_preemption and self.engine.total_preemptions:
                return

    def observation(self, pod: str, *, workload: str = "llama") -> TargetObservation:
        engines, missing = parse_page(self.runtime.recorder.exposition().decode())
        target = Target(
            url=f"http://{pod}:8000/metrics",
            namespace="ml",
            pod=pod,
            workload=workload,
            workload_kind="Deployment",
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.settings.max_model_len,
        )
        return TargetObservation(target=target, up=True, engines=engines, missing=missing)

    def snapshot(self, pod: str) -> Snapshot:
        return Snapshot(targets=[self.observation(pod)])
