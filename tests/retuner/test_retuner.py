"""The retuner over exporter snapshots: aggregation per workload, counter resets, outputs, its loop."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from admission.observations.model import EngineObservation, Snapshot, TargetObservation
from admission.observations.targets import Target
from admission.retuner import Retuner, RetunerSettings
from admission.retuner.advice import AdviceInput, risk_bounded_max_num_seqs
from admission.retuner.kube import ANNOTATION
from admission.retuner.owners import Owner

INF = math.inf
PROMPT = [(100.0, 0.0), (200.0, 60.0), (500.0, 100.0), (INF, 100.0)]
OUTPUT = [(100.0, 20.0), (200.0, 50.0), (500.0, 100.0), (INF, 100.0)]


def obs(
    pod: str,
    preemptions: float,
    usage: float = 0.99,
    *,
    workload: str = "chat",
    engines: int = 1,
    waiting: float = 3,
    up: bool = True,
    max_num_seqs: int = 64,
) -> TargetObservation:
    target = Target(
        url=f"http://{pod}/metrics",
        namespace="ml",
        pod=pod,
        workload=workload,
        workload_kind="Deployment",
        max_num_seqs=max_num_seqs,
        max_model_len=4096,
    )
    if not up:
        return TargetObservation(target=target, up=False, error="timeout")
    return TargetObservation(
        target=target,
        up=True,
        engines=[
            EngineObservation(
                engine=str(i),
                model_name="m",
                kv_cache_usage=usage,
                num_gpu_blocks=2000 - i,
                block_size=16,
                preemptions_total=preemptions,
                running=10,
                waiting=waiting,
                prompt_tokens=PROMPT,
                generation_tokens=OUTPUT,
            )
            for i in range(engines)
        ],
    )


class Recorder:
    def __init__(self) -> None:
        self.inputs: list[AdviceInput] = []

    def __call__(self, data: AdviceInput) -> int | None:
        self.inputs.append(data)
        return 10


def test_preemption_deltas_survive_counter_resets_and_sum_over_pods() -> None:
    advisor = Recorder()
    retuner = Retuner(RetunerSettings(persist=2, min_dwell_s=0), advisor=advisor)
    retuner.observe(Snapshot(targets=[obs("a", 10, engines=2), obs("b", 5)]), now=0)
    first = retuner.observe(Snapshot(targets=[obs("a", 10, usage=0.6, engines=2), obs("b", 5, usage=0.6)]), now=60)
    assert first[("ml", "chat")].reason == "Steady"  # no new preemptions, usage in the band
    # Pod b restarted: its counter went from 5 to 2 -> 2 new preemptions, not -3.
    decisions = retuner.observe(Snapshot(targets=[obs("a", 10, usage=0.6, engines=2), obs("b", 2, usage=0.6)]), now=120)
    assert decisions[("ml", "chat")].reason == "NotPersistent"
    decisions = retuner.observe(Snapshot(targets=[obs("a", 11, usage=0.6, engines=2), obs("b", 2, usage=0.6)]), now=180)
    assert decisions[("ml", "chat")].action == "lower"
    assert decisions[("ml", "chat")].recommended == 32  # bounded: advisor said 10, one step halves 64
    data = advisor.inputs[-1]
    assert data.num_gpu_blocks == 1999  # the smallest engine decides
    assert data.prompt_buckets[-1] == (INF, 300.0)  # three engines' histograms summed
    assert data.max_model_len == 4096


def test_down_targets_and_other_workloads_are_kept_apart() -> None:
    retuner = Retuner(RetunerSettings(persist=1, min_dwell_s=0), advisor=lambda _: 10)
    retuner.observe(Snapshot(targets=[obs("a", 0, usage=0.6), obs("x", 0, workload="other", usage=0.2)]), now=0)
    decisions = retuner.observe(
        Snapshot(targets=[obs("a", 4), obs("x", 0, workload="other", usage=0.2), obs("dead", 0, up=False)]), now=60
    )
    assert decisions[("ml", "chat")].action == "lower"
    assert decisions[("ml", "other")].action == "hold"
    assert ("ml", "dead") not in decisions


def test_the_real_advisor_answers_from_histograms() -> None:
    limit = risk_bounded_max_num_seqs(
        AdviceInput(
            num_gpu_blocks=2000,
            block_size=16,
            max_model_len=4096,
            prompt_buckets=PROMPT,
            generation_buckets=OUTPUT,
            headroom=0.1,
            target_risk=0.01,
        )
    )
    # Requests of at most 500 + 500 tokens (<= 63 blocks): at least floor(1799 / 63) = 28 always fit.
    assert limit is not None and limit >= 28
    assert (
        risk_bounded_max_num_seqs(
            AdviceInput(
                num_gpu_blocks=2000,
                block_size=16,
                max_model_len=4096,
                prompt_buckets=[(INF, 0.0)],
                generation_buckets=[(INF, 0.0)],
                headroom=0.1,
                target_risk=0.01,
            )
        )
        is None
    )


class Writer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def event(self, ref: Any, reason: str, message: str, *, warning: bool = False) -> None:
        self.calls.append(("event", reason))

    def annotate(self, ref: Any, value: int) -> None:
        self.calls.append(("annotate", value))

    def apply(self, ref: Any, decision: Any) -> Any:
        from admission.retuner.kube import ApplyResult

        self.calls.append(("apply", decision.recommended))
        return ApplyResult(result="applied", detail="")


def _lowered(settings: RetunerSettings) -> tuple[Retuner, Writer]:
    writer = Writer()
    retuner = Retuner(settings, advisor=lambda _: 10, writer=writer)  # type: ignore[arg-type]
    # Pod a resolved (through the API) to Deployment chat: the only kind of owner the retuner writes to.
    owners = {("ml", "a"): Owner(namespace="ml", kind="Deployment", name="chat", uid="u", verdict="verified")}
    retuner.observe(Snapshot(targets=[obs("a", 0, usage=0.6)]), now=0, owners=owners)
    retuner.publish(retuner.observe(Snapshot(targets=[obs("a", 5)]), now=60, owners=owners))
    return retuner, writer


def test_outputs_by_mode() -> None:
    base = dict(persist=1, min_dwell_s=0, namespaces=("ml",))
    _, writer = _lowered(RetunerSettings(mode="recommend", **base))  # type: ignore[arg-type]
    assert writer.calls == [("event", "PreemptionsPersist")]
    _, writer = _lowered(RetunerSettings(mode="recommend", annotate=True, **base))  # type: ignore[arg-type]
    assert writer.calls == [("event", "PreemptionsPersist"), ("annotate", 32)]
    retuner, writer = _lowered(RetunerSettings(mode="apply", events=False, **base))  # type: ignore[arg-type]
    assert writer.calls == [("apply", 32)]
    families = {f.name: f for f in retuner.families()}
    assert [s.value for s in families["kv_planner_max_num_seqs_recommended"].samples] == [32.0]
    applies = {
        s.labels["result"]: s.value for s in families["kv_planner_retune_applies"].samples if s.name.endswith("_total")
    }
    assert applies == {"applied": 1.0}
    changes = {
        s.labels["direction"]: s.value
        for s in families["kv_planner_retune_changes"].samples
        if s.name.endswith("_total")
    }
    assert changes == {"lower": 1.0}
    assert ANNOTATION == "kv-planner.io/recommended-max-num-seqs"


def test_workloads_that_disappear_are_forgotten() -> None:
    retuner = Retuner(RetunerSettings(), advisor=lambda _: 10)
    retuner.observe(Snapshot(targets=[obs("a", 0)]), now=0)
    for i in range(11):
        retuner.observe(Snapshot(targets=[]), now=60.0 * (i + 1))
    assert retuner.states == {} and next(iter(retuner.families())).samples == []


class FakeExporter:
    def __init__(self, stop: asyncio.Event, rounds: int) -> None:
        self.calls = 0
        self.stop = stop
        self.rounds = rounds

    async def snapshot(self, budget_s: float, *, record: bool = True) -> Snapshot:
        self.calls += 1
        assert record is False  # the retuner's rounds must not count as Prometheus scrapes
        if self.calls == 2:
            raise RuntimeError("a bad round")  # logged; the loop goes on
        if self.calls >= self.rounds:
            self.stop.set()
        return Snapshot(targets=[obs("a", float(self.calls))])


def test_the_loop_survives_a_failed_round_and_stops() -> None:
    async def main() -> int:
        stop = asyncio.Event()
        exporter = FakeExporter(stop, rounds=4)
        retuner = Retuner(RetunerSettings(interval_s=0.01), advisor=lambda _: 10)
        await asyncio.wait_for(retuner.run(exporter, stop, budget_s=1.0), 10)  # type: ignore[arg-type]
        return exporter.calls

    assert asyncio.run(main()) == 4


def _engine(**kw: Any) -> EngineObservation:
    base: dict[str, Any] = dict(
        engine="0",
        kv_cache_usage=0.5,
        num_gpu_blocks=2178,
        block_size=16,
        preemptions_total=0.0,
        running=16,
        waiting=4,
        prompt_tokens=[(2000.0, 40.0), (INF, 40.0)],
        prompt_tokens_sum=40 * 1024.0,
        generation_tokens=[(2000.0, 40.0), (INF, 40.0)],
        generation_tokens_sum=40 * 1024.0,
    )
    base.update(kw)
    return EngineObservation(**base)


def _target_obs(pod: str, *engines: EngineObservation, max_num_seqs: int = 16) -> TargetObservation:
    target = Target(url=f"http://{pod}/metrics", namespace="ml", pod=pod, workload="chat", max_num_seqs=max_num_seqs)
    return TargetObservation(target=target, up=True, engines=list(engines))


def test_signals_use_exact_mean_lengths_and_the_occupancy() -> None:
    retuner = Retuner(RetunerSettings(), advisor=lambda _: None)
    # Buckets say "up to 2,000 tokens"; the sums say 1,024 exactly: 2,047 tokens = 128 blocks of 16.
    signals = retuner._signals([_target_obs("a", _engine(), _engine(engine="1", kv_cache_usage=0.9, running=12))])
    assert signals.footprint_blocks == 128 and signals.requests == 80
    assert signals.usable_blocks == 2177  # the null block is not the requests'
    assert signals.occupancy_blocks == pytest.approx(0.9 * 2177 / 12)  # the fuller engine
    # Without sums (a page that lacks them): each bucket's upper bound, on the safe side.
    bare = _engine(prompt_tokens_sum=None, generation_tokens_sum=None)
    assert retuner._signals([_target_obs("b", bare)]).footprint_blocks == math.ceil(3999 / 16)


def test_without_vllms_block_count_the_capacity_is_the_plans_low_end() -> None:
    """F11: vLLM did not report its block count (no vllm:cache_config_info yet). The fallback is the plan's
    blocks at the low end of its KV band (Qwen2.5-14B on an A100-40GB, 0.19.0: 2,130 predicted, 1,952 at
    the low end), never the nominal count, which vLLM may not find."""
    retuner = Retuner(RetunerSettings(), advisor=lambda _: None)
    unreported = _engine(num_gpu_blocks=None)

    def observed(**planned: int) -> TargetObservation:
        target = Target(url="http://a/metrics", namespace="ml", pod="a", workload="chat", max_num_seqs=16, **planned)
        return TargetObservation(target=target, up=True, engines=[unreported])

    both = retuner._signals([observed(planned_num_gpu_blocks=2130, planned_num_gpu_blocks_low=1952)])
    assert both.usable_blocks == 1951
    assert retuner._signals([observed(planned_num_gpu_blocks=2130)]).usable_blocks is None
    # vLLM's own count wins whenever it is reported
    assert retuner._signals([_target_obs("b", _engine(num_gpu_blocks=2100))]).usable_blocks == 2099


def test_a_pod_that_appears_after_the_first_round_counts_its_preemptions() -> None:
    retuner = Retuner(RetunerSettings(persist=1, min_dwell_s=0), advisor=lambda _: None)
    # First round: the counters are a baseline (these preemptions happened before the retuner watched).
    first = retuner.observe(Snapshot(targets=[_target_obs("a", _engine(preemptions_total=50.0))]), now=0)
    assert first[("ml", "chat")].reason != "PreemptionsPersist"
    # A rollout: pod b is new, its counter started at 0 after the first round, so all of it is new.
    second = retuner.observe(Snapshot(targets=[_target_obs("b", _engine(preemptions_total=3.0))]), now=60)
    assert second[("ml", "chat")].reason == "PreemptionsPersist"
    assert second[("ml", "chat")].recommended == 15  # floor(2177 x 0.9 / 128)


def test_capacity_and_footprint_are_exported() -> None:
    retuner = Retuner(RetunerSettings(), advisor=lambda _: None)
    retuner.observe(Snapshot(targets=[_target_obs("a", _engine())]), now=0)
    families = {f.name: f for f in retuner.families()}
    assert [s.value for s in families["kv_planner_max_num_seqs_capacity"].samples] == [15.0]
    assert [s.value for s in families["kv_planner_kv_blocks_per_sequence"].samples] == [128.0]


def test_unverified_workloads_are_advised_but_never_written() -> None:
    writer = Writer()
    settings = RetunerSettings(persist=1, min_dwell_s=0, namespaces=("ml",), annotate=True)
    retuner = Retuner(settings, advisor=lambda _: 10, writer=writer)  # type: ignore[arg-type]
    retuner.observe(Snapshot(targets=[obs("a", 0, usage=0.6)]), now=0)
    decisions = retuner.observe(Snapshot(targets=[obs("a", 5)]), now=60)  # no owners: not resolved
    retuner.publish(decisions)
    assert decisions[("ml", "chat")].recommended == 32 and writer.calls == []


def test_pods_on_different_configurations_mean_a_rollout_is_under_way() -> None:
    retuner = Retuner(RetunerSettings(persist=1, min_dwell_s=0), advisor=lambda _: None)
    decisions = retuner.observe(Snapshot(targets=[obs("a", 9, max_num_seqs=64), obs("b", 0, max_num_seqs=32)]), now=0)
    assert decisions[("ml", "chat")].reason == "RolloutInProgress"


def test_one_workloads_odd_page_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    # A tenant's pod serves a negative histogram sum (finite, so the exporter keeps it): that workload has
    # no length means, and a workload whose signals fail anyway is logged and left out of the round;
    # the other tenants' workloads are decided (before: one ValidationError ended every round).
    def tenant(namespace: str, pod: str, engine: EngineObservation) -> TargetObservation:
        target = Target(url=f"http://{pod}/metrics", namespace=namespace, pod=pod, workload="chat", max_num_seqs=16)
        return TargetObservation(target=target, up=True, engines=[engine])

    retuner = Retuner(RetunerSettings(persist=1, min_dwell_s=0), advisor=lambda _: None)
    odd = _engine(prompt_tokens_sum=-1e6)
    snapshot = Snapshot(targets=[tenant("a-evil", "e", odd), tenant("b-good", "g", _engine())])
    decisions = retuner.observe(snapshot, now=0)
    assert ("b-good", "chat") in decisions and ("a-evil", "chat") in decisions
    assert retuner._signals([tenant("a-evil", "e", odd)]).footprint_blocks is None  # no means, not wrong ones

    def broken(observations: list[TargetObservation]) -> Any:
        if observations[0].target.namespace == "a-evil":
            raise ValueError("a page no one expected")
        return signals(observations)

    signals = retuner._signals
    retuner._signals = broken  # type: ignore[method-assign]
    caplog.set_level("ERROR", logger="admission.retuner")
    for now in (60, 120, 180):
        decisions = retuner.observe(snapshot, now=now)
        assert list(decisions) == [("b-good", "chat")]
    # Its advice of the first round is withdrawn, not exported as current; the traceback is logged once.
    assert ("a-evil", "chat") not in retuner.decisions and ("b-good", "chat") in retuner.decisions
    assert caplog.text.count("a-evil/chat not decided this round") == 1
