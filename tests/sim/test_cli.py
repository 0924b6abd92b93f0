"""``planner simulate serve``: usage errors, and a real server process on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from planner.cli import app


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        ([], 2, "--num-gpu-blocks"),
        (["--num-gpu-blocks", "10", "--max-model-len", "4096"], 1, "max seq len (4096)"),
        (["--num-gpu-blocks", "100", "--vllm-version", "0.19.0", "--vllm-engine", "v0"], 2, "V0 engine"),
        (["--num-gpu-blocks", "100", "--vllm-version", "banana"], 2, "not X.Y.Z"),
        (["--num-gpu-blocks", "100", "--vllm-version", "0.7.3"], 2, "older than"),
        (["--num-gpu-blocks", "100", "--max-model-len", "12q"], 2, "invalid integer"),
        (["--num-gpu-blocks", "100", "--max-num-seqs", "512", "--max-num-batched-tokens", "100"], 2, "max_num_seqs"),
        (["--model", "org/x", "--gpu", "NoSuchGPU-1"], 2, "Unknown GPU"),
    ],
)
def test_bad_input_is_a_clear_error(args: list[str], code: int, fragment: str) -> None:
    result = CliRunner().invoke(app, ["simulate", "serve", *args])
    assert result.exit_code == code, result.output
    assert fragment in result.output
    assert "Traceback" not in result.output


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_serve_runs_a_real_server_process() -> None:
    port = _free_port()
    command = [
        sys.executable,
        "-c",
        "from planner.cli import main; main()",
        "simulate",
        "serve",
        "--num-gpu-blocks",
        "64",
        "--block-size",
        "32",
        "--max-model-len",
        "1K",
        "--port",
        str(port),
        "--time-scale",
        "0",
        "--seed",
        "4",
        "--vllm-version",
        "0.11.0",
        "--output",
        "json",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):  # bounded wait for start-up (~30 s)
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None:
                pytest.fail(f"the simulator exited: {process.stderr.read() if process.stderr else ''}")
            time.sleep(0.1)
        else:
            pytest.fail("the simulator did not answer /health")
        card = httpx.get(f"{url}/v1/models").json()["data"][0]
        assert card["owned_by"] == "kv-planner-simulator" and card["max_model_len"] == 1024
        page = httpx.get(f"{url}/metrics").text
        assert 'num_gpu_blocks="64"' in page and 'block_size="32"' in page
        assert "vllm:time_per_output_token_seconds_bucket" in page  # 0.11 still shows the old name
    finally:
        process.terminate()
        try:
            out, _ = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
    summary = json.loads(out[: out.rindex("}") + 1])
    assert summary["num_gpu_blocks"] == 64 and summary["modelled_release"] == "0.11.0"


def test_model_and_gpu_size_the_cache_with_the_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.gpus.catalog import lookup_gpu
    from planner.models.catalog import lookup_model
    from planner.plan import make_plan
    from planner.sim import server
    from planner.vllm.args import ServingArgs

    model = lookup_model("Qwen/Qwen2.5-7B-Instruct")
    served: list[object] = []
    monkeypatch.setattr(server, "serve_forever", lambda settings, **_: served.append(settings))
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "serve",
            "--model",
            "Qwen/Qwen2.5-7B-Instruct",
            "--gpu",
            "A100-80GB",
            "--max-model-len",
            "8192",
            "--vllm-version",
            "0.19.0",
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    plan = make_plan(model, lookup_gpu("A100-80GB"), ServingArgs(max_model_len=8192), vllm_version="0.19.0")
    assert summary["num_gpu_blocks"] == plan.kv_cache.num_gpu_blocks
    assert summary["block_size"] == plan.kv_cache.block_size and summary["max_model_len"] == 8192
    assert summary["source"] == "plan:Qwen/Qwen2.5-7B-Instruct@A100-80GB"
    # The speed model comes from the GPU: a step reads the weights once.
    assert summary["speed"]["base_s"] == pytest.approx(
        plan.memory.weights_bytes / lookup_gpu("A100-80GB").bandwidth_bytes_per_s
    )
    assert len(served) == 1
