"""The `planner` command as users call it: contracts of DESIGN.md, exit codes, messages, no tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy
import pytest
import safetensors.numpy as safetensors_numpy
import yaml
from typer.testing import CliRunner

from planner.calibration.dataset import dataset_files, dataset_records
from planner.cli import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def test_recommend_without_model_lists_catalog_models_offline() -> None:
    code, out, _ = run("recommend", "--gpu", "A100-80GB", "--output", "json")
    assert code == 0
    data = json.loads(out)
    assert data["gpu"]["name"] == "A100-80GB" and data["gpu"]["memory_bytes"] > 0
    assert len(data["models"]) >= 50
    row = next(m for m in data["models"] if m["id"] == "meta-llama/Llama-3.1-8B-Instruct")
    assert set(row) >= {
        "id",
        "fits",
        "max_model_len",
        "max_concurrency_4096",
        "max_concurrency_32768",
        "max_concurrency_max",
    }
    assert row["fits"] and row["max_concurrency_4096"] > row["max_concurrency_32768"] > 0


def test_recommend_json_contract() -> None:
    code, out, _ = run(
        "recommend",
        "--gpu",
        "H100-80GB",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--max-model-len",
        "32K",
        "--vllm-version",
        "0.19.0",
        "--output",
        "json",
    )
    assert code == 0
    plan = json.loads(out)
    assert set(plan) >= {
        "model",
        "gpu",
        "vllm_version",
        "memory",
        "kv_cache",
        "fits",
        "recommendation",
        "alternatives",
        "warnings",
    }
    assert set(plan["memory"]) >= {
        "total_bytes",
        "budget_bytes",
        "weights_bytes",
        "weights_estimated",
        "activation_peak_bytes",
        "non_torch_bytes",
        "cuda_graph_bytes",
        "kv_cache_bytes",
    }
    assert set(plan["kv_cache"]) >= {
        "bytes_per_token",
        "state_bytes_per_sequence",
        "block_size",
        "bytes_per_block",
        "num_gpu_blocks",
        "tokens",
        "max_concurrency",
        "max_model_len",
    }
    assert plan["kv_cache"]["bytes_per_token"] == 131072
    assert plan["kv_cache"]["max_model_len"] == 32768
    assert plan["vllm_version"] == "0.19.0" and plan["fits"] is True
    rec = plan["recommendation"]
    assert rec["vllm_args"][:2] == ["--max-model-len", "32768"]
    assert rec["max_num_seqs"] >= 1 and rec["gpu_memory_utilization"] == 0.9


def test_recommend_args_and_yaml_outputs() -> None:
    code, out, _ = run(
        "recommend", "--gpu", "L4", "--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8k", "--output", "args"
    )
    assert code == 0 and out.startswith("--max-model-len 8000 --max-num-seqs ")
    code, out, _ = run("recommend", "--gpu", "L4", "--model", "Qwen/Qwen2.5-7B-Instruct", "--output", "yaml")
    assert code == 0 and yaml.safe_load(out)["gpu"]["name"] == "L4"


def test_plan_that_does_not_fit_exits_1_and_says_what_would() -> None:
    code, out, _ = run(
        "recommend",
        "--gpu",
        "H100-80GB",
        "--model",
        "meta-llama/Llama-3.1-70B-Instruct",
        "-tp",
        "2",
        "--output",
        "json",
    )
    assert code == 1
    plan = json.loads(out)
    assert not plan["fits"] and "estimated maximum model length" in plan["fit_error"]
    changes = " | ".join(a["change"] for a in plan["alternatives"])
    assert "shorter context" in changes and "fp8 KV cache" in changes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "A100-80G"], "Did you mean 'A100-80GB'"),
        (["--gpu", "A100-80GB", "--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "32.5K"], "Decimals"),
        (["--gpu", "A100-80GB", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu-memory-utilization", "1.5"], "(0, 1]"),
        (
            ["--gpu", "A100-80GB", "--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "65536"],
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
        ),
        (
            ["--gpu", "A100-80GB", "--model", "Qwen/Qwen2.5-7B-Instruct", "-tp", "3"],
            "must be divisible by tensor parallel size (3)",
        ),
        (["--gpu", "A100-80GB", "--model", "Qwen/Qwen2.5-7B-Instruct", "--kv-cache-dtype", "fp4"], "invalid choice"),
        (["--gpu", "A100-80GB", "--model", "Qwen/Qwen2.5-7B-Instruct", "--vllm-version", "latest"], "X.Y.Z"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args: list[str], message: str) -> None:
    code, _out, err = run("recommend", *args)
    assert code == 2
    assert message in err


def test_estimate_from_a_catalog_model() -> None:
    code, out, _ = run(
        "estimate", "--model", "Qwen/Qwen2.5-7B-Instruct", "--tokens", "1024,8192,32768", "--output", "json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["bytes_per_token"] == 57344 and data["total_bytes"] == 2296 << 20


def test_gpus_json_contract() -> None:
    code, out, _ = run("gpus", "--output", "json")
    assert code == 0
    gpus = json.loads(out)
    a100 = next(g for g in gpus if g["name"] == "A100-80GB")
    assert {"name", "aliases", "memory_bytes", "bandwidth_bytes_per_s"} <= set(a100)
    assert round(a100["memory_bytes"] / 2**30, 2) == 79.15


def test_validate_reports_per_record_and_summary(calibration_file: Path, tmp_path: Path) -> None:
    lines = [*calibration_file.read_text().splitlines()[:3], "{not json", '{"id": "x"}']
    data_file = tmp_path / "records.jsonl"
    data_file.write_text("\n".join(lines) + "\n")
    code, out, err = run("validate", str(data_file), "--output", "json")
    assert code == 0
    report = json.loads(out)
    assert len(report["records"]) == 5  # one result per input line
    assert [r["supported"] for r in report["records"][3:]] == [False, False]
    first = report["records"][0]
    assert set(first) >= {"id", "supported", "reason", "layout", "budget", "full"}
    assert set(report["summary"]) >= {"records", "supported", "layout_exact", "layout_scored", "budget", "full"}
    flat = " ".join(err.split())  # rich wraps stderr at 80 columns, wherever the temporary path ends
    assert "line 4: not JSON" in flat and "line 5" in flat
    assert report["records"][3]["id"] == "line 4"


def test_validate_without_a_file_checks_the_shipped_data() -> None:
    code, out, err = run("validate", "--output", "json")
    assert code == 0, err
    summary = json.loads(out)["summary"]
    assert summary["records"] == len(dataset_records()) and summary["supported"] == summary["records"]
    assert summary["full"]["abs_median"] <= 0.01


def test_validate_reads_the_shipped_schema_too(tmp_path: Path) -> None:
    shipped = dataset_files()[0].read_text().splitlines()[:2]
    data_file = tmp_path / "ours.jsonl"
    data_file.write_text("\n".join(shipped) + "\n")
    code, out, err = run("validate", str(data_file), "--output", "json")
    assert code == 0, err
    assert [r["supported"] for r in json.loads(out)["records"]] == [True, True]


def test_validate_unreadable_file_exits_2(tmp_path: Path) -> None:
    code, _, err = run("validate", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "cannot read" in err


def test_calibrate_writes_corrections_that_recommend_applies(calibration_file: Path, tmp_path: Path) -> None:
    record = json.loads(calibration_file.read_text().splitlines()[1])  # gemma-2-9b-it on H100, 0.19.0
    log = tmp_path / "startup.log"
    log.write_text(record["log_excerpt"] + "\n")
    corrections = tmp_path / "corrections.yaml"
    code, out, err = run("calibrate", str(log), "--gpu", "H100-80GB", "--write", str(corrections), "-o", "json")
    assert code == 2 and "no vLLM version line" in err  # never a guess at the newest release
    code, out, err = run(
        "calibrate",
        str(log),
        "--gpu",
        "H100-80GB",
        "--vllm-version",
        "0.19.0",
        "--write",
        str(corrections),
        "-o",
        "json",
    )
    assert code == 0, err
    written = yaml.safe_load(corrections.read_text())
    entry = written["entries"][0]
    assert entry["model"] == "google/gemma-2-9b-it" and entry["measured"]["weights_bytes"] > 0
    code, out, _ = run(
        "recommend",
        "--gpu",
        "H100-80GB",
        "--model",
        "google/gemma-2-9b-it",
        "--vllm-version",
        "0.19.0",
        "--gpu-memory-utilization",
        "0.95",
        "--max-model-len",
        "8192",
        "--calibration",
        str(corrections),
        "--output",
        "json",
    )
    assert code == 0
    plan = json.loads(out)
    assert any(w.startswith("KVP108") for w in plan["warnings"])
    logged_kv = record["kv_cache_memory_gib"]
    assert abs(plan["memory"]["kv_cache_bytes"] / 2**30 - logged_kv) < 0.02


def test_calibrate_version_from_the_log_must_agree_with_the_flag(tmp_path: Path) -> None:
    log = tmp_path / "startup.log"
    log.write_text(
        "INFO 04-22 00:40:01 [api_server.py:1] vLLM API server version 0.19.0\n"
        "INFO 04-22 00:47:07 [gpu_model_runner.py:1] Model loading took 14.99 GiB memory and 5.1 seconds\n"
        "INFO 04-22 00:47:07 [gpu_worker.py:436] Available KV cache memory: 58.12 GiB\n"
        "non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct'}\n"
    )
    code, out, err = run("calibrate", str(log), "--gpu", "H100-80GB", "--vllm-version", "0.17.1", "-o", "json")
    assert code == 2 and "says vLLM 0.19.0" in err
    code, out, err = run("calibrate", str(log), "--gpu", "H100-80GB", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["logs"][0]["entry"]["vllm_version"] == "0.19.0"


def test_calibrate_rejects_a_file_that_is_not_a_vllm_log(tmp_path: Path) -> None:
    log = tmp_path / "notes.txt"
    log.write_text("hello\n")
    code, _, err = run("calibrate", str(log), "--gpu", "H100-80GB")
    assert code == 2 and "no vLLM memory lines" in err


def test_local_checkpoint_directory_gives_exact_weight_bytes(tmp_path: Path) -> None:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 256,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    tensors = {
        "model.embed_tokens.weight": numpy.zeros((256, 64), dtype=numpy.float16),
        "lm_head.weight": numpy.zeros((256, 64), dtype=numpy.float16),
    }
    for layer in range(2):
        tensors[f"model.layers.{layer}.mlp.down_proj.weight"] = numpy.zeros((64, 128), dtype=numpy.float16)
    safetensors_numpy.save_file(tensors, str(tmp_path / "model.safetensors"))
    expected = sum(t.nbytes for t in tensors.values())
    code, out, _ = run("recommend", "--gpu", "L4", "--model", str(tmp_path), "--output", "json")
    assert code == 0
    plan = json.loads(out)
    assert plan["model"]["checkpoint_bytes"] == expected
    assert plan["memory"]["weights_estimated"] is False


def test_recommend_with_a_workload_sizes_max_num_seqs_between_worst_case_and_average() -> None:
    workload = (
        '{"prompt_tokens": {"p50": 800, "p90": 3000, "p99": 12000}, '
        '"output_tokens": {"p50": 200, "p90": 800, "p99": 2000}}'
    )
    code, out, _ = run(
        "recommend",
        "--gpu",
        "H100-80GB",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--workload",
        workload,
        "--output",
        "json",
    )
    assert code == 0
    rec = json.loads(out)["recommendation"]
    assert rec["basis"] == "workload"
    assert any(note.startswith("worst case") for note in rec["notes"])
    code, out, _ = run(
        "recommend", "--gpu", "H100-80GB", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--output", "json"
    )
    worst = json.loads(out)["recommendation"]["max_num_seqs"]
    assert worst < rec["max_num_seqs"] <= 1024


def test_recommend_with_a_broken_workload_exits_2() -> None:
    code, _, err = run(
        "recommend",
        "--gpu",
        "H100-80GB",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--workload",
        '{"prompt_tokens": {"p50": -3}}',
    )
    assert code == 2 and "workload" in err.lower()


def test_recommend_emits_autoscaler_thresholds_from_the_workload() -> None:
    workload = '{"prompt_tokens": {"p50": 800, "p99": 12000}, "output_tokens": {"p50": 200, "p99": 2000}}'
    code, out, _ = run(
        "recommend",
        "--gpu",
        "H100-80GB",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--workload",
        workload,
        "--emit",
        "keda,hpa",
        "--emit-namespace",
        "llm",
    )
    assert code == 0
    documents = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in documents] == ["ScaledObject", "HorizontalPodAutoscaler"]
    code, _, err = run(
        "recommend", "--gpu", "H100-80GB", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--emit", "keda"
    )
    assert code == 2 and "--emit needs --workload" in err


def test_recommend_json_keeps_warning_strings_and_adds_typed_findings() -> None:
    # --max-model-len auto on a context that does not fit: KVP106 with the length vLLM will pick as its fix.
    code, out, _ = run(
        "recommend",
        "--gpu",
        "L4",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--max-model-len",
        "auto",
        "-o",
        "json",
    )
    assert code == 0
    plan = json.loads(out)
    assert plan["warnings"] == [f["message"] for f in plan["findings"]]  # DESIGN: "warnings": [str, ...]
    (auto,) = [f for f in plan["findings"] if f["code"] == "KVP106"]
    fitted = str(plan["kv_cache"]["max_model_len"])
    assert auto["severity"] == "info" and auto["fix"]["args"] == ["--max-model-len", fitted]
    assert auto["message"].startswith("KVP106 --max-model-len auto: vLLM will reduce the context from 131072 to ")


def test_validate_names_why_a_model_could_not_be_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    record = dataset_records()[0].model_copy(update={"model": "nobody/never-published-7b", "id": "x1"})
    data_file = tmp_path / "one.jsonl"
    data_file.write_text(record.model_dump_json() + "\n")
    code, out, err = run("validate", str(data_file), "--output", "json")
    assert code == 0, err
    reason = json.loads(out)["records"][0]["reason"]
    assert "offline" in reason and "nobody/never-published-7b" in reason


def test_estimate_counts_what_hybrid_layers_keep() -> None:
    """gemma-3-27b: 10 full layers keep every token, 52 sliding layers the last 1,024 (not 62 x 32K)."""
    code, out, err = run("estimate", "--model", "google/gemma-3-27b-it", "--tokens", "32K", "-o", "json")
    assert code == 0, err
    result = json.loads(out)
    per_layer = result["bytes_per_token"] // 62
    assert result["layers"] == {"full": 10, "sliding_window": 52}
    assert result["sequences"][0]["bytes"] == (10 * 32768 + 52 * 1024) * per_layer
    code, out, err = run("estimate", "--model", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--tokens", "1K,64K", "-o", "json")
    assert code == 0, err
    hybrid = json.loads(out)
    assert hybrid["state_bytes_per_sequence"] > 0 and hybrid["layers"]["mamba"] == 36
    short, long = (s["bytes"] for s in hybrid["sequences"])
    per_token = hybrid["bytes_per_token"]
    assert long - short == (65536 - 1024) * per_token  # only the 12 full layers grow with length


def _recommend_json(*extra: str) -> dict:
    code, out, _ = run("recommend", "--gpu", "H100-80GB", "--model", "google/gemma-3-27b-it", "-o", "json", *extra)
    assert code in (0, 1), out
    return json.loads(out)


def test_recommend_without_a_release_plans_the_newest_and_says_so() -> None:
    """The output names one release; its band is that release's measured error, and the assumption is a
    finding. `--vllm-version unknown` asks for limits that hold on every checked release instead."""
    from planner.vllm.releases import LATEST_KNOWN

    default = _recommend_json()
    explicit = _recommend_json("--vllm-version", LATEST_KNOWN)
    unknown = _recommend_json("--vllm-version", "unknown")
    assumed = [w for w in default["warnings"] if w.startswith("KVP035")]
    assert len(assumed) == 1 and LATEST_KNOWN in assumed[0] and "--vllm-version unknown" in assumed[0]
    assert not any(w.startswith("KVP035") for w in explicit["warnings"])
    assert default["margin"] == explicit["margin"]
    assert default["recommendation"] == explicit["recommendation"]
    assert all(t["name"] != "unknown_release" for t in default["margin"]["terms"])
    spread = next(t for t in unknown["margin"]["terms"] if t["name"] == "unknown_release")
    # gemma-3-27b: the 0.13-0.16 sampler (full sort of 262k logits for the default batch) leaves GiBs less
    assert spread["low_bytes"] > 2**30
    assert unknown["margin"]["low_bytes"] < default["margin"]["low_bytes"]
    assert unknown["recommendation"]["max_model_len"] < default["recommendation"]["max_model_len"]


def test_recommend_plans_the_model_with_its_hf_overrides() -> None:
    code, out, _ = run(
        "recommend",
        "--gpu",
        "L4",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--hf-overrides",
        '{"max_position_embeddings": 4096}',
        "--vllm-version",
        "0.19.0",
        "-o",
        "json",
    )
    assert code == 0, out
    plan = json.loads(out)
    assert plan["kv_cache"]["max_model_len"] == 4096 and plan["recommendation"]["max_model_len"] == 4096
    assert any(w.startswith("KVP047") and "max_position_embeddings=4096" in w for w in plan["warnings"])
    code, _, err = run(
        "recommend", "--gpu", "L4", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--hf-overrides", '{"dtype": 1}'
    )
    assert code == 2 and "--hf-overrides dtype" in err


def test_a_model_name_too_long_for_the_file_system_is_an_unknown_model() -> None:
    # (Path.exists raised ENAMETOOLONG: exit 70, "a kv-planner bug"; found by the CLI fuzz test)
    result = runner.invoke(app, ["recommend", "--gpu", "A100-80GB", "--model", "x" * 300])
    assert result.exit_code == 2 and "Unknown model" in result.output
