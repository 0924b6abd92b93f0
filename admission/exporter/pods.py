"""A Kubernetes Pod (as a plain dict) -> a scrape :class:`Target`, or None when it is not a vLLM server.

Pure functions over the API's JSON shape (camelCase keys), so they are tested on plain dicts.

* vLLM pods: annotated by the webhook (``kv-planner.io/plan`` / ``kv-planner.io/planned-num-gpu-blocks``)
  or running a container whose command line vLLM's own argument parser would accept
  (:func:`planner.vllm.argv.parse_command`, or ``parse_args`` for images whose entrypoint is vLLM).
* Port: ``prometheus.io/port`` annotation, else the container's ``--port``, else a container port named
  ``http``/``metrics``, else vLLM's default 8000. Path: ``prometheus.io/path`` or ``/metrics``.
* Workload: the controller owner; a ReplicaSet's name minus its ``pod-template-hash`` is the Deployment.
* Limits: the container's flags, else the plan annotation (``maxNumSeqs``, ``maxModelLen``,
  ``numGpuBlocks``), which holds vLLM's defaults for flags left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from admission.observations.targets import Target
from planner.errors import KvPlannerError
from planner.units import parse_human_int_or_auto

PLAN = "kv-planner.io/plan"
PLANNED_BLOCKS = "kv-planner.io/planned-num-gpu-blocks"
VLLM_DEFAULT_PORT = 8000


def _int(value: Any) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _plan(annotations: Mapping[str, str]) -> dict[str, Any]:
    try:
        plan = json.loads(annotations.get(PLAN) or "{}")
    except ValueError:
        return {}
    return plan if isinstance(plan, dict) else {}


def vllm_flags(container: Mapping[str, Any]) -> dict[str, Any] | None:
    """vLLM's parsed flags for a container that runs vLLM, else None."""
    from planner.vllm.argv import parse_args, parse_command

    command = [str(w) for w in container.get("command") or []]
    args = [str(w) for w in container.get("args") or []]
    try:
        parsed = parse_command(command + args) if command else None
        if parsed is None and "vllm" in str(container.get("image", "")).lower():
            parsed = parse_args(args)
    except (KvPlannerError, ValueError):
        return None
    return None if parsed is None else dict(parsed.values)


def workload_of(pod: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the controller that owns the pod (Deployment through its ReplicaSet)."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    lws = labels.get("leaderworkerset.sigs.k8s.io/name")
    if lws:
        return "LeaderWorkerSet", str(lws)
    for owner in metadata.get("ownerReferences") or []:
        if not owner.get("controller"):
            continue
        kind, name = str(owner.get("kind", "")), str(owner.get("name", ""))
        template_hash = labels.get("pod-template-hash")
        if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
            return "Deployment", name[: -len(template_hash) - 1]
        return kind, name
    return "Pod", str(metadata.get("name", ""))


def pod_target(pod: Mapping[str, Any]) -> Target | None:
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if metadata.get("deletionTimestamp") or status.get("phase") != "Running" or not status.get("podIP"):
        return None
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    plan = _plan(annotations)
    flags: dict[str, Any] | None = None
    vllm_container: Mapping[str, Any] | None = None
    for container in (pod.get("spec") or {}).get("containers") or []:
        flags = vllm_flags(container)
        if flags is not None:
            vllm_container = container
            break
    if flags is None and PLAN not in annotations and PLANNED_BLOCKS not in annotations:
        return None
    flags = flags or {}
    port = _int(annotations.get("prometheus.io/port")) or _int(flags.get("port"))
    if port is None and vllm_container is not None:
        ports = vllm_container.get("ports") or []
        named = [p for p in ports if p.get("name") in ("http", "metrics")]
        chosen = (named or ports or [{}])[0]
        port = _int(chosen.get("containerPort"))
    path = annotations.get("prometheus.io/path") or "/metrics"
    kind, workload = workload_of(pod)
    # The flags are what vLLM runs with; the plan annotation fills in vLLM's defaults when a flag is absent.
    max_model_len: int | None = None
    if flags.get("max_model_len") is not None:
        try:
            parsed = parse_human_int_or_auto(str(flags["max_model_len"]))
            max_model_len = parsed if parsed > 0 else None
        except ValueError:
            max_model_len = None
    max_model_len = max_model_len or _int(plan.get("maxModelLen"))
    host = status["podIP"]
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return Target(
        url=f"http://{host}:{port or VLLM_DEFAULT_PORT}{path if path.startswith('/') else '/' + path}",
        namespace=str(metadata.get("namespace", "")),
        pod=str(metadata.get("name", "")),
        workload=workload,
        workload_kind=kind,
        planned_num_gpu_blocks=_int(annotations.get(PLANNED_BLOCKS)) or _int(plan.get("numGpuBlocks")),
        planned_num_gpu_blocks_low=_int(plan.get("numGpuBlocksLow")),
        max_num_seqs=_int(flags.get("max_num_seqs")) or _int(plan.get("maxNumSeqs")),
        max_model_len=max_model_len,
        gpu=str(plan.get("gpu") or ""),
        gpu_count=_int(plan.get("gpuCount")),
        vllm_version=str(plan.get("vllmVersion") or ""),
        source="kubernetes",
    )
