"""End to end on 127.0.0.1: simulator -> exporter -> retuner -> a new limit -> no more preemptions.

One simulated vLLM 0.19.0 server has 65 KV blocks of 16 tokens (64 usable) and ``--max-num-seqs 4``.
Every request has a 128-token prompt and generates 256 tokens, so it ends up holding
ceil((128 + 256 - 1) / 16) = 24 blocks: two fit (48), four do not (96).

1. Load that fits (two requests at a time): no preemption, and the exporter says so.
2. Load that overflows (eight at a time, three waves): the simulator preempts, the exporter exposes the
   preemptions, and after three observations with pressure (the default persistence) the retuner
   recommends a lower ``--max-num-seqs`` -- from the exact mean lengths and the real block count, in
   one bounded step -- and records an Event with a stable reason.
3. A fresh server with the recommended limit takes the same overflowing load without any preemption.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from admission.exporter.server import Parts, RunningExporter
from admission.exporter.service import Exporter, ScrapeSettings
from admission.observations.targets import Target, parse_static_target
from admission.retuner import Retuner, RetunerSettings
from admission.retuner.kube import KubeWriter
from admission.retuner.owners import OwnerResolver
from planner.sim import SimulatorSettings, start_simulator
from planner.sim.server import RunningSimulator
from tests.retuner.fake_kube import FakeCluster, owner_ref

pytestmark = pytest.mark.slow  # real servers and load: seconds per test

BLOCKS, BLOCK_SIZE, PROMPT, OUTPUT = 65, 16, 128, 256


def _sim(max_num_seqs: int, seed: int) -> RunningSimulator:
    return start_simulator(
        SimulatorSettings(
            model="org/chat-model",
            num_gpu_blocks=BLOCKS,
            block_size=BLOCK_SIZE,
            max_model_len=1024,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=2048,
            vllm_version="0.19.0",
            time_scale=0.01,
            seed=seed,
            check_invariants=True,
        )
    )


async def _load(url: str, concurrent: int, rng: random.Random) -> None:
    async with httpx.AsyncClient(timeout=120) as client:

        async def one() -> None:
            prompt = [rng.randrange(1, 30000) for _ in range(PROMPT)]  # distinct: no prefix-cache help
            response = await client.post(
                f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": OUTPUT, "ignore_eos": True}
            )
            response.raise_for_status()
            assert response.json()["usage"]["completion_tokens"] == OUTPUT

        await asyncio.gather(*(one() for _ in range(concurrent)))


def _preemptions(text: str, pod: str) -> float:
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "kv_planner_preemptions_total" and s.labels.get("pod") == pod
    )


@pytest.fixture
def targets() -> Iterator[list[Target]]:
    yield []


def test_overflow_is_seen_and_the_recommended_limit_removes_preemptions(targets: list[Target]) -> None:
    rng = random.Random(42)
    exporter = Exporter(ScrapeSettings(), targets=lambda: targets, include_process_metrics=False)
    # The pod chat-0 belongs to Deployment chat (through its ReplicaSet), as the fake API says.
    cluster = FakeCluster()
    rs_name, rs_uid = cluster.deployment("ml", "chat")
    cluster.pod("ml", "chat-0", owners=[owner_ref("ReplicaSet", rs_name, rs_uid)])
    settings = RetunerSettings(min_requests=5, min_dwell_s=0, namespaces=("ml",))
    retuner = Retuner(
        settings,
        writer=KubeWriter(cluster, cluster, settings),
        resolver=OwnerResolver(cluster, cluster, settings.namespaces),
    )
    exporter.state.add_provider(retuner.families)

    def observe(now: float) -> None:
        snapshot = asyncio.run(exporter.snapshot(5.0, record=False))
        retuner.publish(retuner.observe(snapshot, now=now, owners=retuner.resolve_owners(snapshot)))

    with _sim(max_num_seqs=4, seed=1) as sim, RunningExporter(Parts(exporter=exporter)).start() as server:
        targets.append(
            parse_static_target(
                f"{sim.metrics_url}#namespace=ml&pod=chat-0&workload=chat&max-num-seqs=4&max-model-len=1024"
            )
        )
        scrape = lambda: httpx.get(f"{server.url}/metrics", timeout=10).text  # noqa: E731

        # 1. Load that fits.
        asyncio.run(_load(sim.url, 2, rng))
        assert sim.snapshot()["engines"][0]["preemptions"] == 0
        assert _preemptions(scrape(), "chat-0") == 0
        observe(0.0)
        assert retuner.decisions[("ml", "chat")].action == "hold"

        # 2. Load that overflows, in three waves with an observation after each.
        for wave in range(3):
            asyncio.run(_load(sim.url, 8, rng))
            observe(60.0 * (wave + 1))
        preempted = sim.snapshot()["engines"][0]["preemptions"]
        assert preempted > 0
        assert _preemptions(scrape(), "chat-0") == preempted
        decision = retuner.decisions[("ml", "chat")]
        assert decision.action == "lower" and decision.reason == "PreemptionsPersist"
        assert decision.current == 4 and decision.recommended is not None and decision.recommended < 4
        recommended = decision.recommended
        page = scrape()
        assert f'kv_planner_max_num_seqs_recommended{{namespace="ml",workload="chat"}} {float(recommended)}' in page
        assert [e["reason"] for _, e in cluster.events] == ["PreemptionsPersist"]

    # 3. The same overflowing load against a server running the recommended limit.
    with _sim(max_num_seqs=recommended, seed=2) as sim:
        for _ in range(3):
            asyncio.run(_load(sim.url, 8, rng))
        assert sim.snapshot()["engines"][0]["preemptions"] == 0
        targets[:] = [parse_static_target(f"{sim.metrics_url}#namespace=ml&pod=chat-1&workload=chat")]
        snapshot = asyncio.run(exporter.snapshot(5.0))
        assert [e.preemptions_total for e in snapshot.targets[0].engines] == [0.0]
        assert snapshot.targets[0].engines[0].prompt_tokens[-1][1] == 24  # type: ignore[index]
