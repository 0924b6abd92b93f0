"""Least privilege at the Kubernetes API boundary: whose workload a pod is, and where the retuner writes.

The pod's author controls its labels and ownerReferences; the retuner must resolve the owner through the
API (Pod -> ReplicaSet -> Deployment, or Pod -> StatefulSet, UID equal at every link) and write only in
--retune-namespaces. Each attack below made the old code patch a Deployment that was not the pod's.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from admission.observations.model import EngineObservation, Snapshot, TargetObservation
from admission.observations.targets import Target
from admission.retuner import Retuner, RetunerSettings
from admission.retuner.decide import Decision
from admission.retuner.kube import ANNOTATION, KubeWriter, WorkloadRef
from admission.retuner.owners import OwnerResolver, selects
from tests.retuner.fake_kube import FakeCluster, owner_ref


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def resolver(cluster: FakeCluster, *namespaces: str, clock: Clock | None = None) -> OwnerResolver:
    return OwnerResolver(cluster, cluster, namespaces or ("ml",), clock=clock or Clock())


def test_a_deployments_pod_resolves_through_its_replicaset_with_uids() -> None:
    cluster = FakeCluster()
    rs, rs_uid = cluster.deployment("ml", "chat")
    cluster.pod("ml", "chat-5d8f7c9b4-x1", owners=[owner_ref("ReplicaSet", rs, rs_uid)])
    owner = resolver(cluster).resolve("ml", "chat-5d8f7c9b4-x1")
    assert (owner.verdict, owner.kind, owner.name) == ("verified", "Deployment", "chat")
    assert owner.uid == cluster.objects[("Deployment", "ml", "chat")].metadata.uid
    assert [c[1] for c in cluster.calls] == ["Pod", "ReplicaSet", "Deployment"]  # every link fetched


def test_a_statefulsets_pod_resolves_with_its_uid() -> None:
    cluster = FakeCluster()
    uid = cluster.stateful_set("ml", "big")
    cluster.pod("ml", "big-0", owners=[owner_ref("StatefulSet", "big", uid)])
    owner = resolver(cluster).resolve("ml", "big-0")
    assert (owner.verdict, owner.kind, owner.name, owner.uid) == ("verified", "StatefulSet", "big", uid)


def test_a_bare_pod_with_forged_labels_and_owner_reference_does_not_resolve_to_the_victim() -> None:
    cluster = FakeCluster()
    rs, rs_uid = cluster.deployment("ml", "victim")
    # The attacker copies everything visible: the template-hash label, the ReplicaSet's name, a made-up UID.
    cluster.pod(
        "ml",
        "attacker",
        owners=[owner_ref("ReplicaSet", rs, "00000000-0000-0000-0000-000000000000")],
        labels={"pod-template-hash": "5d8f7c9b4", "app": "victim"},
    )
    owner = resolver(cluster).resolve("ml", "attacker")
    assert (owner.verdict, owner.kind, owner.name) == ("mismatch", "Pod", "attacker")
    # An owner reference to a ReplicaSet that does not exist, or to a Deployment directly, fails too.
    cluster.pod("ml", "ghost", owners=[owner_ref("ReplicaSet", "victim-abc", rs_uid)])
    assert resolver(cluster).resolve("ml", "ghost").verdict == "mismatch"
    uid = cluster.objects[("Deployment", "ml", "victim")].metadata.uid
    cluster.pod("ml", "direct", owners=[owner_ref("Deployment", "victim", uid)])
    assert resolver(cluster).resolve("ml", "direct").verdict == "not_owned"


def test_a_pod_the_replicaset_does_not_select_is_not_its_pod() -> None:
    # The right name and the real UID (readable by anyone with `get replicasets`), but labels the
    # ReplicaSet does not select: its controller would release the pod, and so does the retuner.
    cluster = FakeCluster()
    rs, rs_uid = cluster.deployment("ml", "victim")
    cluster.pod("ml", "intruder", owners=[owner_ref("ReplicaSet", rs, rs_uid)], labels={"app": "intruder"})
    owner = resolver(cluster).resolve("ml", "intruder")
    assert (owner.verdict, owner.kind) == ("mismatch", "Pod") and "selector" in owner.detail


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({"matchLabels": {"app": "a"}}, {"app": "a", "x": "y"}, True),
        ({"matchLabels": {"app": "a"}}, {"app": "b"}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]}, {"tier": "gpu"}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, {"tier": "gpu"}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Sometimes"}]}, {"tier": "x"}, False),
        ({}, {"app": "a"}, False),  # an empty selector adopts nothing here
        (None, {"app": "a"}, False),
    ],
)
def test_selector_matching(selector: Any, labels: dict[str, str], expected: bool) -> None:
    assert selects(selector, labels) is expected


@pytest.mark.parametrize(
    "owners",
    [
        None,  # a bare pod
        [owner_ref("ReplicaSet", "x", "u", controller=False)],  # not a controller reference
    ],
)
def test_pods_without_a_controller_are_their_own_workload(owners: Any) -> None:
    cluster = FakeCluster()
    cluster.pod("ml", "lonely", owners=owners, labels={"pod-template-hash": "abc"})
    owner = resolver(cluster).resolve("ml", "lonely")
    assert (owner.verdict, owner.kind, owner.name) == ("not_owned", "Pod", "lonely")


def test_a_replicaset_without_a_deployment_is_not_patched() -> None:
    cluster = FakeCluster()
    rs, rs_uid = cluster.deployment("ml", "chat")
    cluster.objects[("ReplicaSet", "ml", rs)].metadata.owner_references = None
    cluster.pod("ml", "chat-p", owners=[owner_ref("ReplicaSet", rs, rs_uid)])
    assert resolver(cluster).resolve("ml", "chat-p").verdict == "not_owned"


def test_workloads_another_controller_manages_are_not_ours_to_patch() -> None:
    cluster = FakeCluster()
    uid = cluster.stateful_set("ml", "lws")
    cluster.objects[("StatefulSet", "ml", "lws")].metadata.owner_references = [
        client.V1OwnerReference(
            api_version="leaderworkerset.x-k8s.io/v1", kind="LeaderWorkerSet", name="lws", uid="l", controller=True
        )
    ]
    cluster.pod("ml", "lws-0", owners=[owner_ref("StatefulSet", "lws", uid)])
    owner = resolver(cluster).resolve("ml", "lws-0")
    assert (owner.verdict, owner.kind) == ("not_owned", "Pod") and "LeaderWorkerSet" in owner.detail


def test_a_deployment_replaced_under_the_same_name_fails_the_uid_match() -> None:
    cluster = FakeCluster()
    rs, rs_uid = cluster.deployment("ml", "chat")
    cluster.pod("ml", "chat-p", owners=[owner_ref("ReplicaSet", rs, rs_uid)])
    assert resolver(cluster).resolve("ml", "chat-p").verified
    cluster.objects[("Deployment", "ml", "chat")].metadata.uid = "a-new-object"
    owner = resolver(cluster).resolve("ml", "chat-p")
    assert owner.verdict == "mismatch" and "UID" in owner.detail


def test_namespaces_outside_the_list_are_never_read() -> None:
    cluster = FakeCluster()
    rs, rs_uid = cluster.deployment("kube-system", "coredns")
    cluster.pod("kube-system", "coredns-1", owners=[owner_ref("ReplicaSet", rs, rs_uid)])
    owner = resolver(cluster, "ml").resolve("kube-system", "coredns-1")
    assert owner.verdict == "outside" and cluster.calls == []


def test_results_are_cached_and_api_errors_keep_the_last_answer() -> None:
    cluster, clock = FakeCluster(), Clock()
    rs, rs_uid = cluster.deployment("ml", "chat")
    cluster.pod("ml", "chat-p", owners=[owner_ref("ReplicaSet", rs, rs_uid)])
    r = resolver(cluster, clock=clock)
    assert r.resolve("ml", "chat-p").verified
    reads = len(cluster.calls)
    assert r.resolve("ml", "chat-p").verified and len(cluster.calls) == reads  # cached
    clock.now += 301
    cluster.fail_reads = 503
    assert r.resolve("ml", "chat-p").verified  # the API is down: the last answer stands
    fresh = resolver(cluster, clock=clock)
    assert fresh.resolve("ml", "chat-p").verdict == "error"  # nothing known: unresolved, never guessed


# --- the retuner end to end at the boundary -----------------------------------------------------------


def _obs(namespace: str, pod: str, workload: str, preemptions: float) -> TargetObservation:
    """What the exporter saw: the workload name is the discovery's label/ownerRef guess (attacker-controlled)."""
    target = Target(
        url=f"http://{pod}/metrics",
        namespace=namespace,
        pod=pod,
        workload=workload,
        workload_kind="Deployment",
        max_num_seqs=64,
    )
    engine = EngineObservation(
        engine="0",
        kv_cache_usage=0.7,
        num_gpu_blocks=2178,
        block_size=16,
        preemptions_total=preemptions,
        running=64,
        waiting=10,
        prompt_tokens=[(2000.0, 40.0), (float("inf"), 40.0)],
        prompt_tokens_sum=40 * 1024.0,
        generation_tokens=[(2000.0, 40.0), (float("inf"), 40.0)],
        generation_tokens_sum=40 * 1024.0,
    )
    return TargetObservation(target=target, up=True, engines=[engine])


def _apply_retuner(cluster: FakeCluster, *namespaces: str) -> Retuner:
    settings = RetunerSettings(mode="apply", persist=1, min_dwell_s=0, namespaces=namespaces, annotate=True)
    return Retuner(
        settings,
        writer=KubeWriter(cluster, cluster, settings),
        resolver=OwnerResolver(cluster, cluster, settings.namespaces),
    )


def _rounds(retuner: Retuner, observations: list[list[TargetObservation]]) -> None:
    for i, targets in enumerate(observations):
        snapshot = Snapshot(targets=targets)
        retuner.publish(retuner.observe(snapshot, now=60.0 * i, owners=retuner.resolve_owners(snapshot)))


def test_a_bare_pod_cannot_make_the_retuner_patch_another_teams_deployment() -> None:
    cluster = FakeCluster()
    rs, _ = cluster.deployment("ml", "victim")
    # A bare pod claiming the victim's ReplicaSet; discovery's label-based guess says workload "victim".
    cluster.pod("ml", "attacker", owners=[owner_ref("ReplicaSet", rs, "forged")], labels={"pod-template-hash": "x"})
    retuner = _apply_retuner(cluster, "ml")
    _rounds(retuner, [[_obs("ml", "attacker", "victim", 0)], [_obs("ml", "attacker", "victim", 500)]])
    assert cluster.writes == []  # no patch, no annotation, no event anywhere
    # Its preemptions count for itself, not for the victim's recommendation.
    assert ("ml", "victim") not in retuner.decisions and retuner.decisions[("ml", "attacker")].recommended == 32


def test_the_real_owner_is_patched_with_a_uid_precondition() -> None:
    cluster = FakeCluster()
    rs, rs_uid = cluster.deployment("ml", "chat")
    cluster.pod("ml", "chat-a", owners=[owner_ref("ReplicaSet", rs, rs_uid)])
    retuner = _apply_retuner(cluster, "ml")
    _rounds(retuner, [[_obs("ml", "chat-a", "chat", 0)], [_obs("ml", "chat-a", "chat", 500)]])
    [(kind, namespace, name, body)] = cluster.patches
    assert (kind, namespace, name) == ("Deployment", "ml", "chat")
    assert body["metadata"]["uid"] == cluster.objects[("Deployment", "ml", "chat")].metadata.uid
    assert body["metadata"]["annotations"][ANNOTATION] == "32"
    assert {e["involvedObject"]["uid"] for _, e in cluster.events} == {body["metadata"]["uid"]}


def test_a_forged_pod_mixed_into_a_real_workload_is_kept_out_of_it() -> None:
    cluster = FakeCluster()
    rs, rs_uid = cluster.deployment("ml", "chat")
    cluster.pod("ml", "chat-a", owners=[owner_ref("ReplicaSet", rs, rs_uid)])
    cluster.pod("ml", "fake", owners=[owner_ref("ReplicaSet", rs, "forged")])
    retuner = _apply_retuner(cluster, "ml")
    # Only the forged pod preempts: the real workload has no pressure and is not touched.
    _rounds(
        retuner,
        [
            [_obs("ml", "chat-a", "chat", 0), _obs("ml", "fake", "chat", 0)],
            [_obs("ml", "chat-a", "chat", 0), _obs("ml", "fake", "chat", 900)],
        ],
    )
    assert retuner.decisions[("ml", "chat")].action == "hold" and cluster.writes == []


def test_nothing_is_written_outside_the_listed_namespaces() -> None:
    cluster = FakeCluster()
    rs, rs_uid = cluster.deployment("other-team", "chat")
    cluster.pod("other-team", "chat-a", owners=[owner_ref("ReplicaSet", rs, rs_uid)])
    retuner = _apply_retuner(cluster, "ml")
    _rounds(retuner, [[_obs("other-team", "chat-a", "chat", 0)], [_obs("other-team", "chat-a", "chat", 500)]])
    assert retuner.decisions[("other-team", "chat")].recommended == 32  # advice as a metric ...
    assert cluster.calls == []  # ... and not one API call there, read or write


def test_the_writer_refuses_unverified_or_unlisted_refs_itself() -> None:
    cluster = FakeCluster()
    settings = RetunerSettings(mode="apply", namespaces=("ml",))
    writer = KubeWriter(cluster, cluster, settings)
    lower = Decision(action="lower", reason="PreemptionsPersist", current=64, recommended=32, message="m")
    for ref in (
        WorkloadRef(namespace="ml", kind="Deployment", name="chat"),  # not resolved through the API
        WorkloadRef(namespace="kube-system", kind="Deployment", name="coredns", verified=True),
    ):
        assert writer.apply(ref, lower).result == "blocked"
        writer.annotate(ref, 32)
        writer.event(ref, "PreemptionsPersist", "m")
    assert cluster.calls == []


@pytest.mark.parametrize(
    "bad",
    [
        dict(mode="apply"),  # apply with no namespace to write in
        dict(mode="recommend", annotate=True),
        dict(namespaces=("*",)),
        dict(namespaces=("",)),
        dict(namespaces=("Team_A",)),
    ],
)
def test_settings_refuse_writes_without_an_explicit_namespace_list(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RetunerSettings(**bad)


def test_the_exporter_wires_writes_only_with_a_namespace_list() -> None:
    from admission.exporter.server import ExporterConfig, build

    cluster = FakeCluster()
    targets = [Target(url="http://10.0.0.1:8000/metrics", namespace="ml", pod="chat-a")]
    parts = build(
        ExporterConfig(targets=targets, retuner=RetunerSettings(namespaces=("ml",))), core_api=cluster, apps_api=cluster
    )
    assert parts.retuner is not None and parts.retuner.writer is not None and parts.retuner.resolver is not None
    assert parts.retuner.resolver.namespaces == {"ml"}
    quiet = build(ExporterConfig(targets=targets), core_api=cluster, apps_api=cluster)
    assert quiet.retuner is not None and quiet.retuner.writer is None and quiet.retuner.resolver is None


def test_a_rate_limited_rollout_is_applied_once_due_without_an_event_every_round() -> None:
    cluster, clock = FakeCluster(), Clock()
    rs, rs_uid = cluster.deployment("ml", "chat")
    for pod in ("chat-a", "chat-b"):
        cluster.pod("ml", pod, owners=[owner_ref("ReplicaSet", rs, rs_uid)])
    settings = RetunerSettings(
        mode="apply", persist=1, min_dwell_s=0, namespaces=("ml",), apply_min_interval_s=600, events=True
    )
    retuner = Retuner(
        settings,
        writer=KubeWriter(cluster, cluster, settings, clock=clock),
        resolver=OwnerResolver(cluster, cluster, settings.namespaces, clock=clock),
    )

    def round_(pod: str, configured: int, preemptions: float) -> None:
        observation = _obs("ml", pod, "chat", preemptions)
        observation = observation.model_copy(
            update={"target": observation.target.model_copy(update={"max_num_seqs": configured})}
        )
        snapshot = Snapshot(targets=[observation])
        retuner.publish(retuner.observe(snapshot, now=clock.now, owners=retuner.resolve_owners(snapshot)))
        clock.now += 60

    round_("chat-a", 64, 0)
    round_("chat-a", 64, 10)  # lower 64 -> 32: applied
    round_("chat-b", 32, 10)  # the rollout ran; still preempting: lower 32 -> 16, rate-limited
    for _ in range(3):
        round_("chat-b", 32, 20)  # pending, not due: nothing written
    assert [p[3]["spec"]["template"]["spec"]["containers"][0]["args"][-1] for p in cluster.patches] == ["32"]
    reasons = [e["reason"] for _, e in cluster.events]
    assert reasons == ["PreemptionsPersist", "MaxNumSeqsApplied", "PreemptionsPersist", "MaxNumSeqsApplyBlocked"]
    clock.now += 600
    round_("chat-b", 32, 30)  # due: the standing advice is applied, once
    round_("chat-b", 32, 30)
    assert [p[3]["spec"]["template"]["spec"]["containers"][0]["args"][-1] for p in cluster.patches] == ["32", "16"]
    assert [e["reason"] for _, e in cluster.events][4:] == ["MaxNumSeqsApplied"]
