"""The server decodes a review once and hands the worker the decoded request (handler.receive): the worker
must decide on exactly the object it would have decoded from the body itself."""

from __future__ import annotations

import asyncio
import json
import marshal
import math
from pathlib import Path
from typing import Any

import pytest

from admission.webhook import handler
from admission.webhook.app import Inventory, job_maker
from admission.webhook.caches import StaticCache
from admission.webhook.handler import (
    BadRequest,
    Reviewer,
    decoded_request,
    parse_review,
    parse_timeout,
    receive,
    workload_key,
)
from admission.webhook.pool import DecisionPool
from admission.webhook.worker import Job, answer
from planner.k8s.nodes import NodeInfo, node_info
from planner.k8s.workloads import without_managed_fields
from planner.policy.model import Policy
from planner.policy.planning import CoreBackend

GOLDEN = Path(__file__).parent / "golden"
REVIEWS = [json.loads(p.read_text())["review"] for p in sorted(GOLDEN.glob("*.in.json"))]

# Values json.loads produces that a lossy encoding would change: lone surrogates, big and negative
# integers, NaN, infinities, -0.0, float precision, unicode, order of keys, empty containers.
ODD = {
    "z": "\ud800\udfff\ud800",
    "big": 2**200,
    "neg": -(2**70),
    "nan": math.nan,
    "inf": -math.inf,
    "zero": -0.0,
    "third": 1 / 3,
    "text": "caf\u00e9 \U0001f4a5 \u202e\x00",
    "a": [[], {}, [None, True, False]],
}


def _same(a: Any, b: Any) -> bool:
    """Equal, with the same types, the same key order and the same float bits (NaN equal to itself)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a.hex() == b.hex() if not math.isnan(a) else math.isnan(b)
    return bool(a == b)


def _body(review: dict[str, Any]) -> bytes:
    return json.dumps(review).encode()


@pytest.mark.parametrize("review", REVIEWS, ids=[p.name for p in sorted(GOLDEN.glob("*.in.json"))])
def test_the_worker_decodes_the_object_the_body_holds(review: dict[str, Any]) -> None:
    review = json.loads(json.dumps(review))
    obj = review["request"].get("object")
    if isinstance(obj, dict):
        obj.setdefault("metadata", {})["odd"] = ODD
    body = _body(review)
    received = receive(body)
    assert received.encoding == "marshal" and received.request.object is None  # the server keeps no object
    mine = decoded_request(received.payload, received.encoding)
    theirs = parse_review(body).request
    sent = json.loads(body)["request"]["object"]
    assert _same(mine.object, without_managed_fields(sent) if isinstance(sent, dict) else sent)
    assert mine.model_dump(exclude={"object", "old_object", "dry_run"}) == theirs.model_dump(
        exclude={"object", "old_object", "dry_run"}
    )
    assert received.key == workload_key(theirs)
    if received.reviewable:
        assert received.namespace == (theirs.namespace or handler.namespace_of(theirs.object or {}))


def test_an_update_s_old_object_stays_on_the_server() -> None:
    review = json.loads(json.dumps(REVIEWS[0]))
    review["request"]["operation"] = "UPDATE"
    review["request"]["oldObject"] = {"spec": {"x": "y" * 10_000}}
    received = receive(_body(review))
    assert len(received.payload) < len(_body(review)) - 10_000
    assert decoded_request(received.payload, received.encoding).old_object is None


def test_nesting_marshal_refuses_sends_the_body_and_decides_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    body = _body(REVIEWS[0])
    policy = Policy().for_namespace("ml")
    reviewer = Reviewer(backend=CoreBackend())

    def reply(received: handler.Received) -> bytes:
        return answer(reviewer, Job(received.payload, received.encoding, "mutate", policy, 0, None), []).body

    expected = reply(receive(body))

    def refuse(value: Any) -> bytes:
        raise ValueError("object too deeply nested to marshal")

    monkeypatch.setattr(marshal, "dumps", refuse)
    fallback = receive(body)
    assert fallback.encoding == "json" and fallback.payload == body
    assert reply(fallback) == expected


def test_what_is_not_a_review_is_still_a_bad_request() -> None:
    for body in (b"", b"[1]", b"{", b'{"apiVersion": "v1", "kind": "AdmissionReview", "request": {}}'):
        with pytest.raises(BadRequest):
            receive(body)


def test_skipped_reviews_are_not_reviewable() -> None:
    review = json.loads(json.dumps(REVIEWS[0]))
    review["request"]["operation"] = "DELETE"
    assert not receive(_body(review)).reviewable
    review["request"]["operation"] = "CREATE"
    review["request"]["object"] = None
    assert not receive(_body(review)).reviewable


def test_the_api_server_s_timeout_is_read_once_and_the_same_every_time() -> None:
    cases = {"10s": 10.0, "1m30s": 90.0, "1.5s": 1.5, "500ms": 0.5, "2h": 7200.0, "10": None, "s": None}
    cases |= {"x10s": None, "10sx": None, "0s": None, "": None, "1s" * 40: 40.0, "1s" * 40 + "?": None}
    for _ in range(2):  # (the second time from the memo)
        assert {value: parse_timeout(value) for value in cases} == cases
    assert parse_timeout(None) is None


def test_a_field_sent_under_both_names_reads_the_same_in_the_worker() -> None:
    review = json.loads(json.dumps(REVIEWS[0]))
    review["request"]["subResource"] = ""
    review["request"]["sub_resource"] = "scale"
    received = receive(_body(review))
    mine = decoded_request(received.payload, received.encoding)
    assert mine.sub_resource == received.request.sub_resource == parse_review(_body(review)).request.sub_resource


def test_managed_fields_stay_on_the_server_and_the_answer_is_the_same() -> None:
    review = json.loads(json.dumps(REVIEWS[0]))
    obj = review["request"]["object"]
    records = [{"manager": "kubectl", "fieldsV1": {f"f:{i}": {".": {}} for i in range(2_000)}}]
    obj["metadata"] = {**obj.get("metadata", {}), "managedFields": records, "odd": ODD}
    body = _body(review)
    received = receive(body)
    assert len(received.payload) < len(body) - 20_000
    sent = decoded_request(received.payload, received.encoding).object
    assert sent is not None and "managedFields" not in sent["metadata"]
    expected = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}
    assert _same(sent, json.loads(json.dumps(expected)))
    # The worker's answer from what the server sent is its answer from the whole body (the json path).
    policy = Policy().for_namespace("ml")
    reviewer = Reviewer(backend=CoreBackend())

    def reply(payload: bytes, encoding: Any) -> bytes:
        return answer(reviewer, Job(payload, encoding, "mutate", policy, 0, None), []).body

    assert reply(received.payload, received.encoding) == reply(body, "json")


def test_the_node_inventory_reaches_the_worker_once_per_version() -> None:
    """The server pickles its node inventory once per version (app.Inventory) and sends it with a worker's
    first job of that version only (app.job_maker): a new version reaches a worker that held the old one,
    and a replacement worker gets the current one. The worker decides with it as if handed the nodes."""

    def node(name: str, product: str) -> NodeInfo:
        return node_info(
            {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
             "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
        )  # fmt: skip

    first = [node("gpu-0", "NVIDIA-L4"), node("gpu-1", "NVIDIA-H100-80GB-HBM3")]
    then = [node("gpu-1", "NVIDIA-H100-80GB-HBM3")]
    review = json.loads(json.dumps(REVIEWS[0]))
    review["request"]["object"]["spec"]["template"]["spec"].pop("nodeSelector", None)  # (the GPU: from the nodes)
    received = receive(_body(review))
    policy = Policy().for_namespace("ml")
    reviewer = Reviewer(backend=CoreBackend())
    job = Job(received.payload, received.encoding, "mutate", policy, 0, None)
    with_first, with_then = answer(reviewer, job, first).body, answer(reviewer, job, then).body
    assert len({with_first, with_then, answer(reviewer, job, []).body}) == 3  # (so the nodes used show)

    class Cache(StaticCache):
        generation = 0

        def nodes_generation(self) -> int:
            return self.generation

    cache = Cache(nodes=first)
    inventory = Inventory(cache)
    sent: list[bool] = []

    def make_job(known_version: int) -> Job:
        made = job_maker(received, "mutate", policy, inventory)(known_version)
        sent.append(made.inventory is not None)
        return made

    async def run() -> list[bytes]:
        pool = DecisionPool(1, CoreBackend)
        await asyncio.get_running_loop().run_in_executor(None, pool.start)
        try:
            bodies = [(await pool.decide(make_job, "ml", 30.0)).body for _ in range(2)]
            cache._nodes, cache.generation = list(then), 1
            bodies.append((await pool.decide(make_job, "ml", 30.0)).body)
            worker = pool._idle[0]
            worker.process.kill()
            worker.process.join(5)
            bodies.append((await pool.decide(make_job, "ml", 30.0)).body)  # (on its replacement)
            return bodies
        finally:
            pool.close()

    assert asyncio.run(run()) == [with_first, with_first, with_then, with_then]
    assert sent == [True, False, True, True]
