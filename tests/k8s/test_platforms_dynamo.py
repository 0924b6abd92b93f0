"""NVIDIA Dynamo DynamoGraphDeployments: v1beta1 ``spec.components`` (the storage version, native pod
templates) and the ``device`` field of both versions (fixtures: tests/k8s/platforms/dynamo.yaml, each
document's source in its header).

Before these readers a v1beta1 graph was "no vLLM container" (KVP060, silently allowed), and a v1alpha1
worker asking for a HAMi slice through ``device`` was planned on a whole card.
"""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest

from planner.policy.check import check_policy, run_check
from planner.policy.decide import WorkloadEntry
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend
from tests.k8s.test_platforms import _document, entry, report

POLICY = check_policy({"modelLookup": {"offline": True, "timeoutSeconds": 1}})
BACKEND = CoreBackend()
FILE = "dynamo.yaml"


def _check(text: str) -> list[WorkloadEntry]:
    return run_check(read_documents(text, "inline"), policy=POLICY, backend=BACKEND).workloads


def test_v1beta1_components_are_read() -> None:
    worker = entry(FILE, "DynamoGraphDeployment/vllm-v1beta1", "VllmDecodeWorker")
    # spec.env is prepended to every component's environment: $(MODEL_ID) is Qwen/Qwen3-0.6B.
    assert (worker.container, worker.model, worker.vllm_version) == ("main", "Qwen/Qwen3-0.6B", None)
    assert (worker.gpu.name, worker.gpu.count, worker.gpu.source) == ("L4", 1, "node-selector")
    assert worker.decision == "mutate"
    # The frontend's `main` has no command: the operator runs dynamo.frontend there, not the image's vLLM.
    templates = [e.template for e in report(FILE).workloads if e.name == "vllm-v1beta1"]
    assert templates == ["VllmDecodeWorker", "prefill"]


def test_v1beta1_multinode_spreads_tensor_parallelism_over_the_group() -> None:
    prefill = entry(FILE, "DynamoGraphDeployment/vllm-v1beta1", "prefill")
    assert prefill.args["tensor_parallel_size"] == 2
    assert (prefill.gpu.count, prefill.gpu.group_size) == (1, 2)
    assert "KVP003" not in prefill.codes and prefill.decision != "deny"


def test_v1beta1_patch_goes_to_the_workers_own_args() -> None:
    worker = entry(FILE, "DynamoGraphDeployment/vllm-v1beta1", "VllmDecodeWorker")
    args = [op for op in worker.patch if op["path"].endswith("/args/-")]
    assert {op["path"] for op in args} == {"/spec/components/1/podTemplate/spec/containers/0/args/-"}
    assert [op["value"] for op in args] == ["--max-model-len", str(worker.effective_args["max_model_len"])]
    patched = jsonpatch.apply_patch(_document(FILE, "DynamoGraphDeployment/vllm-v1beta1"), worker.patch)
    # podTemplate is a core/v1 PodTemplateSpec: the patched pod validates with Kubernetes' own schema.
    template = patched["spec"]["components"][1]["podTemplate"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", **template.get("metadata", {})}}
    pod["spec"] = template["spec"]
    kubernetes_validate.validate(pod, kubernetes_validate.utils.latest_version(), strict=True)
    # Dynamo's own flag stays where it was; a second review changes nothing more.
    again = _check(json.dumps(patched))
    assert [e.patch for e in again if e.template == "VllmDecodeWorker"] == [[]]


def test_v1beta1_engine_container_beside_a_sidecar_is_read_as_written() -> None:
    engine = entry(FILE, "DynamoGraphDeployment/vllm-v1beta1-openengine", "OpenEngineWorker")
    assert (engine.container, engine.model, engine.gpu.name) == ("engine", "Qwen/Qwen3-0.6B", "L4")
    assert {op["path"] for op in engine.patch if op["path"].endswith("/args/-")} == {
        "/spec/components/0/podTemplate/spec/containers/1/args/-"
    }


@pytest.mark.parametrize(
    ("workload", "container"),
    [("vllm-v1beta1-hami", "main"), ("vllm-v1alpha1-hami", "VllmDecodeWorker")],
)
def test_device_field_plans_the_hami_slice(workload: str, container: str) -> None:
    """``device.resources`` (nvidia.com/gpumem 3000 MiB) and ``device.nodeSelector`` (L4) reach the pod:
    15 GB of weights cannot load in a 3000 MiB slice."""
    found = entry(FILE, f"DynamoGraphDeployment/{workload}", "VllmDecodeWorker")
    assert found.container == container
    assert (found.gpu.name, found.gpu.count, found.gpu.source) == ("L4", 1, "node-selector")
    assert {"KVP013", "KVP006"} <= set(found.codes) and found.decision == "deny"


def test_device_resources_win_over_the_services_own() -> None:
    """For overlapping keys ``device.resources`` is authoritative (the operator merges it last)."""
    found = _check(
        """
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata: {name: d, annotations: {kv-planner.io/gpu: H100-80GB}}
spec:
  services:
    W:
      resources: {limits: {gpu: "1"}}
      device: {resources: {nvidia.com/gpu: "2"}}
      extraPodSpec:
        mainContainer:
          command: [python3, -m, dynamo.vllm]
          args: [--model, Qwen/Qwen3-0.6B, --tensor-parallel-size, "2"]
"""
    )
    assert [(e.gpu.count, "KVP003" in e.codes) for e in found] == [(2, False)]


def _graph(components: list[dict[str, Any]]) -> str:
    return json.dumps(
        {
            "apiVersion": "nvidia.com/v1beta1",
            "kind": "DynamoGraphDeployment",
            "metadata": {"name": "g", "annotations": {"kv-planner.io/gpu": "L4"}},
            "spec": {"components": components},
        }
    )


def _component(name: str, command: list[str], args: list[str] | str) -> dict[str, Any]:
    container = {"name": "main", "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1", "command": command}
    container["args"] = args
    container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {"name": name, "type": "worker", "podTemplate": {"spec": {"containers": [container]}}}


def test_v1beta1_70b_on_one_l4_is_denied() -> None:
    found = _check(
        _graph([_component("w", ["python3", "-m", "dynamo.vllm"], ["--model", "meta-llama/Llama-3.1-70B-Instruct"])])
    )
    assert [(e.template, e.decision, "KVP001" in e.codes) for e in found] == [("w", "deny", True)]


def test_engine_config_json_is_read_as_vllm_reads_its_config_file() -> None:
    """``dynamo.vllm --engine-config-json FILE`` (ai-dynamo/dynamo components/src/dynamo/vllm/args.py): the file's
    engine arguments are vLLM's starting namespace. Before, the flag was set aside as Dynamo's own and the worker
    planned without them (7B on an L4 at its defaults: fits); now the file is read from a ConfigMap of the input
    (here utilization 0.5 leaves less than the weights: KVP001), and without it nothing is checked (KVP031)."""
    component = _component(
        "w",
        ["python3", "-m", "dynamo.vllm"],
        ["--model", "Qwen/Qwen2.5-7B-Instruct", "--engine-config-json", "/cfg/e.json"],
    )
    pod = component["podTemplate"]["spec"]
    pod["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": "/cfg"}]
    pod["volumes"] = [{"name": "cfg", "configMap": {"name": "engine"}}]
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "engine"},
        "data": {"e.json": json.dumps({"gpu_memory_utilization": 0.5, "max_model_len": 8192})},
    }
    found = [e for e in _check(json.dumps(configmap) + "\n---\n" + _graph([component])) if e.vllm]
    assert [(e.args["gpu_memory_utilization"], e.decision, "KVP001" in e.codes) for e in found] == [(0.5, "deny", True)]
    (alone,) = [e for e in _check(_graph([component])) if e.vllm]
    assert alone.codes == ["KVP031"] and alone.decision == "warn", alone.messages


def test_v1beta1_shell_string_worker_is_warned_not_edited() -> None:
    script = "python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B 2>&1 | tee /tmp/vllm.log"
    found = _check(_graph([_component("w", ["/bin/sh", "-c"], [script])]))
    assert len(found) == 1 and found[0].model == "Qwen/Qwen3-0.6B"
    assert "KVP034" in found[0].codes
    assert not [op for op in found[0].patch if "kv-planner.io" not in json.dumps(op)]


def test_v1beta1_other_engine_is_named() -> None:
    found = _check(_graph([_component("w", ["python3", "-m", "dynamo.sglang"], ["--model-path", "Qwen/Qwen3-0.6B"])]))
    assert [e.codes for e in found] == [["KVP066"]]


def test_v1beta1_components_are_read_up_to_a_bound() -> None:
    """An untrusted list: at most MAX_COMPONENTS components are planned, and the rest are named."""
    from planner.k8s.platforms.dynamo import MAX_COMPONENTS

    component = _component("w", ["python3", "-m", "dynamo.vllm"], ["--model", "Qwen/Qwen3-0.6B"])
    found = _check(_graph([dict(component, name=f"w{i}") for i in range(MAX_COMPONENTS + 3)]))
    planned = [e for e in found if e.vllm]
    assert len(planned) == MAX_COMPONENTS
    assert any("KVP063" in e.codes and "only the first" in " ".join(e.messages) for e in found)


def test_device_on_an_intel_gpu_is_named_not_planned() -> None:
    """``device`` is also how Dynamo asks for AMD and Intel devices (ai-dynamo/dynamo#10716): an Intel
    GPU worker is KVP064, not a plan on the policy's default NVIDIA GPU."""
    component = _component("w", ["python3", "-m", "dynamo.vllm"], ["--model", "Qwen/Qwen3-0.6B"])
    component["podTemplate"]["spec"]["containers"][0].pop("resources")
    component["device"] = {"resources": {"gpu.intel.com/xe": "1"}}
    found = _check(_graph([component]))
    assert [(e.decision, e.codes) for e in found] == [("skip", ["KVP064"])]


@pytest.mark.parametrize("cli", [[], ["--enable-chunked-prefill"]], ids=["file", "cli-wins"])
def test_engine_config_json_false_is_dest_false(cli: list[str]) -> None:
    """Dynamo makes the file's object the argparse Namespace vLLM's parser starts from
    (``_load_engine_config_json``: ``argparse.Namespace(**values)``), so ``"enable_chunked_prefill": false`` is
    dest = False in every release, and a flag on the command line still wins. Before, the file was read as vLLM's
    ``--config``, whose words drop a ``false`` before 0.33: chunked prefill planned on for 0.20.2."""
    component = _component(
        "w",
        ["python3", "-m", "dynamo.vllm"],
        ["--model", "Qwen/Qwen2.5-7B-Instruct", "--engine-config-json", "/cfg/e.json", *cli],
    )
    pod = component["podTemplate"]["spec"]
    pod["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": "/cfg"}]
    pod["volumes"] = [{"name": "cfg", "configMap": {"name": "engine"}}]
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "engine"},
        "data": {"e.json": json.dumps({"max_model_len": 16384, "enable_chunked_prefill": False})},
    }
    graph = json.loads(_graph([component]))
    graph["metadata"]["annotations"]["kv-planner.io/vllm-version"] = "0.20.2"
    (found,) = [e for e in _check(json.dumps(configmap) + "\n---\n" + json.dumps(graph)) if e.vllm]
    assert "KVP043" not in found.codes and found.args["max_model_len"] == 16384, found.messages
    expected = 16384 if not cli else 2048
    assert found.effective_args["max_num_batched_tokens"] == expected, found.messages


def test_engine_config_json_unknown_key_is_refused() -> None:
    """Dynamo refuses keys that are not vLLM dests ("Unknown vLLM engine argument(s) in --engine-config-json")."""
    component = _component(
        "w",
        ["python3", "-m", "dynamo.vllm"],
        ["--model", "Qwen/Qwen2.5-7B-Instruct", "--engine-config-json", "/c/e.json"],
    )
    pod = component["podTemplate"]["spec"]
    pod["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": "/c"}]
    pod["volumes"] = [{"name": "cfg", "configMap": {"name": "engine"}}]
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "engine"},
        "data": {"e.json": '{"max-model-len": 8192}'},
    }
    (found,) = [e for e in _check(json.dumps(configmap) + "\n---\n" + _graph([component])) if e.vllm]
    assert "KVP043" in found.codes and "max-model-len" in " ".join(found.messages), found.messages
