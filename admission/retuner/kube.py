"""The retuner's writes to the cluster: Events, the recommendation annotation, and (opt-in) the args patch.

* Events (core/v1) on the workload, reason = the decision's stable reason, so ``kubectl describe`` and
  event exporters show why the recommendation moved.
* ``kv-planner.io/recommended-max-num-seqs`` on the workload's metadata (merge patch; with
  ``--retune-annotate``).
* ``apply``: set ``--max-num-seqs`` in the vLLM container's argv with :func:`planner.vllm.argv.set_flag`
  (the user's own spelling kept, nothing else touched), as a strategic-merge patch of that container:
  a rollout. At most one per workload per ``apply_min_interval_s`` and ``apply_max_per_hour`` over all
  workloads; never outside the policy bounds (checked again here); shell-string commands are left alone.

The kubernetes client objects (``AppsV1Api``/``CoreV1Api``-like) are passed in; tests use fakes.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from admission.kubeapi import to_dict as _to_dict
from admission.retuner.decide import Decision
from admission.retuner.settings import RetunerSettings

logger = logging.getLogger("admission.retuner")

ANNOTATION = "kv-planner.io/recommended-max-num-seqs"
COMPONENT = "kv-planner-retuner"
APPLIED = "MaxNumSeqsApplied"
APPLY_BLOCKED = "MaxNumSeqsApplyBlocked"
SUPPORTED_KINDS = ("Deployment", "StatefulSet")
# (connect, read) seconds for every API call: the kubernetes client waits forever by default, and a
# hung API server must not stall the retuner's rounds.
API_TIMEOUT_S = (5.0, 15.0)


class WorkloadRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str
    kind: str
    name: str
    uid: str = ""
    verified: bool = Field(default=False, description="resolved from a pod through the API, UID-matched")


class ApplyResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    result: str  # applied | blocked | error
    detail: str


def _now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeWriter:
    def __init__(
        self, apps_api: Any, core_api: Any, settings: RetunerSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.apps = apps_api
        self.core = core_api
        self.settings = settings
        self.clock = clock
        self._last_apply: dict[WorkloadRef, float] = {}
        self._last_attempt: dict[WorkloadRef, float] = {}
        self._recent_applies: deque[float] = deque()
        self.instance = os.environ.get("HOSTNAME", "kv-planner")

    def refused(self, ref: WorkloadRef) -> str | None:
        """Why the retuner may not write to ``ref`` (None: it may). Checked before every write."""
        if ref.namespace not in self.settings.namespaces:
            return f"namespace {ref.namespace!r} is not in --retune-namespaces"
        if not ref.verified:
            return "the workload was not resolved from its pods through the Kubernetes API"
        return None

    # --- events and annotation ---------------------------------------------------------------------

    def event(self, ref: WorkloadRef, reason: str, message: str, *, warning: bool = False) -> None:
        why = self.refused(ref)
        if why is not None:
            logger.info("no event %s on %s/%s %s: %s", reason, ref.namespace, ref.kind, ref.name, why)
            return
        stamp = _now_iso()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{ref.name}.", "namespace": ref.namespace},
            "involvedObject": {
                "apiVersion": "apps/v1",
                "kind": ref.kind,
                "name": ref.name,
                "namespace": ref.namespace,
                **({"uid": ref.uid} if ref.uid else {}),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT, "host": self.instance},
            "reportingComponent": f"kv-planner.io/{COMPONENT}",
            "reportingInstance": self.instance,
            "action": "Retune",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(ref.namespace, body, _request_timeout=API_TIMEOUT_S)
        except Exception as error:  # events are best effort
            logger.warning("could not record event %s on %s/%s: %s", reason, ref.namespace, ref.name, error)

    def _patch(self, ref: WorkloadRef, body: dict[str, Any]) -> None:
        if ref.uid:
            # A UID precondition: if the object was deleted and recreated under the same name since it
            # was resolved, the API server refuses the patch (409) instead of patching the new one.
            body = {**body, "metadata": {**body.get("metadata", {}), "uid": ref.uid}}
        if ref.kind == "Deployment":
            self.apps.patch_namespaced_deployment(ref.name, ref.namespace, body, _request_timeout=API_TIMEOUT_S)
        elif ref.kind == "StatefulSet":
            self.apps.patch_namespaced_stateful_set(ref.name, ref.namespace, body, _request_timeout=API_TIMEOUT_S)
        else:
            raise ValueError(f"kv-planner does not patch {ref.kind} objects")

    def _read(self, ref: WorkloadRef) -> dict[str, Any]:
        if ref.kind == "Deployment":
            return _to_dict(
                self.apps.read_namespaced_deployment(ref.name, ref.namespace, _request_timeout=API_TIMEOUT_S)
            )
        if ref.kind == "StatefulSet":
            return _to_dict(
                self.apps.read_namespaced_stateful_set(ref.name, ref.namespace, _request_timeout=API_TIMEOUT_S)
            )
        raise ValueError(f"kv-planner does not patch {ref.kind} objects")

    def annotate(self, ref: WorkloadRef, value: int) -> None:
        if ref.kind not in SUPPORTED_KINDS or self.refused(ref) is not None:
            return
        try:
            self._patch(ref, {"metadata": {"annotations": {ANNOTATION: str(value)}}})
        except Exception as error:
            logger.warning("could not annotate %s/%s: %s", ref.namespace, ref.name, error)

    # --- apply ---------------------------------------------------------------------------------------

    def _rate_limited(self, ref: WorkloadRef) -> str | None:
        now = self.clock()
        last = self._last_apply.get(ref)
        if last is not None and now - last < self.settings.apply_min_interval_s:
            return f"last rollout {now - last:.0f} s ago (minimum {self.settings.apply_min_interval_s:.0f} s)"
        while self._recent_applies and now - self._recent_applies[0] > 3600:
            self._recent_applies.popleft()
        if len(self._recent_applies) >= self.settings.apply_max_per_hour:
            return f"{len(self._recent_applies)} rollouts in the last hour (limit {self.settings.apply_max_per_hour})"
        return None

    def due(self, ref: WorkloadRef) -> bool:
        """Whether a recommendation still waiting to be applied may be tried again now (silently:
        a rate-limited or failed rollout is retried once per ``apply_min_interval_s``, not every round)."""
        last = self._last_attempt.get(ref)
        if last is not None and self.clock() - last < self.settings.apply_min_interval_s:
            return False
        return self._rate_limited(ref) is None

    def apply(self, ref: WorkloadRef, decision: Decision) -> ApplyResult:
        value = decision.recommended
        if value is None or decision.action == "hold":
            return ApplyResult(result="blocked", detail="nothing to apply")
        why = self.refused(ref)
        if why is not None:
            # No event either: the retuner has no right to write there, or no proof of whose it is.
            logger.warning("not applying --max-num-seqs %d to %s/%s: %s", value, ref.namespace, ref.name, why)
            return ApplyResult(result="blocked", detail=why)
        s = self.settings
        if value < s.min_seqs or (s.max_seqs is not None and value > s.max_seqs):
            return self._blocked(ref, f"{value} is outside the policy bounds [{s.min_seqs}, {s.max_seqs}]")
        if ref.kind not in SUPPORTED_KINDS:
            return self._blocked(ref, f"{ref.kind} workloads are not patched; apply the recommendation by hand")
        # A rollback undoes our own probe (which was rate-limited): it must not wait an hour while the
        # probed value preempts.
        self._last_attempt[ref] = self.clock()
        limited = None if decision.rollback else self._rate_limited(ref)
        if limited is not None:
            return self._blocked(ref, limited)
        try:
            workload = self._read(ref)
            patch = container_patch(workload, value)
        except Exception as error:
            return self._blocked(ref, f"cannot edit the vLLM arguments: {error}")
        try:
            self._patch(ref, patch)
        except Exception as error:
            logger.warning("apply to %s/%s failed: %s", ref.namespace, ref.name, error)
            self.event(ref, APPLY_BLOCKED, f"patch failed: {error}", warning=True)
            return ApplyResult(result="error", detail=str(error))
        now = self.clock()
        self._last_apply[ref] = now
        self._recent_applies.append(now)
        self.event(ref, APPLIED, f"--max-num-seqs {decision.current} -> {value}: {decision.message}")
        return ApplyResult(result="applied", detail=f"--max-num-seqs {value}")

    def _blocked(self, ref: WorkloadRef, detail: str) -> ApplyResult:
        self.event(ref, APPLY_BLOCKED, detail, warning=True)
        return ApplyResult(result="blocked", detail=detail)


def container_patch(workload: dict[str, Any], value: int) -> dict[str, Any]:
    """Strategic-merge patch setting ``--max-num-seqs`` on the workload's vLLM container."""
    from planner.vllm.argv import parse_args, parse_command, set_flag

    containers = (((workload.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    for container in containers:
        command = [str(w) for w in container.get("command") or []]
        args = [str(w) for w in container.get("args") or []]
        parsed = parse_command(command + args) if command else None
        if parsed is None and not command and "vllm" in str(container.get("image", "")).lower():
            parsed = parse_args(args)
            edited = set_flag(args, parsed, "max_num_seqs", str(value))
            return _patch_for(container["name"], args=edited, annotation=value)
        if parsed is None:
            continue
        full = command + args
        edited = set_flag(full, parsed, "max_num_seqs", str(value))
        if edited[: len(command)] == command:
            return _patch_for(container["name"], args=edited[len(command) :], annotation=value)
        if not args:
            return _patch_for(container["name"], command=edited, annotation=value)
        raise ValueError("--max-num-seqs sits in the container's command and its args are set too")
    raise ValueError("no container runs vLLM with an argv kv-planner can edit (shell scripts are left alone)")


def _patch_for(
    name: str, *, annotation: int, args: list[str] | None = None, command: list[str] | None = None
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name}
    if args is not None:
        container["args"] = args
    if command is not None:
        container["command"] = command
    return {
        "metadata": {"annotations": {ANNOTATION: str(annotation)}},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }
