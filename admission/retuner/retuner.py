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
from admission.retuner.estimate import LengthMeans, bucket_mean, length_means, occupancy_blocks, peak_blocks
from admission.retuner.kube import KubeWriter, WorkloadRef
from admission.retuner.owners import Owner, OwnerResolver
from admission.retuner.settings import RetunerSettings

logger = logging.getLogger("admission.retuner")

WorkloadKey = tuple[str, str]
_FORGET_AFTER = 10  # observations without the workload before its state is dropped


def _means(
    prompt: Buckets | None, output: Buckets | None, prompt_sums: list[float | None], output_sums: list[float | None]
) -> LengthMeans | None:
    """Exact means from the summed ``_sum``/``_count``; the buckets' upper bounds where a source has no sums."""
    if not prompt or not output:
        return None
    count_p, count_g = prompt[-1][1], output[-1][1]
    if all(v is not None for v in prompt_sums) and all(v is not None for v in output_sums):
        return length_means(sum(v or 0.0 for v in prompt_sums), sum(v or 0.0 for v in output_sums), count_p, count_g)
    mean_p, mean_g = bucket_mean(prompt), bucket_mean(output)
    if mean_p is None or mean_g is None:
        return None
    return LengthMeans(prompt=mean_p, generation=mean_g, requests=min(count_p, count_g))


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
        resolver: OwnerResolver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.advisor = advisor
        self.writer = writer
        self.resolver = resolver
        self.clock = clock
        self._lock = threading.Lock()
        self.states: dict[WorkloadKey, WorkloadState] = {}
        self.decisions: dict[WorkloadKey, Decision] = {}
        self.risk_limits: dict[WorkloadKey, int] = {}
        self.refs: dict[WorkloadKey, WorkloadRef] = {}
        self._counters: dict[tuple[str, str, str], float] = {}
        self._absent: dict[WorkloadKey, int] = {}
        self._failing: set[WorkloadKey] = set()  # workloads whose last round failed (logged once)
        self._rounds = 0
        self.changes: dict[tuple[str, str, str], int] = defaultdict(int)
        self.applies: dict[tuple[str, str, str], int] = defaultdict(int)

    # --- observation -------------------------------------------------------------------------------

    def _signals(self, observations: list[TargetObservation]) -> WorkloadSignals:
        preemptions = 0.0
        usages: list[float] = []
        waiting = 0.0
        blocks: list[int] = []
        sizes: list[int] = []
        occupancies: list[float] = []
        prompts: list[Buckets] = []
        outputs: list[Buckets] = []
        prompt_sums: list[float | None] = []
        output_sums: list[float | None] = []
        for obs in observations:
            for engine in obs.engines:
                key = (obs.target.namespace, obs.target.pod, engine.engine)
                if engine.preemptions_total is not None:
                    previous = self._counters.get(key)
                    current = engine.preemptions_total
                    if previous is not None:
                        # A counter that went down means vLLM restarted: everything since is new.
                        preemptions += current - previous if current >= previous else current
                    elif self._rounds > 0:
                        # A pod that appeared after the first round started after it (a rollout): its
                        # counter began at 0. On the first round the counters are only a baseline.
                        preemptions += current
                    self._counters[key] = current
                if engine.kv_cache_usage is not None:
                    usages.append(engine.kv_cache_usage)
                waiting += engine.waiting or 0.0
                if engine.num_gpu_blocks is not None:
                    blocks.append(engine.num_gpu_blocks)
                    occupancy = occupancy_blocks(engine.kv_cache_usage, engine.num_gpu_blocks - 1, engine.running)
                    if occupancy is not None:
                        occupancies.append(occupancy)
                if engine.block_size is not None:
                    sizes.append(engine.block_size)
                if engine.prompt_tokens:
                    prompts.append(engine.prompt_tokens)
                    prompt_sums.append(engine.prompt_tokens_sum)
                if engine.generation_tokens:
                    outputs.append(engine.generation_tokens)
                    output_sums.append(engine.generation_tokens_sum)
        if not blocks:
            # vLLM did not say (no vllm:cache_config_info yet): fall back to the plan's blocks at the low end of
            # its KV band (the nominal count may be more than vLLM finds: a capacity on it can overshoot).
            blocks = [o.target.planned_num_gpu_blocks_low for o in observations if o.target.planned_num_gpu_blocks_low]
        configured = [o.target.max_num_seqs for o in observations if o.target.max_num_seqs is not None]
        lengths = [o.target.max_model_len for o in observations if o.target.max_model_len is not None]
        prompt, output = _sum_buckets(prompts), _sum_buckets(outputs)
        requests = prompt[-1][1] if prompt else 0.0
        means = _means(prompt, output, prompt_sums, output_sums)
        size = sizes[0] if sizes else None
        max_model_len = min(lengths) if lengths else None
        risk_limit = None
        if blocks and size and prompt and output and requests >= self.settings.min_requests:
            num_blocks = min(blocks)
            risk_limit = self.advisor(
                AdviceInput(
                    num_gpu_blocks=num_blocks,
                    block_size=size,
                    max_model_len=max_model_len or num_blocks * size,
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
            mixed=len(set(configured)) > 1,
            usable_blocks=min(blocks) - 1 if blocks and min(blocks) > 1 else None,
            footprint_blocks=peak_blocks(means, size, max_model_len) if (means and size) else None,
            occupancy_blocks=max(occupancies) if occupancies else None,
            requests=means.requests if means else 0.0,
            risk_limit=risk_limit,
        )

    def resolve_owners(self, snapshot: Snapshot) -> dict[tuple[str, str], Owner]:
        """Each up pod's owner through the Kubernetes API (blocking; run it off the event loop)."""
        if self.resolver is None:
            return {}
        self.resolver.forget_stale()
        return {
            obs.target.key: self.resolver.resolve(obs.target.namespace, obs.target.pod)
            for obs in snapshot.targets
            if obs.up
        }

    def _group_key(
        self, obs: TargetObservation, owners: dict[tuple[str, str], Owner] | None
    ) -> tuple[WorkloadKey, WorkloadRef]:
        """The workload a pod's observations count for, and whether the retuner may write to it.

        With a resolver, only an owner verified through the API (UID match at every link) is writable;
        a pod whose claimed owner did not verify counts as its own workload, so a forged owner
        reference cannot move another team's recommendation either. Without one (static targets,
        Prometheus labels, namespaces not in --retune-namespaces) the target's workload is used for the
        metrics and nothing is written.
        """
        target = obs.target
        owner = owners.get(target.key) if owners is not None else None
        if owner is not None and owner.verified:
            ref = WorkloadRef(namespace=owner.namespace, kind=owner.kind, name=owner.name, uid=owner.uid, verified=True)
            return (owner.namespace, owner.name), ref
        if owner is not None and owner.verdict in ("not_owned", "mismatch"):
            return (target.namespace, target.pod), WorkloadRef(namespace=target.namespace, kind="Pod", name=target.pod)
        key = target.workload_key
        return key, WorkloadRef(namespace=key[0], kind=target.workload_kind or "Deployment", name=key[1])

    def observe(
        self,
        snapshot: Snapshot,
        now: float | None = None,
        *,
        owners: dict[tuple[str, str], Owner] | None = None,
    ) -> dict[WorkloadKey, Decision]:
        """One observation of every workload in the snapshot; returns this round's decisions.

        ``owners`` (from :meth:`resolve_owners`) groups pods by their verified owner.
        """
        now = self.clock() if now is None else now
        groups: dict[WorkloadKey, list[TargetObservation]] = defaultdict(list)
        refs: dict[WorkloadKey, set[WorkloadRef]] = defaultdict(set)
        for obs in snapshot.targets:
            if obs.up:
                key, ref = self._group_key(obs, owners)
                groups[key].append(obs)
                refs[key].add(ref)
        decisions: dict[WorkloadKey, Decision] = {}
        with self._lock:
            for key, observations in sorted(groups.items()):
                found = refs[key]
                # Writable only when every pod of the group verified to the same object.
                self.refs[key] = (
                    next(iter(found))
                    if len(found) == 1
                    else WorkloadRef(namespace=key[0], kind=sorted(r.kind for r in found)[0], name=key[1])
                )
                try:
                    signals = self._signals(observations)
                    decision = decide(self.states.setdefault(key, WorkloadState()), signals, self.settings, now)
                except Exception:  # one workload's pods (untrusted pages) must not stop the others' round
                    # Its earlier advice is withdrawn (not exported as if current), and the failure is
                    # logged with its traceback once, not every round.
                    self.decisions.pop(key, None)
                    self.risk_limits.pop(key, None)
                    log = logger.debug if key in self._failing else logger.exception
                    log("retuner: workload %s/%s not decided this round", key[0], key[1])
                    self._failing.add(key)
                    continue
                self._failing.discard(key)
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
            self._rounds += 1
        return decisions

    # --- outputs ------------------------------------------------------------------------------------

    def publish(self, decisions: dict[WorkloadKey, Decision]) -> None:
        """Events, annotation, rollout for the decisions that changed something (blocking I/O)."""
        if self.writer is None:
            return
        for key, decision in decisions.items():
            if decision.recommended is None:
                continue
            ref = self.refs[key]
            changed = decision.action != "hold"
            # Apply mode: advice that differs from what runs (a rollout that was rate-limited or failed)
            # is tried again when the writer says it is due, without a new event each round.
            pending = (
                not changed
                and self.settings.mode == "apply"
                and decision.current is not None
                and decision.recommended != decision.current
            )
            if not (changed or pending):
                continue
            if not ref.verified:
                # Not resolved through the API (or outside --retune-namespaces): metrics only.
                if changed:
                    logger.info("%s/%s: %s (not written: owner not verified)", key[0], key[1], decision.message)
                continue
            if changed and self.settings.events:
                self.writer.event(ref, decision.reason, decision.message)
            if changed and self.settings.annotate and self.settings.mode != "apply":
                self.writer.annotate(ref, decision.recommended)
            if self.settings.mode == "apply" and (changed or self.writer.due(ref)):
                attempt = decision
                if pending:
                    assert decision.current is not None
                    direction = "lower" if decision.recommended < decision.current else "raise"
                    attempt = decision.model_copy(update={"action": direction})
                result = self.writer.apply(ref, attempt)
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
        capacity = GaugeMetricFamily(
            "kv_planner_max_num_seqs_capacity",
            "Sequences at their estimated peak KV footprint that fit with the headroom kept free.",
            labels=["namespace", "workload"],
        )
        footprint = GaugeMetricFamily(
            "kv_planner_kv_blocks_per_sequence",
            "Estimated peak KV blocks of one sequence (exact mean lengths, floored by the observed occupancy).",
            labels=["namespace", "workload"],
        )
        with self._lock:
            for (namespace, workload), decision in sorted(self.decisions.items()):
                if decision.recommended is not None:
                    recommended.add_metric([namespace, workload], float(decision.recommended))
                if decision.capacity is not None:
                    capacity.add_metric([namespace, workload], float(decision.capacity))
                if decision.footprint_blocks is not None:
                    footprint.add_metric([namespace, workload], decision.footprint_blocks)
            for (namespace, workload), limit in sorted(self.risk_limits.items()):
                bound.add_metric([namespace, workload], float(limit))
            for (namespace, workload, direction), count in sorted(self.changes.items()):
                if (namespace, workload) in self.states:
                    changes.add_metric([namespace, workload, direction], float(count))
            for (namespace, workload, result), count in sorted(self.applies.items()):
                if (namespace, workload) in self.states:
                    applies.add_metric([namespace, workload, result], float(count))
        return [recommended, bound, capacity, footprint, changes, applies]

    # --- the loop -----------------------------------------------------------------------------------

    async def run(self, source: SnapshotSource, stop: asyncio.Event, *, budget_s: float) -> None:
        while not stop.is_set():
            try:
                snapshot = await source.snapshot(budget_s, record=False)
                owners = await asyncio.to_thread(self.resolve_owners, snapshot) if self.resolver else None
                decisions = self.observe(snapshot, owners=owners)
                await asyncio.to_thread(self.publish, decisions)
            except Exception:  # the exporter must keep serving whatever happens here
                logger.exception("retuner round failed")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.interval_s)
