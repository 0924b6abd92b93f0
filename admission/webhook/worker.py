"""The decision worker: a child process that answers reviews one at a time (see pool.py for why).

It receives a :class:`Job` (the request fields the server decoded, in marshal's format; the effective
policy of the namespace; the node inventory when it changed) over a socket (frames.py), decides with the
shared policy code and sends back a :class:`Reply` with the response bytes. Planning work (and model lookups) only ever
run here, never on the server's event loop; a worker that overruns its budget is killed by the server and
replaced.
"""

from __future__ import annotations

import copy
import logging
import os
import pickle
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from admission.webhook import frames, heap
from admission.webhook.handler import Endpoint, Reviewer, decoded_request
from admission.webhook.review import AdmissionRequest
from planner.k8s.nodes import NodeInfo
from planner.models.catalog import all_models
from planner.policy.codes import Code
from planner.policy.decide import ObjectDecision
from planner.policy.model import WORKLOAD_ANNOTATION, EffectivePolicy, Policy
from planner.policy.planning import PlanningBackend

log = logging.getLogger("kv_planner.webhook.worker")

WARMUP_OBJECT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "kv-planner-warmup", "namespace": "default"},
    "spec": {
        "template": {
            "metadata": {},
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                "containers": [
                    {
                        "name": "vllm",
                        "image": "vllm/vllm-openai:latest",
                        "args": ["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        }
    },
}


@dataclass(frozen=True)
class Job:
    payload: bytes  # handler.Received.payload: the request fields the server decoded, marshalled (or the body)
    encoding: Literal["marshal", "json"]
    endpoint: Endpoint
    policy: EffectivePolicy
    inventory_version: int
    inventory: bytes | None  # the nodes (app.Inventory.encoded), sent once per version; None: held already


@dataclass(frozen=True)
class Reply:
    body: bytes
    decision: str
    codes: tuple[str, ...]
    error: str | None = None  # an internal error, for the server's log
    recycle: bool = False  # the worker outgrew its memory bound: replace it after this reply
    seconds: float = 0.0  # the worker's time on it (decode, decide, respond): Server-Timing's "decide"


def warm_up(reviewer: Reviewer) -> None:
    """One review in-process, so catalogs and imports are loaded before traffic arrives."""
    request = AdmissionRequest(uid="warmup", operation="CREATE", object=WARMUP_OBJECT, namespace="default")
    try:
        reviewer.decide(request, Policy().for_namespace("default"), [])
    except Exception as error:  # a failed warm-up only costs the first review its imports
        log.warning("warm-up review failed: %s", error)


# A typical chat profile (docs/workload.md) for warm_profiles.
WARM_PROFILE = "{prompt_tokens: {p50: 800, p99: 12000}, output_tokens: {p50: 200, p99: 2000}}"


def warm_profiles(reviewer: Reviewer) -> ObjectDecision | None:
    """One review with a request-length profile (the fork server does, once): the risk model's modules
    and numpy's FFT are imported (~40 ms) and its first transforms planned before the workers are
    forked, instead of in each worker's first profiled review. Returns the decision (None: failed)."""
    obj = copy.deepcopy(WARMUP_OBJECT)
    obj["metadata"]["annotations"] = {WORKLOAD_ANNOTATION: WARM_PROFILE}
    request = AdmissionRequest(uid="warmup", operation="CREATE", object=obj, namespace="default")
    try:
        return reviewer.decide(request, Policy().for_namespace("default"), [])
    except Exception as error:  # a failed warm-up only costs the first profiled review its imports
        log.warning("warm-up review with a profile failed: %s", error)
        return None


# GPUs named by GPU feature discovery labels on most clusters (catalog names), for warm_popular.
WARM_GPUS = ("L4", "A10G", "L40S", "A100-80GB", "H100-80GB", "H200-141GB")
WARM_MODELS = 12  # the most deployed catalog models (popular_rank)
WARM_SECONDS = 2.0


def warm_popular(reviewer: Reviewer, *, seconds: float = WARM_SECONDS) -> int:
    """Review the most deployed catalog models on common GPUs (the fork server does, once), so that their
    model specs, per-model invariants and default plans are in memory before the workers are forked.
    Stops after ``seconds`` (start-up stays bounded whatever the catalog holds); returns the reviews made."""
    deadline = time.monotonic() + seconds
    policy = Policy().for_namespace("default")
    done = 0
    for gpu in WARM_GPUS:  # (every model on the first GPU first: model specs are most of what is shared)
        for model in all_models()[:WARM_MODELS]:
            if time.monotonic() >= deadline:
                return done
            obj = copy.deepcopy(WARMUP_OBJECT)
            spec = obj["spec"]["template"]["spec"]
            spec["nodeSelector"] = {"nvidia.com/gpu.product": gpu}
            spec["containers"][0]["args"] = ["--model", model.id]
            request = AdmissionRequest(uid="warmup", operation="CREATE", object=obj, namespace="default")
            try:
                reviewer.decide(request, policy, [])
            except Exception as error:  # a failed warm-up only costs that model its first review
                log.warning("warm-up review of %s on %s failed: %s", model.id, gpu, error)
            done += 1
    return done


def shared_backend() -> PlanningBackend:
    """The fork server's warmed backend (admission.webhook.preload): the workers' default."""
    from admission.webhook import preload  # (loaded in the fork server already: no cost in a worker)

    return preload.BACKEND


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def answer(reviewer: Reviewer, job: Job, inventory: Sequence[NodeInfo]) -> Reply:
    """The reply to one job. Never raises: an internal error is an allowed-unchecked answer (KVP049)."""
    try:
        request = decoded_request(job.payload, job.encoding)
    except Exception as error:  # the server decoded the same request already; only a bug lands here
        return Reply(body=b"", decision="error", codes=(Code.INTERNAL_ERROR.value,), error=repr(error))
    try:
        decision = reviewer.decide(request, job.policy, inventory)
        outcome = reviewer.respond(request, job.endpoint, decision)
        codes = tuple(decision.codes) if decision is not None else ()
        return Reply(body=outcome.body, decision=outcome.decision, codes=codes)
    except Exception as error:  # the boundary: never a 500, never a denial for our own failure
        log.exception("review %s failed", request.uid)
        reason = f"internal error ({type(error).__name__}): allowed unchecked"
        outcome = reviewer.fail_open(request, reason)
        return Reply(body=outcome.body, decision="error", codes=(Code.INTERNAL_ERROR.value,), error=reason)


def serve(sock: socket.socket, backend_factory: Callable[[], PlanningBackend], max_rss: int, log_level: str) -> None:
    """The worker's main loop (the target of the worker process): jobs in, replies out, on ``sock`` (frames.py)."""
    # The server process owns the signals; a worker ends when its socket closes (or when it is killed).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    reviewer = Reviewer(backend=backend_factory())
    warm_up(reviewer)
    heap.tune()  # (the fork server froze what every worker shares)
    try:
        frames.send(sock, "ready")
    except OSError:  # the server closed the pool while this worker started (shutdown)
        return
    inventory: Sequence[NodeInfo] = []
    while True:
        try:
            serial, job = frames.receive(sock)
        except (EOFError, OSError):
            return
        if job.inventory is not None:
            inventory = pickle.loads(job.inventory)  # (the server's own bytes: app.Inventory.encoded)
        started = time.perf_counter()
        reply = answer(reviewer, job, inventory)
        recycle = bool(max_rss) and _rss_bytes() > max_rss
        reply = Reply(reply.body, reply.decision, reply.codes, reply.error, recycle, time.perf_counter() - started)
        try:
            frames.send(sock, (serial, reply))
        except OSError:
            return
        if reply.recycle:
            return
