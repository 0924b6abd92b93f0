"""The one place where policy decisions call into the planner core.

Decisions need four things from the core: the GPU catalog, a model spec for a model id (within a time
budget on the admission path), a plan, and vLLM's defaults for the release in force. They reach them
through :class:`PlanningBackend`, so the decision logic can be tested with small fakes and the webhook
and ``planner check`` share :class:`CoreBackend`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import re2

from planner.errors import (
    HfOverridesError,
    KvPlannerError,
    PlannerInputError,
    UnknownGPUError,
    UnknownModelError,
)
from planner.gpus.catalog import all_gpus, gpu_for_memory, gpu_for_mig_profile, lookup_gpu
from planner.gpus.spec import GpuSpec
from planner.hub.local import looks_like_path
from planner.hub.memo import Memo
from planner.hub.resolve import resolve_model
from planner.hub.settings import HubLimits
from planner.k8s.gpus import GpuCatalog
from planner.models.spec import ModelSpec
from planner.plan import make_plan
from planner.plan.build import Prediction, plan_without_recommendation
from planner.plan.engine_cache import EngineCache
from planner.plan.models import Plan
from planner.plan.recommend import check_headroom
from planner.policy.versions import ReleaseSpread, release_spread
from planner.vllm.args import ServingArgs
from planner.vllm.defaults import resolve_args
from planner.vllm.hf_overrides import Overridden, apply_hf_overrides
from planner.vllm.releases import resolve_release

DEFAULT_HUB_LIMITS = HubLimits()
_MODEL_TTL = 600.0  # seconds a resolved model is reused (the Hub layer has its own cache as well)
# Plans before their recommendation (a setting's prediction), kept so that a decision predicts each setting
# once: planned without and then with a workload profile (a decision's fit check, then its --max-num-seqs),
# and the recommendation's plans again when the decision fills what they settled on. Only the review being
# decided needs them (a review with alternatives makes ~20), so a few dozen suffice.
_BASE_MEMO_SIZE = 64
# re2: linear time whatever the (untrusted) model name is.
_HUB_ID = re2.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def repo_matcher(patterns: Sequence[str]) -> Callable[[str], bool]:
    """A predicate for the policy's ``allowRepos``: ``*`` matches within one part (``org/*``)."""
    alternatives = ["".join("[^/]*" if c == "*" else re2.escape(c) for c in p) for p in patterns]
    compiled = re2.compile("^(?:" + "|".join(alternatives) + ")$") if alternatives else None
    return lambda repo: compiled is not None and compiled.match(repo) is not None


class PlanningBackend(Protocol):
    """What decisions need from the planner core."""

    @property
    def catalog(self) -> GpuCatalog: ...

    def resolve_model(
        self,
        name: str,
        *,
        timeout: float | None,
        offline: bool,
        allow_local: bool,
        allow_repos: Sequence[str] | None = None,
    ) -> ModelSpec:
        """The model's spec. Raises UnknownModelError / ModelResolutionError subclasses (RepoNotAllowedError
        for a Hub repo outside ``allow_repos``; None allows every repo)."""
        ...

    def parse_workload(self, data: Any) -> Any:
        """A workload profile from decoded YAML/JSON. Raises WorkloadProfileError."""
        ...

    def apply_overrides(
        self, model: ModelSpec, overrides: Mapping[str, Any], *, vllm_version: str | None
    ) -> Overridden:
        """``model`` (as :meth:`resolve_model` returned it) with ``--hf-overrides`` applied as ``vllm_version``
        applies them (None: every release). Raises HfOverridesError when kv-planner cannot plan them."""
        ...

    def plan(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        args: ServingArgs,
        *,
        vllm_version: str | None,
        headroom: float,
        workload: Any | None,
        draft: ModelSpec | None = None,
    ) -> Plan:
        """make_plan (``draft``: the resolved drafter of --speculative-config). Raises PlannerInputError
        subclasses for settings vLLM refuses. A decision reads no plan notes: a backend may leave out
        what only they print (make_plan's ``average_risk``)."""
        ...

    def effective_args(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        args: ServingArgs,
        *,
        vllm_version: str | None,
        max_model_len: int,
    ) -> dict[str, Any]:
        """vLLM's values in force for the sizing flags (defaults filled in), keyed by dest."""
        ...


def _utilization_spelled(args: ServingArgs, version: str | None) -> ServingArgs:
    """``args`` with an unset ``--gpu-memory-utilization`` set to the release's default: the same plan (a plan
    reads the flag only through its resolved value, planner/vllm/defaults.py ``resolve_args``), one key.
    As given when the release is not one kv-planner reads (planning them says so). With the release unknown
    it is the planned release's default: the spread plans every other release with the utilization the
    planned one resolved (planner/plan/build.py ``release_fixed_bytes`` pins it), so that plan is the same too
    (tests/core/test_plan_base_reuse.py compares them)."""
    if args.gpu_memory_utilization is not None:
        return args
    try:
        _, release, _ = resolve_release(version)
    except KvPlannerError:
        return args
    return args.model_copy(update={"gpu_memory_utilization": release.default_gpu_memory_utilization})


class CoreGpuCatalog:
    """:class:`planner.k8s.gpus.GpuCatalog` over planner.gpus.catalog."""

    def lookup(self, name: str, memory_bytes: int | None = None) -> GpuSpec | None:
        try:
            return lookup_gpu(name, memory_bytes=memory_bytes)
        except UnknownGPUError:
            return None

    def for_memory(self, memory_bytes: int) -> GpuSpec | None:
        """The catalog card whose memory is within 5% of ``memory_bytes`` (GFD reports NVML's total, a
        little more than what CUDA reports), the smallest if several; else an ad-hoc GPU of that size."""
        close = [g for g in all_gpus() if abs(g.memory_bytes - memory_bytes) <= 0.05 * memory_bytes]
        if close:
            return min(close, key=lambda g: (g.memory_bytes, g.name))
        try:
            return gpu_for_memory(memory_bytes)
        except PlannerInputError:
            return None

    def mig(self, profile: str, parent: str | None) -> GpuSpec | None:
        try:
            return gpu_for_mig_profile(profile, gpu=parent)
        except UnknownGPUError:
            return None


class CoreBackend:
    """The real planner core, with a bounded memo of plans.

    Plans are pure functions of their inputs, and admission sees the same workload again and again
    (updates, dry-runs, reinvocation, GitOps diffs), so the webhook keeps the last ``memo_size`` plans.
    """

    def __init__(self, *, memo_size: int = 1024, hub_limits: HubLimits | None = DEFAULT_HUB_LIMITS) -> None:
        # Decisions resolve models named by manifests: Hub lookups are bounded (planner.hub.budget).
        self._hub_limits = hub_limits
        self._catalog = CoreGpuCatalog()
        # Bounded LRUs (thread-safe), each of memo_size entries but the predictions'
        self._memo: Memo[Plan] = Memo(memo_size)
        self._bases: Memo[tuple[Plan, Prediction]] = Memo(_BASE_MEMO_SIZE)
        self._spreads: Memo[tuple[ReleaseSpread | None]] = Memo(memo_size)  # (a 1-tuple: None is a value)
        self._models: Memo[tuple[ModelSpec, dict[str, Any] | None]] = Memo(memo_size)  # (spec, config.json)
        # spec id -> (the spec, its config.json): the config --hf-overrides is applied to (None: a catalog entry)
        self._configs: Memo[tuple[ModelSpec, dict[str, Any] | None]] = Memo(memo_size)
        self._overridden: Memo[tuple[ModelSpec, Overridden | str]] = Memo(memo_size)  # str: why not planned
        self._profiles: Memo[Any] = Memo(memo_size)
        self._effective: Memo[dict[str, Any]] = Memo(memo_size)
        self._dumps: Memo[tuple[Any, str]] = Memo(memo_size)
        # Engine stages by model, GPU, release and flags but the limits: a never-seen workload's plans (a new
        # context, the count emitted, the utilization filled) share them (bounded: planner/plan/engine_cache.py)
        self._engines = EngineCache()

    @property
    def catalog(self) -> GpuCatalog:
        return self._catalog

    def resolve_model(
        self,
        name: str,
        *,
        timeout: float | None,
        offline: bool,
        allow_local: bool,
        allow_repos: Sequence[str] | None = None,
    ) -> ModelSpec:
        if not allow_local and (looks_like_path(name) or not _HUB_ID.match(name)):
            # The webhook must not read its own file system on behalf of a request.
            raise UnknownModelError(name, hint="local model paths are not read on the admission path")
        allowed = repo_matcher(allow_repos) if allow_repos is not None else None
        key = f"{name}|{offline}|{allow_local}|{allow_repos}"
        hit = self._models.get(key)
        if hit is not None:
            if self._configs.get(id(hit[0])) is None:
                self._configs.put(id(hit[0]), hit, ttl=_MODEL_TTL)
            return hit[0]
        resolved = resolve_model(
            name,
            timeout=timeout,
            offline=offline or None,
            local=allow_local,
            hub_allowed=allowed,
            limits=self._hub_limits,
        )
        spec = resolved.spec
        self._models.put(key, (spec, resolved.config), ttl=_MODEL_TTL)
        # (keeps the spec alive with its config, so its id stays unique while the entry lives)
        self._configs.put(id(spec), (spec, resolved.config), ttl=_MODEL_TTL)
        return spec

    def apply_overrides(
        self, model: ModelSpec, overrides: Mapping[str, Any], *, vllm_version: str | None
    ) -> Overridden:
        key = f"{id(model)}|{json.dumps(overrides, sort_keys=True, default=str)}|{vllm_version}"
        hit = self._overridden.get(key)
        if hit is None or hit[0] is not model:
            known = self._configs.get(id(model))
            config = known[1] if known is not None and known[0] is model else None
            result: Overridden | str
            try:
                result = apply_hf_overrides(model, config, overrides, version=vllm_version)
            except HfOverridesError as error:
                result = error.message  # (kept as text: an exception would keep its traceback's frames alive)
            hit = (model, result)
            self._overridden.put(key, hit, ttl=None)
        if isinstance(hit[1], str):
            raise HfOverridesError(hit[1])
        return hit[1]

    def parse_workload(self, data: Any) -> Any:
        key = json.dumps(data, sort_keys=True, default=str)
        hit = self._profiles.get(key)
        if hit is not None:
            return hit
        # Imported on the first profile (numpy: see planner/policy/model.py); the webhook's fork server
        # imports it before forking (admission/webhook/worker.py warm_profiles).
        from planner.workload import parse_workload

        profile = parse_workload(data, source="workload")  # a frozen model: safe to share
        self._profiles.put(key, profile, ttl=None)
        return profile

    def plan(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        args: ServingArgs,
        *,
        vllm_version: str | None,
        headroom: float,
        workload: Any | None,
        draft: ModelSpec | None = None,
    ) -> Plan:
        check_headroom(headroom)  # (before the prediction is made and kept: a bad headroom plans nothing)
        # The plan's key: the setting, the headroom and the profile.
        setting = self._key(model, gpu, args, vllm_version, 0.0, None)
        if draft is not None:
            setting += "|draft|" + self._json_of(draft)
        profile = self._json_of(workload) if workload is not None else "-"
        key = f"{setting}|{headroom!r}|{profile}"
        hit = self._memo.get(key)
        if hit is not None:
            return hit

        def replan(m: ModelSpec, g: GpuSpec, a: ServingArgs) -> tuple[Plan, Prediction]:
            return self._prediction(m, g, a, vllm_version, draft)

        # (average_risk=False: no decision shows a plan's notes, and that risk costs about an eighth of a
        # review with a workload profile)
        plan = make_plan(
            model,
            gpu,
            args,
            vllm_version=vllm_version,
            headroom=headroom,
            workload=workload,
            draft=draft,
            average_risk=False,
            base=replan(model, gpu, args),
            replan=replan,
        )
        self._memo.put(key, plan, ttl=None)
        return plan

    def _prediction(
        self, model: ModelSpec, gpu: GpuSpec, args: ServingArgs, version: str | None, draft: ModelSpec | None
    ) -> tuple[Plan, Prediction]:
        """:func:`plan_without_recommendation`, kept by setting: a decision plans one setting without and then
        with a workload profile, and the recommendation's plans (the count it emits) again when it fills
        that count. The key spells out the release's default utilization (:func:`_utilization_spelled`): the
        utilization a decision fills is the one the plan as written resolved, so its plans are those."""
        setting = self._key(model, gpu, _utilization_spelled(args, version), version, 0.0, None)
        if draft is not None:
            setting += "|draft|" + self._json_of(draft)
        found = self._bases.get(setting)
        if found is None:
            found = plan_without_recommendation(
                model, gpu, args, vllm_version=version, draft=draft, engines=self._engines
            )
            self._bases.put(setting, found, ttl=None)
        return found

    def release_spread(
        self, model: ModelSpec, gpu: GpuSpec, args: ServingArgs, *, headroom: float
    ) -> ReleaseSpread | None:
        """The plans of every candidate release for a workload whose vLLM release is unknown, summed
        up (KV tokens and fit per release) and memoized as that summary: plans without alternatives
        (a quarter of the cost), kept out of the plan memo so that 17 of them per workload do not
        push the other workloads' plans out."""
        key = self._key(model, gpu, args, "spread", headroom, None)
        hit = self._spreads.get(key)
        if hit is not None:
            return hit[0]

        def plan(version: str) -> Plan:
            # (not kept with the decisions' predictions: 17 releases' plans would push theirs out)
            def replan(m: ModelSpec, g: GpuSpec, a: ServingArgs) -> tuple[Plan, Prediction]:
                return plan_without_recommendation(m, g, a, vllm_version=version, engines=self._engines)

            return make_plan(
                model,
                gpu,
                args,
                vllm_version=version,
                headroom=headroom,
                with_alternatives=False,
                base=replan(model, gpu, args),
                replan=replan,
            )

        spread = release_spread(plan, args)
        self._spreads.put(key, (spread,), ttl=None)
        return spread

    def effective_args(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        args: ServingArgs,
        *,
        vllm_version: str | None,
        max_model_len: int,
    ) -> dict[str, Any]:
        key = "effective|" + self._key(model, gpu, args, vllm_version, max_model_len, None)
        cached = self._effective.get(key)
        if cached is not None:
            return dict(cached)
        _, release, _ = resolve_release(vllm_version)
        resolved = resolve_args(args, model, gpu, release, max_model_len)
        result = {
            "max_num_seqs": resolved.max_num_seqs,
            "max_num_batched_tokens": resolved.max_num_batched_tokens,
            "gpu_memory_utilization": resolved.gpu_memory_utilization,
            "block_size": resolved.block_size,
            "dtype": resolved.dtype,
            "enable_prefix_caching": resolved.enable_prefix_caching,
        }
        self._effective.put(key, result, ttl=None)
        return dict(result)

    def _json_of(self, value: Any) -> str:
        """JSON of a (frozen) spec, computed once per object: memo keys are built on every request."""
        hit = self._dumps.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        dump = getattr(value, "model_dump_json", None)
        text = dump() if callable(dump) else repr(value)
        self._dumps.put(id(value), (value, text), ttl=None)  # keeps the object alive, so its id stays unique
        return text

    def _key(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        args: ServingArgs,
        version: str | None,
        number: float,
        workload: Any | None,
    ) -> str:
        return "|".join(
            (
                self._json_of(model),
                self._json_of(gpu),
                args.model_dump_json(),
                json.dumps(version),  # (not str(): None, no release given, and a release spelled "None" differ)
                repr(number),
                self._json_of(workload) if workload is not None else "-",
            )
        )
