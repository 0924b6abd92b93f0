"""vLLM behind launchers, end to end (planner check): a 70B model on one A100-80GB is denied (KVP001)
whatever launcher chain starts it, an `env -S` string is read like a script (warnings, no edits), and a
launcher form kv-planner does not read is KVP037 for a vLLM image with a GPU, never a guess."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from planner.policy.check import check_policy, run_check
from planner.policy.decide import WorkloadEntry
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend

POLICY = check_policy({"modelLookup": {"offline": True, "timeoutSeconds": 1}, "mutation": "fill"})
BACKEND = CoreBackend()
BIG = "meta-llama/Llama-3.1-70B-Instruct"
SMALL = "Qwen/Qwen2.5-0.5B-Instruct"
API = "vllm.entrypoints.openai.api_server"
IMAGE = "vllm/vllm-openai:v0.19.0"


def check(container: dict[str, Any]) -> WorkloadEntry:
    spec = {
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        "containers": [{"name": "vllm", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": 1}}, **container}],
    }
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": "inference"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": spec},
        },
    }
    (entry,) = run_check(read_documents(yaml.safe_dump(doc), "t.yaml"), policy=POLICY, backend=BACKEND).workloads
    return entry


@pytest.mark.parametrize(
    "command",
    [
        ["uv", "run", "-m", API, "--model", BIG],
        ["uv", "run", "--with", "vllm==0.19.0", "-m", API, "--model", BIG],
        ["uvx", "--from", "vllm==0.19.0", "vllm", "serve", BIG],
        ["uvx", "vllm@0.19.0", "serve", BIG],
        ["tini", "--", "gosu", "vllm", "vllm", "serve", BIG],
        ["dumb-init", "--", "runuser", "-u", "vllm", "--", "vllm", "serve", BIG],
        ["numactl", "--cpunodebind=0", "--membind=0", "taskset", "-c", "0-15", "vllm", "serve", BIG],
        ["micromamba", "run", "-n", "serve", "python3.12", "-u", "-m", "vllm.entrypoints.cli.main", "serve", BIG],
        ["setpriv", "--reuid=1000", "--regid=1000", "--init-groups", "vllm", "serve", BIG],
        ["python3", "-m", "vllm.entrypoints.grpc_server", "--model", BIG],
    ],
)
def test_a_70b_on_one_gpu_behind_a_launcher_is_denied(command: list[str]) -> None:
    entry = check({"command": command})
    assert entry.model == BIG and entry.decision == "deny" and "KVP001" in entry.codes


def test_a_split_string_with_a_variable_in_front_of_argv_words_keeps_them_editable() -> None:
    env = [{"name": "THREADS", "value": "8"}]
    container = {"command": ["env", "-S", "OMP_NUM_THREADS=${THREADS} nice -n 5", "vllm", "serve"], "env": env}
    assert check({**container, "args": [BIG]}).decision == "deny"
    entry = check({**container, "args": [SMALL]})
    assert entry.model == SMALL and entry.decision == "mutate"
    assert next(op["path"] for op in entry.patch if "/containers/" in op["path"]).endswith("/args/-")


def test_a_launcher_argv_is_edited_in_place() -> None:
    entry = check({"command": ["tini", "--", "uv", "run", "-m", API], "args": ["--model", SMALL]})
    assert entry.model == SMALL and entry.decision == "mutate"
    edits = [op for op in entry.patch if "/containers/" in op["path"]]
    assert edits and all(op["path"] == "/spec/template/spec/containers/0/args/-" for op in edits)
    assert [op["value"] for op in edits][:2] == ["--max-model-len", "32768"]


@pytest.mark.parametrize(
    "container",
    [
        {"command": ["env", "-S", f"vllm serve {BIG} --max-model-len 32768"]},
        {"command": ["tini", "--", "env", "-S", "vllm serve ${MODEL}"], "env": [{"name": "MODEL", "value": BIG}]},
        {"command": ["tini", "--", "bash", "-c", f"exec vllm serve {BIG}"]},  # a launcher in front of a shell
        {"command": ["dumb-init", "--", "sh", "-c"], "args": [f"env -S 'vllm serve {BIG}'"]},
    ],
)
def test_a_split_string_or_a_script_behind_a_launcher_is_read(container: dict[str, Any]) -> None:
    entry = check(container)
    assert entry.model == BIG and entry.decision == "deny" and "KVP001" in entry.codes


def test_a_split_string_is_not_edited_but_warned_like_a_script() -> None:
    entry = check({"command": ["env", "-S", f"vllm serve {SMALL}"]})
    assert entry.model == SMALL and not [op for op in entry.patch if "/containers/" in op["path"]]
    assert any(m.startswith("KVP030 vllm: shell command not changed; add --max-model-len") for m in entry.messages)


@pytest.mark.parametrize(
    "command",
    [
        # torchrun starts --nproc-per-node copies, each with its own rank: not one server (not read)
        ["torchrun", "--nproc-per-node", "1", "-m", API, "--model", BIG],
        # the job runs wherever Ray schedules its driver, not in this container
        ["ray", "job", "submit", "--", "vllm", "serve", BIG],
        # a batch job over a file of requests, not a server (its own -i/-o arguments)
        ["vllm", "run-batch", "-i", "in.jsonl", "-o", "out.jsonl", "--model", BIG],
        ["python3", "-m", "vllm.entrypoints.openai.run_batch", "-i", "in.jsonl", "-o", "o.jsonl", "--model", BIG],
        # hatch runs a project script named like the command, through a shell string (not read)
        ["hatch", "run", "vllm", "serve", BIG],
        # forms whose meaning the line does not settle, or options a launcher's table does not list
        ["sudo", "-h", "vllm", "serve", BIG],
        ["tini", "vllm", "serve", BIG, "--max-model-len", "4096"],  # glibc getopt takes --max-model-len
        ["timeout", "--frobnicate", "5", "1h", "vllm", "serve", BIG],
        ["uv", "run", "--unknown-option", "vllm", "serve", BIG],
        ["env", "-S", "vllm serve ${MODEL}"],  # MODEL has no value in the manifest
        ["taskset", "-p", "0xff", "vllm", "serve", BIG],  # -p: a running process's affinity; nothing runs
    ],
)
def test_launcher_forms_not_read_are_kvp037_with_a_gpu(command: list[str]) -> None:
    entry = check({"command": command})
    assert entry.decision == "skip" and entry.codes == ["KVP037"]
