"""``planner check``: flags, exit codes and JSON as in DESIGN.md, on manifest files and stdin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli import app
from planner.cli._output import console

MANIFESTS = Path(__file__).resolve().parents[1] / "k8s" / "manifests"
RUNNER = CliRunner()
QWEN = "Qwen/Qwen2.5-7B-Instruct"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
ENTRY_KEYS = {
    "kind",
    "namespace",
    "name",
    "template",
    "container",
    "vllm",
    "model",
    "vllm_version",
    "args",
    "effective_args",
    "gpu",
    "decision",
    "codes",
    "messages",
    "findings",
    "patch",
    "kv_cache",  # the planned KV memory and the band of the planner's measured error (issue 12)
}


def _deployment(args: list[str], name: str = "llm", selector: str | None = "NVIDIA-L4") -> str:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "vllm",
                "image": "vllm/vllm-openai:v0.19.0",
                "args": args,
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            }
        ]
    }
    if selector:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": selector}
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {"metadata": {"labels": {"a": "b"}}, "spec": spec},
            },
        }
    )


def _run(*args: str, stdin: str | None = None) -> tuple[int, Any, str]:
    result = RUNNER.invoke(app, ["check", *args], input=stdin)
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError:
        data = None
    return result.exit_code, data, result.stdout + result.stderr


def test_json_contract_and_exit_zero(tmp_path: Path) -> None:
    code, data, _ = _run("-f", str(MANIFESTS / "kustomize-output.yaml"), "--output", "json")
    assert code == 0 and data["errors"] == []
    kinds = [(w["kind"], w["vllm"]) for w in data["workloads"]]
    assert kinds == [
        ("Namespace", False),
        ("ConfigMap", False),
        ("Service", False),
        ("Deployment", True),
        ("HorizontalPodAutoscaler", False),
    ]
    for entry in data["workloads"]:
        assert set(entry) == ENTRY_KEYS
        assert set(entry["gpu"]) == {"name", "label", "count", "group_size", "source"}
    deployment = data["workloads"][3]
    assert deployment["model"] == LLAMA and deployment["vllm_version"] == "0.19.0"
    assert deployment["args"]["max_model_len"] == 16384 and deployment["args"]["max_num_seqs"] == 512
    assert deployment["effective_args"]["max_model_len"] == 16384
    assert deployment["gpu"] == {
        "name": "L4",
        "label": "nvidia-l4",
        "count": 1,
        "group_size": 1,
        "source": "cloud-label",
    }
    assert deployment["decision"] in ("mutate", "warn", "allow")
    band = deployment["kv_cache"]
    assert band["low_bytes"] < band["bytes"] < band["high_bytes"] and band["text"].endswith(
        f"-{(band['bytes'] - band['low_bytes']) / 2**30:.2f}"
    )
    assert data["workloads"][0]["kv_cache"] is None
    assert data["workloads"][0]["decision"] == "skip" and data["workloads"][0]["patch"] == []


def test_enforce_is_the_default_and_exit_one_on_deny(tmp_path: Path) -> None:
    manifest = tmp_path / "deny.yaml"
    manifest.write_text(_deployment([LLAMA, "--max-model-len", "131072"]))
    code, data, _ = _run("-f", str(manifest), "--output", "json")
    assert code == 1
    entry = data["workloads"][0]
    assert entry["decision"] == "deny" and entry["codes"] == ["KVP002"] and entry["patch"] == []
    audit = tmp_path / "audit.yaml"
    audit.write_text("validationAction: Audit\n")
    code, data, _ = _run("-f", str(manifest), "--policy", str(audit), "--output", "json")
    assert code == 0 and data["workloads"][0]["decision"] == "warn"


def test_invalid_yaml_in_one_document_is_reported_for_that_document(tmp_path: Path) -> None:
    stream = (
        _deployment([QWEN], name="first")
        + "---\nkind: Deployment\nmetadata: {name: [broken\n---\n"
        + _deployment([QWEN], name="third")
    )
    code, data, _ = _run("-f", "-", "--output", "json", stdin=stream)
    assert code == 2
    assert [e["document"] for e in data["errors"]] == [1]
    assert "invalid YAML" in data["errors"][0]["message"]
    assert [w["name"] for w in data["workloads"]] == ["first", "third"]


def test_patched_output_prints_every_document(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(_deployment([QWEN]) + "---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    code, _, output = _run("-f", str(manifest), "--output", "patched")
    assert code == 0
    documents = list(yaml.safe_load_all(output))
    assert [d["kind"] for d in documents] == ["Deployment", "Service"]
    args = documents[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:1] == [QWEN] and "--max-model-len" in args
    assert "kv-planner.io/planned-num-gpu-blocks" in documents[0]["spec"]["template"]["metadata"]["annotations"]


def test_nodes_inventory_and_default_gpu(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(_deployment([QWEN, "--max-model-len", "4096"], selector=None))
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {
                        "kind": "Node",
                        "metadata": {"name": n, "labels": {"nvidia.com/gpu.product": p}},
                        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
                    }
                    for n, p in (("big", "NVIDIA-H100-80GB-HBM3"), ("small", "NVIDIA-L40S"))
                ],
            }
        )
    )
    code, data, _ = _run("-f", str(manifest), "--nodes", str(nodes), "--output", "json")
    assert code == 0
    assert data["workloads"][0]["gpu"]["name"] == "L40S" and data["workloads"][0]["gpu"]["source"] == "inventory"
    code, data, _ = _run("-f", str(manifest), "--gpu", "A100-80GB", "--output", "json")
    assert data["workloads"][0]["gpu"]["source"] == "cli" and data["workloads"][0]["gpu"]["name"] == "A100-80GB"


def test_usage_errors_exit_two(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(_deployment([QWEN]))
    code, data, _ = _run("-f", str(manifest), "--gpu", "NotAGpu", "--output", "json")
    assert code == 2 and data["errors"][0]["message"].startswith("Unknown GPU")
    code, _, output = _run("-f", str(tmp_path / "missing.yaml"))
    assert code == 2 and "no such file" in output
    bad_policy = tmp_path / "p.yaml"
    bad_policy.write_text("mutation: sometimes\n")
    code, _, output = _run("-f", str(manifest), "--policy", str(bad_policy))
    assert code == 2 and "mutation" in output
    assert "Traceback" not in output


def test_directory_input_and_table_output() -> None:
    code, _, output = _run("-f", str(MANIFESTS))
    assert code == 0, output
    assert "LeaderWorkerSet/vllm-405b: KVP030 vllm-leader: shell command not changed" in output


def _weights_do_not_fit(tmp_path: Path) -> Path:
    # Llama-3.1-70B on one L4: the fix is a combined change (more GPUs and a shorter context: 60,416 tokens fit
    # at the low end of the band, 54,272 keep the policy's 10% headroom free with one sequence).
    manifest = tmp_path / "big.yaml"
    manifest.write_text(_deployment(["meta-llama/Llama-3.1-70B-Instruct"], name="big"))
    return manifest


def test_json_messages_are_whole_and_carry_a_structured_fix(tmp_path: Path) -> None:
    code, data, _ = _run("-f", str(_weights_do_not_fit(tmp_path)), "--output", "json")
    assert code == 1
    entry = data["workloads"][0]
    (message,) = entry["messages"]
    assert message.endswith("fix: --tensor-parallel-size 8 (8 GPUs) and --max-model-len 54272")
    assert "…" not in message
    (finding,) = entry["findings"]
    assert finding["code"] == "KVP001" and finding["severity"] == "cannot-start"
    assert finding["message"] == message
    assert finding["fix"] == {
        "args": ["--tensor-parallel-size", "8", "--max-model-len", "54272"],
        "text": "--tensor-parallel-size 8 (8 GPUs) and --max-model-len 54272",
    }


def test_table_wraps_messages_instead_of_cutting_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "width", 70)
    code, _, output = _run("-f", str(_weights_do_not_fit(tmp_path)))
    assert code == 1
    assert "…" not in output
    words = " ".join(output.split())
    assert "fix: --tensor-parallel-size 8 (8 GPUs) and --max-model-len 54272" in words
    assert "    fix: --tensor-parallel-size 8 --max-model-len 54272" in output  # the flags, ready to paste


def _lws(args: list[str]) -> str:
    """A two-pod LeaderWorkerSet, 4 x A100-40GB per pod, the engine started by the leader over Ray."""

    def template(name: str, container_args: list[str] | None) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": name,
            "image": "vllm/vllm-openai:v0.10.1.1",
            "resources": {"limits": {"nvidia.com/gpu": 4}},
        }
        if container_args is not None:
            container["args"] = container_args
        return {
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
                "containers": [container],
            }
        }

    return yaml.safe_dump(
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "multi", "namespace": "llm"},
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {
                    "size": 2,
                    "leaderTemplate": template("vllm", ["--model", LLAMA, *args]),
                    "workerTemplate": template("worker", None),
                },
            },
        }
    )


def _band_down(manifest: Path) -> int:
    code, data, output = _run("-f", str(manifest), "--output", "json")
    assert code == 0, output
    (entry,) = [w for w in data["workloads"] if w["container"] == "vllm"]
    kv = entry["kv_cache"]
    return int(kv["bytes"] - kv["low_bytes"])


def test_an_engine_across_the_pods_of_its_group_keeps_the_multi_node_margin(tmp_path: Path) -> None:
    """Cause d: TP 8 over two 4-GPU pods runs its TP group across nodes (no custom all-reduce, NCCL over
    the network); the band keeps the largest miss measured on such startups. TP 4 x PP 2 keeps each TP
    group inside a pod and does not get it (0.10.1.1 inside a node keeps the band of NCCL's channel buffers
    instead, planner/memory/nontorch.py nccl_at_init_bytes: the A100 pods' GPUs are planned with P2P)."""
    from planner.memory.coefficients import DEFAULT_COEFFICIENTS
    from planner.plan.margin import default_margin

    across, inside = tmp_path / "across.yaml", tmp_path / "inside.yaml"
    across.write_text(_lws(["--tensor-parallel-size", "8"]))
    inside.write_text(_lws(["--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"]))
    extra = default_margin().tp_across_nodes_bytes
    assert extra > 0
    assert _band_down(across) >= extra + default_margin().rank_spread_bytes
    assert _band_down(inside) - DEFAULT_COEFFICIENTS.nccl_bytes_p2p_at_init < extra


def test_hf_overrides_are_planned_and_decide_the_exit_code(tmp_path: Path) -> None:
    """`--hf-overrides` is applied as vLLM 0.19 applies it: a raised context that cannot start on an L4 is a
    denial (exit 1; it was "not checked", exit 0), a lowered one is planned and filled within its limit, and
    an override kv-planner cannot apply is a warning, never a denial."""
    raised = tmp_path / "raised.yaml"
    raised.write_text(
        _deployment([QWEN, "--hf-overrides", '{"max_position_embeddings": 131072}', "--max-model-len", "131072"])
    )
    code, data, _ = _run("-f", str(raised), "--output", "json")
    assert code == 1 and data["workloads"][0]["decision"] == "deny"
    assert data["workloads"][0]["codes"] == ["KVP047", "KVP002"]
    lowered = tmp_path / "lowered.yaml"
    lowered.write_text(_deployment([LLAMA, "--hf-overrides.max_position_embeddings", "4096"]))
    code, data, _ = _run("-f", str(lowered), "--output", "json")
    entry = data["workloads"][0]
    assert code == 0 and entry["decision"] == "mutate" and entry["effective_args"]["max_model_len"] == 4096
    note = next(f for f in entry["findings"] if f["code"] == "KVP047")
    assert note["severity"] == "info" and "max_position_embeddings=4096" in note["message"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(_deployment([LLAMA, "--hf-overrides", "[4096]", "--max-model-len", "131072"]))
    code, data, _ = _run("-f", str(bad), "--output", "json")
    assert code == 0 and data["workloads"][0]["decision"] == "warn" and data["workloads"][0]["codes"] == ["KVP047"]
    assert "not an object" in data["workloads"][0]["messages"][0]


def test_huge_integers_and_symlinks_out_of_the_tree(tmp_path: Path) -> None:
    """An integer past Python's 4,300-digit limit is that document's error (exit 2), not a crash (exit 70);
    a directory's symbolic links are not followed (one to a kubeconfig was printed by `-o patched`)."""
    big = tmp_path / "big.yaml"
    big.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: " + "1" * 5000 + "}\n")
    hexed = tmp_path / "hex.yaml"
    hexed.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: 0x" + "f" * 4000 + "}\n")
    for path in (big, hexed):
        result = CliRunner().invoke(app, ["check", "-f", str(path)])
        assert result.exit_code in (0, 2) and "kv-planner bug" not in result.output, result.output
    secret = tmp_path / "outside" / "kubeconfig.yaml"
    secret.parent.mkdir()
    secret.write_text("apiVersion: v1\nkind: Config\nusers: [{name: a, user: {token: SUPER-SECRET}}]\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y}\ndata: {a: b}\n")
    (repo / "zz-values.yaml").symlink_to(secret)
    result = CliRunner().invoke(app, ["check", "-f", str(repo), "-o", "patched"])
    assert result.exit_code == 0 and "SUPER-SECRET" not in result.output, result.output


def test_many_documents_and_aliases_across_documents_are_bounded(tmp_path: Path) -> None:
    """The value bound holds for a whole input, not per document (ten small alias bombs were 13 s of CPU),
    and an input of more documents than any manifest set stops being read (100,000 `{}` held ~1 GB)."""
    from planner.policy.manifests import MAX_DOCUMENTS, read_documents
    from planner.untrusted import MAX_NODES

    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(5)
    )  # 10^6 values once expanded: under the bound alone, past it three times over
    docs = read_documents("---\n".join([bomb] * 3), "bombs.yaml")
    assert any(d.error and f"more than {MAX_NODES:,} values" in d.error for d in docs)
    many = read_documents("---\n{}\n" * (MAX_DOCUMENTS + 50), "many.yaml")
    assert len(many) <= MAX_DOCUMENTS + 1 and many[-1].error and "documents" in many[-1].error
