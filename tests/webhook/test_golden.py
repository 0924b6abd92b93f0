"""Golden AdmissionReviews: each ``golden/<case>.in.json`` through the webhook's reviewer, compared with
``golden/<case>.out.json`` (patch shown decoded). A missing expectation fails; after a deliberate change
run ``pytest tests/webhook --regen-golden`` to (re)write the expected outputs, then review the diff.

Every case also checks the response contract: the uid is echoed, ``patchType`` comes with a patch and
only then, warnings stay under 120 characters with a KVPnnn code, the patch applies to the received
object, and the patched object reviewed again gets no patch (idempotence, reinvocation).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from admission.webhook.caches import StaticCache
from admission.webhook.handler import PolicyHolder, Reviewer, namespace_of, parse_review
from planner.policy.model import parse_policy
from planner.policy.planning import CoreBackend

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.name[: -len(".in.json")] for p in GOLDEN.glob("*.in.json"))
BACKEND = CoreBackend()


class _Case:
    """A reviewer with the case's policy and namespace, as the server's event loop + a worker run it."""

    def __init__(self, case: dict[str, Any]) -> None:
        self.policy = PolicyHolder(None, parse_policy(case.get("policy")))
        self.cache = StaticCache(namespaces={"ml": case.get("namespace", {})})
        self.reviewer = Reviewer(backend=BACKEND)

    def answer(self, parsed: Any, endpoint: str) -> Any:
        request = parsed.request
        namespace = request.namespace or namespace_of(request.object or {})
        effective = self.policy.policy.for_namespace(namespace, self.cache.namespace(namespace))
        decision = self.reviewer.decide(request, effective, self.cache.nodes())
        return self.reviewer.respond(request, endpoint, decision)  # type: ignore[arg-type]


def _reviewer(case: dict[str, Any]) -> _Case:
    return _Case(case)


def _answer(reviewer: _Case, review: dict[str, Any], endpoint: str = "mutate") -> dict[str, Any]:
    parsed = parse_review(json.dumps(review).encode())
    outcome = reviewer.answer(parsed, endpoint)
    body: dict[str, Any] = json.loads(outcome.body)
    return body


def _readable(body: dict[str, Any]) -> dict[str, Any]:
    response = dict(body["response"])
    if "patch" in response:
        response["patch"] = json.loads(base64.b64decode(response["patch"]))
    return {**body, "response": response}


def expect_golden(actual: dict[str, Any], expected_path: Path, *, regen: bool) -> None:
    """``actual`` equals the recorded expectation; ``regen`` (re)writes it instead. A missing expectation
    is a failure: writing it here would make a new case pass unreviewed."""
    if regen:
        expected_path.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n")
    if not expected_path.is_file():
        pytest.fail(f"{expected_path} is missing: run `pytest tests/webhook --regen-golden`, then review it")
    assert actual == json.loads(expected_path.read_text())


def test_a_missing_expectation_fails_and_writes_nothing(tmp_path: Path) -> None:
    expected = tmp_path / "case.out.json"
    with pytest.raises(pytest.fail.Exception, match="--regen-golden"):
        expect_golden({"a": 1}, expected, regen=False)
    assert not expected.exists()
    expect_golden({"a": 1}, expected, regen=True)
    expect_golden({"a": 1}, expected, regen=False)
    with pytest.raises(AssertionError):
        expect_golden({"a": 2}, expected, regen=False)


def test_every_case_has_an_expectation() -> None:
    assert CASES
    assert sorted(p.name[: -len(".out.json")] for p in GOLDEN.glob("*.out.json")) == CASES


@pytest.mark.parametrize("name", CASES)
def test_golden_review(name: str, request: pytest.FixtureRequest) -> None:
    case = json.loads((GOLDEN / f"{name}.in.json").read_text())
    reviewer = _reviewer(case)
    body = _answer(reviewer, case["review"])
    readable = _readable(body)
    expect_golden(readable, GOLDEN / f"{name}.out.json", regen=request.config.getoption("--regen-golden"))

    request = case["review"]["request"]
    response = body["response"]
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    assert response["uid"] == request["uid"]
    assert ("patch" in response) == ("patchType" in response)
    for warning in response.get("warnings", []):
        assert len(warning) <= 120 and re.match(r"^KVP\d{3} ", warning)
    if "patch" in response:
        assert response["allowed"] is True
        patched = jsonpatch.apply_patch(request["object"], readable["response"]["patch"])
        again = {**case["review"], "request": {**request, "object": patched, "uid": request["uid"] + "-2"}}
        assert "patch" not in _answer(reviewer, again)["response"]
    if not response["allowed"]:
        assert response["status"]["code"] == 403 and response["status"]["message"].startswith("kv-planner: KVP")


def test_dry_run_gets_the_same_answer() -> None:
    create = json.loads((GOLDEN / "deployment-image-args.in.json").read_text())
    dry = json.loads((GOLDEN / "deployment-dry-run.in.json").read_text())
    a = _answer(_reviewer(create), create["review"])["response"]
    b = _answer(_reviewer(dry), dry["review"])["response"]
    assert a.pop("uid") != b.pop("uid") and a == b and "patch" in a


def test_already_mutated_object_gets_no_patch() -> None:
    case = json.loads((GOLDEN / "deployment-vllm-serve.in.json").read_text())
    reviewer = _reviewer(case)
    first = _readable(_answer(reviewer, case["review"]))["response"]
    mutated = jsonpatch.apply_patch(case["review"]["request"]["object"], first["patch"])
    update = {
        **case["review"],
        "request": {**case["review"]["request"], "operation": "UPDATE", "object": mutated, "oldObject": mutated},
    }
    response = _answer(reviewer, update)["response"]
    assert response["allowed"] and "patch" not in response


def test_validate_endpoint_never_patches_but_denies_the_same() -> None:
    case = json.loads((GOLDEN / "deployment-image-args.in.json").read_text())
    response = _answer(_reviewer(case), case["review"], endpoint="validate")["response"]
    assert response["allowed"] and "patch" not in response
    deny = json.loads((GOLDEN / "deployment-context-too-long-enforce.in.json").read_text())
    assert _answer(_reviewer(deny), deny["review"], endpoint="validate")["response"]["allowed"] is False
