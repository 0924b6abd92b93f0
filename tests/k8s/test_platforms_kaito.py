"""KAITO Workspaces and InferenceSets (fixtures: tests/k8s/platforms/kaito.yaml, sources in its header).

A Workspace keeps ``resource`` and ``inference`` at the top level (no ``spec``): before this reader
every KAITO resource was "no vLLM container" (KVP060) and allowed silently. A template is planned like
the StatefulSet KAITO makes of it; a preset, whose command line KAITO builds itself, is named (KVP063).
"""

from __future__ import annotations

import json

import jsonpatch
import kubernetes_validate

from planner.policy.check import check_policy, run_check
from planner.policy.manifests import Document, read_documents
from planner.policy.planning import CoreBackend
from tests.k8s.test_platforms import FIXTURES, _document, entry, report
from tests.k8s.test_platforms_odd_shapes import ODD, _paths, _replaced

POLICY = check_policy({"modelLookup": {"offline": True, "timeoutSeconds": 1}})
BACKEND = CoreBackend()
FILE = "kaito.yaml"


def test_workspace_template_is_planned_on_its_instance_type() -> None:
    found = entry(FILE, "Workspace/workspace-custom-vllm", "inference")
    assert (found.container, found.model, found.vllm_version) == (
        "custom-llm-container",
        "Qwen/Qwen2.5-7B-Instruct",
        "0.10.1",
    )
    assert (found.gpu.name, found.gpu.count, found.gpu.source) == ("A100-80GB", 1, "instance-type")
    assert found.decision == "mutate"
    args = [op for op in found.patch if op["path"].startswith("/inference/template/spec/containers/0/args")]
    assert args and all(op["op"] == "add" and op["path"].endswith("/args/-") for op in args)
    patched = jsonpatch.apply_patch(_document(FILE, "Workspace/workspace-custom-vllm"), found.patch)
    # inference.template is schemaless in KAITO's CRD: the patched template is checked as a core/v1 Pod.
    template = patched["inference"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", **template.get("metadata", {})}}
    pod["spec"] = template["spec"]
    kubernetes_validate.validate(pod, kubernetes_validate.utils.latest_version(), strict=True)
    again = run_check(read_documents(json.dumps(patched), "patched"), policy=POLICY, backend=BACKEND)
    assert [e.patch for e in again.workloads] == [[]]


def test_workspace_label_selector_names_the_gpu() -> None:
    """BYO nodes: KAITO replaces the pod's affinity with the labelSelector's matchLabels."""
    found = entry(FILE, "Workspace/workspace-70b-one-l4", "inference")
    assert (found.gpu.name, found.gpu.source) == ("L4", "node-affinity")
    assert found.decision == "deny" and "KVP001" in found.codes


def test_inference_set_template_is_planned() -> None:
    found = entry(FILE, "InferenceSet/custom-vllm-set", "inference")
    assert (found.model, found.gpu.name) == ("Qwen/Qwen2.5-7B-Instruct", "A100-80GB")
    assert {op["path"] for op in found.patch if op["path"].endswith("/args")} == {
        "/spec/template/inference/template/spec/containers/0/args"
    }


def test_presets_are_named_not_skipped_silently() -> None:
    for workload, preset in (
        ("Workspace/workspace-llama-3-1-8b-instruct", "llama-3.1-8b-instruct"),
        ("InferenceSet/phi-4-mini", "phi-4-mini-instruct"),
    ):
        found = entry(FILE, workload)
        assert (found.decision, found.codes) == ("skip", ["KVP063"])
        assert preset in found.messages[0] and "preset" in found.messages[0]


def test_tuning_workspace_is_not_a_server() -> None:
    text = """
apiVersion: kaito.sh/v1beta1
kind: Workspace
metadata: {name: tune}
resource: {instanceType: Standard_NC24ads_A100_v4}
tuning:
  preset: {name: phi-3-mini-128k-instruct}
  method: qlora
  input: {urls: ["https://example.com/data.parquet"]}
  output: {image: example.azurecr.io/adapter:0.0.1, imagePushSecret: push}
"""
    found = run_check(read_documents(text, "inline"), policy=POLICY, backend=BACKEND).workloads
    assert [(e.decision, e.codes) for e in found] == [("skip", ["KVP060"])]


def test_other_top_level_custom_resources_mentioning_vllm_are_named() -> None:
    """A kind that keeps its fields at the top level (as KAITO does) and mentions vLLM is KVP063."""
    text = """
apiVersion: example.com/v1
kind: Server
metadata: {name: s}
runtime: {engine: vllm, model: Qwen/Qwen3-0.6B}
"""
    found = run_check(read_documents(text, "inline"), policy=POLICY, backend=BACKEND).workloads
    assert [(e.decision, e.codes) for e in found] == [("skip", ["KVP063"])]


def test_odd_shapes_at_the_top_level_never_crash() -> None:
    """tests/k8s/test_platforms_odd_shapes.py replaces subtrees under spec/metadata; a Workspace's own
    fields are at the top level."""
    documents = read_documents((FIXTURES / FILE).read_text(), FILE)
    variants = 0
    for document in documents:
        paths = [p for p in _paths(document.content) if p[0] in ("inference", "resource", "tuning")]
        for index, path in enumerate(paths):
            odd = Document(
                index=0, source=FILE, line=1, content=_replaced(document.content, path, ODD[index % len(ODD)])
            )
            for found in run_check([odd], policy=POLICY, backend=BACKEND).workloads:
                assert "KVP049" not in found.codes, (path, found.messages)
            variants += 1
    assert variants > 10
    assert report(FILE).workloads
