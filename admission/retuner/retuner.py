"""The retuner: every ``interval_s``, observe each workload, decide, and publish the recommendation.

It runs inside the exporter process and reads targets with the exporter's own scraper (or Prometheus
API source). Per workload (namespace + Deployment/StatefulSet/...): preemptions since the previous
observation (per pod and engine, counter resets handled), the highest KV usage, the queue, the
configured ``--max-num-seqs``, vLLM's real block count and the length histograms summed over the
workload's engines. :mod:`admission.retuner.decide` turns that into a decision; outputs are the
``kv_planner_max_num_seqs_recommended`` gauge, Events, the annotation and (``apply``) a rollout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from admission.observations import Buckets, Snapshot, SnapshotSource, TargetObservation
from admission.retuner.advice import AdviceInput, Advisor, risk_bounded_max_num_seqs
from admission.retuner.decide import Decision, WorkloadSignals, WorkloadState, decide
from admission.retuner.kube import KubeWriter, WorkloadRef
from admission.retuner.settings import RetunerSettings

logger = logging.getLogger("admission.retuner")

WorkloadKey = tuple[str, str]
_FORGET_AFTER = 10  # observations without the workload before its state is dropped


def _sum_buckets(parts: list[Buckets]) -> Buckets | None:
    if not parts:
        return None
    totals: dict[float, float] = defaultdict(float)
    for buckets in parts:
        for bound, count in buckets:
            totals[bound] += count
    return sorted(totals.items())


class Retuner:
    def __init__(
        self,
        settings: RetunerSettings,
        *,
        advisor: Advisor = risk_bounded_max_num_seqs,
        writer: KubeWriter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.advisor = advisor
        self.writer = writer
        self.clock = clock
        self._lock = threading.Lock()
        self.states: dict[WorkloadKey, WorkloadState] = {}
        self.decisions: dict[WorkloadKey, Decision] = {}
        self.risk_limits: dict[WorkloadKey, int] = {}
        self.refs: dict[WorkloadKey, WorkloadRef] = {}
        self._counters: dict[tuple[str, str, str], float] = {}
        self._absent: dict[WorkloadKey, int] = {}
        self.changes: dict[tuple[str, str, str], int] = defaultdict(int)
        self.applies: dict[tuple[str, str, str], int] = defaultdict(int)

    # --- observation -------------------------------------------------------------------------------

    def _signals(self, observations: list[TargetObservation]) -> WorkloadSignals:
        preemptions = 0.0
        usages: list[float] = []
        waiting = 0.0
        blocks: list[int] = []
        sizes: list[int] = []
        prompts: list[Buckets] = []
        outputs: list[Buckets] = []
        for obs in observations:
            for engine in obs.engines:
                key = (obs.target.namespace, obs.target.pod, engine.engine)
                if engine.preemptions_total is not None:
                    previous = self._counters.get(key)
                    current = engine.preemptions_total
                    if previous is not None:
                        # A counter that went down means vLLM restarted: everything since is new.
                        preemptions += current - previous if current >= previous else current
                    self._counters[key] = current
                if engine.kv_cache_usage is not None:
                    usages.append(engine.kv_cache_usage)
                waiting += engine.waiting or 0.0
                if engine.num_gpu_blocks is not None:
                    blocks.append(engine.num_gpu_blocks)
                if engine.block_size is not None:
                    sizes.append(engine.block_size)
                if engine.prompt_tokens:
                    prompts.append(engine.prompt_tokens)
                if engine.generation_tokens:
                    outputs.append(engine.generation_tokens)
        if not blocks:
            # vLLM did not say (no vllm:cache_config_info yet): fall back to the plan's block count.
            blocks = [o.target.planned_num_gpu_blocks for o in observations if o.target.planned_num_gpu_blocks]
        configured = [o.target.max_num_seqs for o in observations if o.target.max_num_seqs is not None]
        lengths = [o.target.max_model_len for o in observations if o.target.max_model_len is not None]
        prompt, output = _sum_buckets(prompts), _sum_buckets(outputs)
        requests = prompt[-1][1] if prompt else 0.0
        risk_limit = None
        if blocks and sizes and prompt and output and requests >= self.settings.min_requests:
            num_blocks, size = min(blocks), sizes[0]
            max_model_len = min(lengths) if lengths else num_blocks * size
            risk_limit = self.advisor(
                AdviceInput(
                    num_gpu_blocks=num_blocks,
                    block_size=size,
                    max_model_len=max_model_len,
                    prompt_buckets=prompt,
                    generation_buckets=output,
                    headroom=self.settings.headroom,
                    target_risk=self.settings.target_risk,
                )
            )
        return WorkloadSignals(
            preemptions=preemptions,
            usage=max(usages) if usages else None,
            waiting=waiting,
            configured=min(configured) if configured else None,
            risk_limit=risk_limit,
            requests=requests,
        )

    def observe(self, snapshot: Snapshot, now: float | None = None) -> dict[WorkloadKey, Decision]:
        """One observation of every workload in the snapshot; returns this round's decisions."""
        now = self.clock() if now is None else now
        groups: dict[WorkloadKey, list[TargetObservation]] = defaultdict(list)
        for obs in snapshot.targets:
            if obs.up:
                groups[obs.target.workload_key].append(obs)
        decisions: dict[WorkloadKey, Decision] = {}
        with self._lock:
            for key, observations in sorted(groups.items()):
                target = observations[0].target
                self.refs[key] = WorkloadRef(namespace=key[0], kind=target.workload_kind or "Deployment", name=key[1])
                signals = self._signals(observations)
                state = self.states.setdefault(key, WorkloadState())
                decision = decide(state, signals, self.settings, now)
                decisions[key] = self.decisions[key] = decision
                if signals.risk_limit is not None:
                    self.risk_limits[key] = signals.risk_limit
                self._absent[key] = 0
                if decision.action != "hold":
                    self.changes[(key[0], key[1], decision.action)] += 1
            for key in list(self.states):
                if key not in groups:
                    self._absent[key] = self._absent.get(key, 0) + 1
                    if self._absent[key] > _FORGET_AFTER:
                        for table in (self.states, self.decisions, self.risk_limits, self.refs, self._absent):
                            table.pop(key, None)
        return decisions

    # --- outputs ------------------------------------------------------------------------------------

    def publish(self, decisions: dict[WorkloadKey, Decision]) -> None:
        """Events, annotation, rollout for the decisions that changed something (blocking I/O)."""
        if self.writer is None:
            return
        for key, decision in decisions.items():
            if decision.action == "hold" or decision.recommended is None:
                continue
            ref = self.refs[key]
            if self.settings.events:
                self.writer.event(ref, decision.reason, decision.message)
            if self.settings.annotate and self.settings.mode != "apply":
                self.writer.annotate(ref, decision.recommended)
            if self.settings.mode == "apply":
                result = self.writer.apply(ref, decision)
                with self._lock:
                    self.applies[(key[0], key[1], result.result)] += 1

    def families(self) -> Iterable[Metric]:
        recommended = GaugeMetricFamily(
            "kv_planner_max_num_seqs_recommended",
            "The retuner's --max-num-seqs for the workload.",
            labels=["namespace", "workload"],
        )
        bound = GaugeMetricFamily(
            "kv_planner_max_num_seqs_risk_bound",
            "Largest --max-num-seqs within the target overflow risk for the observed lengths.",
            labels=["namespace", "workload"],
        )
        changes = CounterMetricFamily(
            "kv_planner_retune_changes",
            "Recommendation changes by direction.",
            labels=["namespace", "workload", "direction"],
        )
        applies = CounterMetricFamily(
            "kv_planner_retune_applies",
            "Rollouts attempted by apply mode, by result.",
            labels=["namespace", "workload", "result"],
        )
        with self._lock:
            for (namespace, workload), decision in sorted(self.decisions.items()):
                if decision.recommended is not None:
                    recommended.add_metric([namespace, workload], float(decision.recommended))
            for (namespace, workload), limit in sorted(self.risk_limits.items()):
                bound.add_metric([namespace, workload], float(limit))
            for (namespace, workload, direction), count in sorted(self.changes.items()):
                if (namespace, workload) in self.states:
                    changes.add_metric([namespace, workload, direction], float(count))
            for (namespace, workload, result), count in sorted(self.applies.items()):
                if (namespace, workload) in self.states:
                    applies.add_metric([namespace, workload, result], float(count))
        return [recommended, bound, changes, applies]

    # --- the loop -----------------------------------------------------------------------------------

    async def run(self, source: SnapshotSource, stop: asyncio.Event, *, budget_s: float) -> None:
        while not stop.is_set():
            try:
                snapshot = await source.snapshot(budget_s, record=False)
                decisions = self.observe(snapshot)
                await asyncio.to_thread(self.publish, decisions)
            except Exception:  # the exporter must keep serving whatever happens here
                logger.exception("retuner round failed")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.interval_s)
