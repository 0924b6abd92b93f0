"""The webhooks' CEL matchConditions, compiled and evaluated with a real CEL implementation.

An error in a matchCondition rejects the request under failurePolicy Fail (and silently skips the
webhook under Ignore), so every condition must evaluate to a bool for every object shape the API server
can send: no annotations, no ownerReferences, ownerReferences without `controller`, DELETE (object
null). cel-expr-python wraps the reference C++ CEL implementation (the API server uses cel-go; both
implement the same CEL specification, and these expressions use only core macros and functions).
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import pytest

from tests.chart.chart_helpers import render

pytestmark = [pytest.mark.needs_helm, pytest.mark.usefixtures("helm")]

cel = pytest.importorskip("cel_expr_python.cel", reason="cel-expr-python needs Python >= 3.11")


PLATFORMS = ("kserve", "kubeai", "ray", "aibrix", "dynamo", "kaito")


def conditions(kserve: bool) -> dict[str, str]:
    """The conditions with every serving platform on (``kserve``) or off."""
    value = str(kserve).lower()
    docs = render(set_values=tuple(f"webhook.platforms.{name}.enabled={value}" for name in PLATFORMS))
    hooks = [h for d in docs if d["kind"].endswith("WebhookConfiguration") for h in d["webhooks"]]
    first = {c["name"]: c["expression"] for c in hooks[0]["matchConditions"]}
    for hook in hooks[1:]:
        assert {c["name"]: c["expression"] for c in hook["matchConditions"]} == first
    return first


@functools.cache
def compiled(expression: str) -> Any:
    # The variables the API server declares for webhook matchConditions (authorizer is not used here).
    env = cel.NewEnv(variables={"object": cel.Type.DYN, "oldObject": cel.Type.DYN, "request": cel.Type.DYN})
    return env.compile(expression)


def evaluate(expression: str, obj: dict[str, Any] | None, kind: str) -> Any:
    request = {"kind": {"group": "", "version": "v1", "kind": kind}, "operation": "CREATE" if obj else "DELETE"}
    result = compiled(expression).eval(data={"object": obj, "oldObject": None, "request": request})
    assert result.type().name() == "BOOL", f"{expression!r} on {obj!r}: {result.value()!r}"
    return result.value()


def owner(api_version: str, kind: str, controller: bool | None = True) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": "o", "uid": "u"}
    if controller is not None:
        ref["controller"] = controller
    return ref


ANNOTATIONS: list[dict[str, Any] | None] = [
    None,
    {},
    {"kv-planner.io/skip": "true"},
    {"kv-planner.io/skip": "false"},
    {"other": "x"},
]
OWNERS: list[list[dict[str, Any]] | None] = [
    None,
    [],
    [owner("apps/v1", "ReplicaSet")],
    [owner("apps/v1", "ReplicaSet", controller=False)],
    [owner("apps/v1", "ReplicaSet", controller=None)],
    [owner("batch/v1", "CronJob")],
    [owner("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")],
    [owner("serving.kserve.io/v1beta1", "InferenceService")],
    [owner("serving.kserve.io/v1alpha1", "LLMInferenceService")],
    [owner("kubeai.org/v1", "Model")],
    [owner("ray.io/v1", "RayService")],
    [owner("orchestration.aibrix.ai/v1alpha1", "RoleSet")],
    [owner("nvidia.com/v1alpha1", "DynamoComponentDeployment")],
    [owner("kaito.sh/v1beta1", "Workspace")],
    [owner("example.com/v1", "Deployment")],
]


def make(annotations: dict[str, Any] | None, owners: list[dict[str, Any]] | None, deleting: bool) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "vllm", "namespace": "team-a"}
    if annotations is not None:
        metadata["annotations"] = annotations
    if owners is not None:
        metadata["ownerReferences"] = owners
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": {}}


@pytest.mark.parametrize("kserve", [False, True])
def test_conditions_never_error(kserve: bool) -> None:
    exprs = conditions(kserve)
    shapes = [make(a, o, d) for a, o, d in itertools.product(ANNOTATIONS, OWNERS, (False, True))]
    for expression in exprs.values():
        assert evaluate(expression, None, "Deployment") is True  # DELETE: object is null
        for obj, kind in itertools.product(shapes, ("Pod", "ReplicaSet", "Deployment", "StatefulSet")):
            evaluate(expression, obj, kind)


@pytest.mark.parametrize(
    ("name", "annotations", "owners", "deleting", "kserve", "called"),
    [
        ("not-opted-out", {"kv-planner.io/skip": "true"}, None, False, False, False),
        ("not-opted-out", {"kv-planner.io/skip": "false"}, None, False, False, True),
        ("not-opted-out", None, None, False, False, True),
        ("not-managed-by-reviewed-owner", None, [owner("apps/v1", "ReplicaSet")], False, False, False),
        ("not-managed-by-reviewed-owner", None, [owner("apps/v1", "ReplicaSet", False)], False, False, True),
        ("not-managed-by-reviewed-owner", None, [owner("batch/v1", "Job")], False, False, False),
        ("not-managed-by-reviewed-owner", None, [owner("batch/v1", "CronJob")], False, False, True),
        (
            "not-managed-by-reviewed-owner",
            None,
            [owner("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")],
            False,
            False,
            False,
        ),
        # KServe-owned Deployments are reviewed directly unless the InferenceService itself is.
        (
            "not-managed-by-reviewed-owner",
            None,
            [owner("serving.kserve.io/v1beta1", "InferenceService")],
            False,
            False,
            True,
        ),
        (
            "not-managed-by-reviewed-owner",
            None,
            [owner("serving.kserve.io/v1beta1", "InferenceService")],
            False,
            True,
            False,
        ),
        # Objects the serving platforms create were reviewed on their owner while the platform is on.
        *[
            ("not-managed-by-reviewed-owner", None, [owner(api, kind)], False, on, not on)
            for api, kind in (
                ("serving.kserve.io/v1alpha1", "LLMInferenceService"),
                ("kubeai.org/v1", "Model"),
                ("ray.io/v1", "RayCluster"),
                ("ray.io/v1", "RayService"),
                ("orchestration.aibrix.ai/v1alpha1", "RoleSet"),
                ("nvidia.com/v1alpha1", "DynamoComponentDeployment"),
                ("kaito.sh/v1beta1", "Workspace"),
                ("kaito.sh/v1beta1", "InferenceSet"),
            )
            for on in (False, True)
        ],
        # A CRD that happens to be called Deployment is not apps/v1.
        ("not-managed-by-reviewed-owner", None, [owner("example.com/v1", "Deployment")], False, False, True),
        ("not-terminating", None, None, True, False, False),
        ("not-terminating", None, None, False, False, True),
    ],
)
def test_conditions_decide_as_documented(
    name: str,
    annotations: dict[str, Any] | None,
    owners: list[dict[str, Any]] | None,
    deleting: bool,
    kserve: bool,
    called: bool,
) -> None:
    assert evaluate(conditions(kserve)[name], make(annotations, owners, deleting), "Pod") is called
