"""The reviewer's manifests (a model vLLM does not serve was planned, or the server was missed): each is
now read as vLLM reads it, so the 70B model on one A100-80GB is denied (KVP001), as the control is."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from planner.policy.check import check_policy, run_check
from planner.policy.decide import WorkloadEntry
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend

POLICY = check_policy({"modelLookup": {"offline": True, "timeoutSeconds": 1}})
BACKEND = CoreBackend()
BIG = "meta-llama/Llama-3.1-70B-Instruct"
SMALL = "Qwen/Qwen2.5-0.5B-Instruct"
API = "vllm.entrypoints.openai.api_server"


def deployment(container: dict[str, Any], *, volumes: list[Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        "containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": 1}}, **container}],
    }
    if volumes:
        spec["volumes"] = volumes
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llama-70b", "namespace": "inference"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": spec},
        },
    }


def check(*docs: dict[str, Any]) -> WorkloadEntry:
    text = yaml.safe_dump_all(docs)
    found = [e for e in run_check(read_documents(text, "t.yaml"), policy=POLICY, backend=BACKEND).workloads]
    return next(e for e in found if e.kind == "Deployment")


CONFIGMAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "vllm-config", "namespace": "inference"},
    "data": {"config.yaml": f"model: {SMALL}\nserved-model-name: [chat]\n"},
}
OPTIONAL_CONFIGMAP = {**CONFIGMAP, "data": {"config.yaml": f"model: {SMALL}\nhf-token: true\n"}}
MOUNT = {"volumeMounts": [{"name": "cfg", "mountPath": "/etc/vllm"}]}
VOLUMES = [{"name": "cfg", "configMap": {"name": "vllm-config"}}]
IMAGE = "vllm/vllm-openai:v0.19.0"


@pytest.mark.parametrize("configmap", [CONFIGMAP, OPTIONAL_CONFIGMAP], ids=["list", "optional"])
def test_config_words_go_after_the_positional_model(configmap: dict[str, Any]) -> None:
    args = [BIG, "--config", "/etc/vllm/config.yaml", "--max-model-len", "32768"]
    entry = check(configmap, deployment({"image": IMAGE, "args": args, **MOUNT}, volumes=VOLUMES))
    assert entry.model == BIG and entry.decision == "deny" and "KVP001" in entry.codes


def test_first_model_option_is_served() -> None:
    args = ["--model", BIG, "--model", SMALL, "--max-model-len", "32768"]
    entry = check(deployment({"image": IMAGE, "command": ["vllm", "serve"], "args": args}))
    assert entry.model == BIG and entry.decision == "deny" and "KVP001" in entry.codes


@pytest.mark.parametrize("word", ["echo will run", "printf '%s\\n'", ":", "test -n", "grep -c"])
def test_vllm_serve_as_another_commands_argument_is_not_the_server(word: str) -> None:
    script = f"{word} vllm serve {SMALL}\nexec vllm serve {BIG} --max-model-len 32768\n"
    entry = check(deployment({"image": IMAGE, "command": ["sh", "-c"], "args": [script]}))
    assert entry.model == BIG and entry.decision == "deny" and "KVP001" in entry.codes
    assert "KVP039" not in entry.codes


@pytest.mark.parametrize(
    "script",
    [
        f"vllm serve {SMALL} --port 8001 &\nexec vllm serve {BIG} --max-model-len 32768",
        f"vllm serve {SMALL} --port 8001 &\nvllm serve {BIG} --max-model-len 32768\nwait",
        f"exec vllm serve {BIG} --max-model-len 32768\nvllm serve {SMALL}",  # never runs: not counted
    ],
    ids=["exec", "last", "after-exec"],
)
def test_a_script_with_several_servers_checks_the_main_one_and_says_so(script: str) -> None:
    entry = check(deployment({"image": IMAGE, "command": ["sh", "-c"], "args": [script]}))
    assert entry.model == BIG and "KVP001" in entry.codes
    several = "KVP039" in entry.codes
    assert several is (SMALL in script.split("exec", maxsplit=1)[0])
    if several:
        assert any("2 vLLM servers" in m and BIG in m for m in entry.messages)


@pytest.mark.parametrize("options", [["-W", "ignore"], ["-X", "utf8"], ["-Wignore", "-u"], ["-OO", "-B", "-s"]])
def test_python_options_with_arguments_do_not_hide_the_server(options: list[str]) -> None:
    container = {
        "image": "registry.example.com/team/llm-server:1.4",
        "command": ["python3", *options, "-m", API],
        "args": ["--model", BIG, "--max-model-len", "32768"],
    }
    doc = deployment(container)
    doc["spec"]["template"]["metadata"]["annotations"] = {"kv-planner.io/vllm-version": "0.19.0"}
    entry = check(doc)
    assert entry.model == BIG and entry.decision == "deny" and "KVP001" in entry.codes


def test_a_server_inside_if_or_a_loop_is_read_and_branches_are_not_sharing() -> None:
    def in_shell(script: str) -> WorkloadEntry:
        return check(deployment({"image": "vllm/vllm-openai:v0.19.0", "command": ["sh", "-c", script]}))

    big = f"vllm serve {BIG} --max-model-len 32768"
    if_token = in_shell(f'if [ -n "$HF_TOKEN" ]; then huggingface-cli login; fi; {{ {big}; }}')
    assert if_token.decision == "deny" and "KVP001" in if_token.codes  # 70B on one GPU
    assert in_shell(f"while true; do {big}; sleep 5; done").decision == "deny"
    branches = in_shell(f'if [ "$Q" = 1 ]; then\n  {big} --quantization fp8\nelse\n  {big}\nfi')
    (note,) = [m for m in branches.messages if m.startswith("KVP039")]
    assert "one of 2" in note and "share" not in note


@pytest.mark.parametrize("order", [[BIG, SMALL], [SMALL, BIG]], ids=["big-first", "small-first"])
def test_image_args_with_two_models_warn_which_entrypoint_is_assumed(order: list[str]) -> None:
    # vllm/vllm-openai's entrypoint decides: `vllm serve` (0.11.1+) serves the first --model, the api_server
    # module the last. kv-planner plans the first (the release accepts `vllm serve --model`), says so, and
    # neither edits (limits for one model can keep the other from starting) nor denies.
    args = ["--model", order[0], "--model", order[1], "--max-model-len", "32768"]
    entry = check(deployment({"image": IMAGE, "args": args}))
    (note,) = [m for m in entry.messages if m.startswith("KVP052")]
    assert entry.model == order[0] and "`vllm serve`" in note and order[1] in note
    assert entry.decision != "deny" and ("KVP001" in entry.codes) is (order[0] == BIG)  # 70B: warned, not denied
    assert not [op for op in entry.patch if "/containers/" in op["path"]]  # only the plan's annotations
