"""Answer one AdmissionReview: parse, decide with the shared policy code, build the response.

Pure of HTTP: :class:`Reviewer` turns requests into response bytes, so it is tested without a server; it
runs in the decision workers (pool.py). It never raises for a well-formed review, and never denies
because of its own failure: an internal error answers ``allowed: true`` with a KVP049 warning. A review
that cannot be decided in time is the one policy-controlled exception (:func:`undecided`, KVP051).
"""

from __future__ import annotations

import functools
import json
import logging
import marshal
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import re2
from pydantic import BaseModel, ValidationError

from admission.webhook.review import (
    AdmissionRequest,
    AdmissionResponse,
    AdmissionReviewIn,
    AdmissionReviewOut,
    Status,
    encode_patch,
)
from planner.errors import PolicyError
from planner.k8s.nodes import NodeInfo
from planner.k8s.workloads import without_managed_fields
from planner.policy.codes import Code, finding, shorten
from planner.policy.decide import ObjectDecision, decide
from planner.policy.model import EffectivePolicy, Policy, load_policy
from planner.policy.planning import PlanningBackend

log = logging.getLogger("kv_planner.webhook")
Endpoint = Literal["mutate", "validate"]
_DURATION_PART = re2.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class BadRequest(Exception):
    """The request cannot be read as an AdmissionReview (answered 400)."""


def parse_timeout(value: str | None) -> float | None:
    """A Go duration as the API server sends it (``?timeout=10s``) -> seconds; None when absent/bad."""
    if not value:
        return None
    # The API server sends the same few values with every review: remembered (short ones only, bounded).
    return _short_timeout(value) if len(value) <= 32 else _timeout(value)


@functools.lru_cache(maxsize=64)
def _short_timeout(value: str) -> float | None:
    return _timeout(value)


def _timeout(value: str) -> float | None:
    total, pos = 0.0, 0
    for match in _DURATION_PART.finditer(value):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return total if pos == len(value) and total > 0 else None


def parse_review(body: bytes) -> AdmissionReviewIn:
    return _validated(_decoded(body))


def _decoded(body: bytes) -> dict[str, Any]:
    if not body.strip():
        raise BadRequest("empty body")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise BadRequest(f"body is not JSON: {str(error)[:120]}") from None
    if not isinstance(data, dict):
        raise BadRequest("body is not a JSON object")
    return data


def _validated(data: dict[str, Any]) -> AdmissionReviewIn:
    try:
        return AdmissionReviewIn.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "(top)"
        raise BadRequest(f"not an admission.k8s.io/v1 AdmissionReview: {where}: {first['msg']}") from None


@dataclass(frozen=True)
class Received:
    """A review as the server decoded it (:func:`receive`): what the server answers and routes with, and
    the ``payload`` a decision worker decides on."""

    request: AdmissionRequest  # without its object, which only the payload carries
    reviewable: bool  # needs_review, with an object to review
    namespace: str | None  # the request's, else the object's
    key: str  # the workload (workload_key)
    payload: bytes
    encoding: Literal["marshal", "json"]


def receive(body: bytes) -> Received:
    """Decode a review once (400 for what is not one) and encode the request fields a decision reads for
    the worker, in ``marshal``'s format, which the worker reads back in a third of ``json.loads``' time on
    a 50 KB review. Left out: ``oldObject`` and ``dryRun``, which no decision uses (an UPDATE's oldObject
    is as large as its object), and the object's ``metadata.managedFields``, which decisions leave out.

    The values are the ones ``json.loads`` produced (str, int, float, bool, None, list, dict in order), and
    marshal writes each of them exactly (lone surrogates, big integers, NaN included), so the worker
    decides on the same object it would have decoded from the body. Nesting past marshal's own limit (a
    little deeper than json.loads' recursion limit) sends the body instead.

    The decoded object is not kept: the server needs only the request's own fields while the review is
    decided, and its thousands of dicts and strings are freed here, before a garbage collection could
    move them to an older generation (heap.py).
    """
    request = _validated(_decoded(body)).request
    # The fields as the server validated them (not the raw request: a field also sent under its Python
    # name must not read differently in the worker), the object as decoded.
    compact = {
        "uid": request.uid,
        "kind": request.kind.model_dump(),
        "name": request.name,
        "namespace": request.namespace,
        "operation": request.operation,
        "subResource": request.sub_resource,
        # (without metadata.managedFields, which decisions leave out: often half of an object's bytes)
        "object": without_managed_fields(request.object) if request.object is not None else None,
    }
    encoding: Literal["marshal", "json"] = "marshal"
    try:
        payload = marshal.dumps(compact)
    except ValueError:
        payload, encoding = body, "json"
    obj = request.object
    reviewable = needs_review(request) and isinstance(obj, Mapping)
    namespace = request.namespace or (namespace_of(obj) if isinstance(obj, Mapping) else None)
    key = workload_key(request)
    header = request.model_copy(update={"object": None, "old_object": None})
    return Received(header, reviewable, namespace, key, payload, encoding)


def workload_key(request: AdmissionRequest) -> str:
    """Which workload a review is about (its updates, dry-runs and reinvocations share it), for the pool to
    send it to the worker that planned it last."""
    name = request.name
    if not name and isinstance(request.object, Mapping):
        meta = request.object.get("metadata")
        generated = meta.get("generateName") if isinstance(meta, Mapping) else None
        name = generated if isinstance(generated, str) else ""
    return f"{request.namespace or ''}/{request.kind.group}/{request.kind.kind}/{name}"


def decoded_request(payload: bytes, encoding: Literal["marshal", "json"]) -> AdmissionRequest:
    """The request a worker decides on, from :attr:`Received.payload` (in the worker process)."""
    if encoding == "marshal":
        return AdmissionRequest.model_validate(marshal.loads(payload))
    return parse_review(payload).request


class PolicyHolder:
    """The policy in force; reloaded when its file changes (a bad new file keeps the old policy)."""

    def __init__(self, path: str | os.PathLike[str] | None, policy: Policy | None = None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self.generation = 0
        self.last_error: str | None = None
        self.policy = policy or Policy()
        if self.path is not None:
            self.policy = load_policy(self.path)
            self._stamp = self._file_stamp()
            self.generation = 1

    def _file_stamp(self) -> tuple[int, int, int] | None:
        if self.path is None:
            return None
        st = os.stat(self.path)
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def reload(self) -> bool:
        """Reload if the file changed; True when a new policy is in force."""
        if self.path is None:
            return False
        with self._lock:
            try:
                stamp = self._file_stamp()
                if stamp == self._stamp:
                    return False
                policy = load_policy(self.path)
            except (OSError, PolicyError) as error:
                self.last_error = str(error)
                log.warning("policy reload failed, keeping the previous policy: %s", error)
                return False
            self.policy, self._stamp, self.last_error = policy, stamp, None
            self.generation += 1
            log.info("policy reloaded from %s (generation %d)", self.path, self.generation)
            return True


class Outcome(BaseModel):
    """A review's response and how it was decided (for metrics and logs)."""

    body: bytes
    decision: str
    worker_seconds: float | None = None  # the decision worker's time on it, when one decided


class Reviewer:
    """Turns AdmissionReview requests into responses with the shared policy code (runs in a worker)."""

    def __init__(self, *, backend: PlanningBackend) -> None:
        self.backend = backend

    def decide(
        self, request: AdmissionRequest, policy: EffectivePolicy, inventory: Sequence[NodeInfo]
    ) -> ObjectDecision | None:
        """The decision for a request, or None when there is nothing to review."""
        if not needs_review(request):
            return None
        obj = request.object
        if not isinstance(obj, Mapping):
            return None
        namespace = request.namespace or namespace_of(obj)
        return decide(obj, policy=policy, backend=self.backend, inventory=inventory, namespace=namespace)

    def respond(self, request: AdmissionRequest, endpoint: Endpoint, decision: ObjectDecision | None) -> Outcome:
        if decision is None:
            return skipped(request)
        audit: dict[str, str] = {"decision": decision.decision}
        if decision.codes:
            audit["codes"] = ",".join(decision.codes)
        if decision.decision == "deny":
            return denied(request, decision.deny_reasons, decision.warnings, audit)
        patch = decision.patch if endpoint == "mutate" else []
        response = AdmissionResponse(
            uid=request.uid,
            allowed=True,
            patch=encode_patch(patch) if patch else None,
            patch_type="JSONPatch" if patch else None,
            warnings=decision.warnings or None,
            audit_annotations=audit,
        )
        label = decision.decision if patch or decision.decision != "mutate" else "warn"
        return Outcome(body=AdmissionReviewOut(response=response).to_json(), decision=label)

    def fail_open(self, request: AdmissionRequest, reason: str) -> Outcome:
        return fail_open(request, reason)


def needs_review(request: AdmissionRequest) -> bool:
    """False for DELETE/CONNECT and subresources (/scale, /status): nothing kv-planner changes."""
    return request.operation in ("CREATE", "UPDATE") and not request.sub_resource and request.object is not None


def skipped(request: AdmissionRequest) -> Outcome:
    return Outcome(
        body=AdmissionReviewOut(response=AdmissionResponse(uid=request.uid, allowed=True)).to_json(),
        decision="skip",
    )


def denied(
    request: AdmissionRequest, reasons: Sequence[str], warnings: Sequence[str], audit: dict[str, str]
) -> Outcome:
    message = "kv-planner: " + "; ".join(reasons)
    response = AdmissionResponse(
        uid=request.uid,
        allowed=False,
        status=Status(code=403, reason="Forbidden", message=message[:1024]),
        warnings=list(warnings) or None,
        audit_annotations=audit,
    )
    return Outcome(body=AdmissionReviewOut(response=response).to_json(), decision="deny")


def fail_open(request: AdmissionRequest, reason: str) -> Outcome:
    """Allowed, unchanged, with a warning: kv-planner's own failure never blocks a workload."""
    item = finding(Code.INTERNAL_ERROR, None, reason)
    response = AdmissionResponse(
        uid=request.uid,
        allowed=True,
        warnings=[shorten(item.message)],
        audit_annotations={"decision": "error", "codes": item.code},
    )
    return Outcome(body=AdmissionReviewOut(response=response).to_json(), decision="error")


def undecided(request: AdmissionRequest, policy: EffectivePolicy, reason: str) -> Outcome:
    """A review that could not be decided in time (KVP051): denied under Enforce with ``onTimeout: deny``
    (a slow or flooded webhook must not be a way around Enforce), else allowed unchanged with a warning."""
    item = finding(Code.REVIEW_TIMED_OUT, None, reason)
    audit = {"decision": "timeout", "codes": item.code}
    if policy.validation_action == "Enforce" and policy.on_timeout == "deny":
        outcome = denied(request, [item.message], [], audit)
        return Outcome(body=outcome.body, decision="timeout-deny")
    response = AdmissionResponse(
        uid=request.uid, allowed=True, warnings=[shorten(item.message)], audit_annotations=audit
    )
    return Outcome(body=AdmissionReviewOut(response=response).to_json(), decision="timeout-allow")


def namespace_of(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    if isinstance(meta, Mapping) and isinstance(meta.get("namespace"), str):
        return str(meta["namespace"])
    return None
