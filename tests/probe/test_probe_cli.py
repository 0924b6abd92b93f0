"""``planner probe`` end to end: output formats, the plot, bad input, and Ctrl-C in a real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app

from .conftest import wait_idle

runner = CliRunner()


@pytest.mark.slow
def test_json_report_and_png_plot(fake_server, tmp_path: Path) -> None:
    server = fake_server(capacity=3, max_model_len=256)
    plot = tmp_path / "probe.png"
    result = runner.invoke(
        app,
        [
            "probe",
            "--endpoint",
            f"{server.url}/v1",
            "--output",
            "json",
            "--output-tokens",
            "8",
            "--max-concurrency",
            "4",
            "--sample-interval",
            "20ms",
            "--plot",
            str(plot),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["safe_concurrency"] == 3
    assert report["endpoint"] == server.url
    assert [s["concurrency"] for s in report["steps"]] == [1, 2, 4, 3]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_table_report_and_svg_plot(fake_server, tmp_path: Path) -> None:
    server = fake_server(capacity=2, max_model_len=256)
    plot = tmp_path / "probe.svg"
    workload = tmp_path / "lengths.yaml"
    workload.write_text("prompt_tokens: {p50: 40, p90: 80}\noutput_tokens: 6\n")
    result = runner.invoke(
        app,
        [
            "probe",
            "--endpoint",
            server.url,
            "--workload",
            str(workload),
            "--levels",
            "1,2,3",
            "--sample-interval",
            "20ms",
            "--plot",
            str(plot),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Highest safe concurrency: 2" in result.stdout
    assert "FAIL: " in result.stdout and "preemptions > 0" in result.stdout
    assert "Planner for the same blocks and lengths" in result.stdout
    svg = plot.read_text()
    assert "<svg" in svg and "concurrent requests" in svg


def test_bad_input_exits_2(tmp_path: Path) -> None:
    cases = [
        ["--levels", "a,b"],
        ["--plot", str(tmp_path / "probe.jpg")],
        ["--max-duration", "forever"],
        ["--workload", str(tmp_path / "missing.yaml")],
        ["--endpoint-is-not-a-flag"],
    ]
    for extra in cases:
        args = ["probe", "--endpoint", "http://127.0.0.1:9", *extra]
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (extra, result.output)
        assert "Traceback" not in result.output


def test_unreachable_endpoint_exits_3() -> None:
    result = runner.invoke(app, ["probe", "--endpoint", "http://127.0.0.1:9", "--max-concurrency", "1"])
    assert result.exit_code == 3
    assert "cannot reach" in result.output


@pytest.mark.slow
def test_ctrl_c_cancels_requests_and_prints_the_partial_report(fake_server) -> None:
    server = fake_server(capacity=100, max_model_len=256, token_delay_s=0.005)
    command = [
        sys.executable,
        "-c",
        "from planner.cli import main; main()",
        "probe",
        "--endpoint",
        server.url,
        "--output",
        "json",
        "--output-tokens",
        "100",
        "--sample-interval",
        "50ms",
        "--max-duration",
        "2m",
        "--warmup-requests",
        "0",
        "--requests-per-step",
        "2",
        "--start-concurrency",
        "1",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # Wait (bounded) until the probe is measuring its second level, then press Ctrl-C.
        assert process.stderr is not None
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            seen.append(line)
            if line.startswith("concurrency 2: warming"):
                break
        else:
            raise AssertionError("the probe never reached concurrency 2: " + "".join(seen))
        time.sleep(0.2)  # the level-2 requests are in flight (each takes ~0.6 s on this server)
        assert server.state.active > 0
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    report = json.loads(stdout)
    assert report["interrupted"] is True and report["stop_reason"] == "interrupted"
    assert report["steps"][0]["concurrency"] == 1 and not report["steps"][0]["partial"]
    assert all(step["partial"] for step in report["steps"][1:])  # level 2 was cut short
    assert report["safe_concurrency"] == 1
    assert "interrupted" in stderr
    wait_idle(server.state)  # the requests in flight were cancelled, the server saw them go
    assert server.state.cancelled > 0


def test_a_run_cut_short_says_why_and_what_to_change(fake_server) -> None:
    server = fake_server(capacity=100, max_model_len=256, token_delay_s=0.02)
    result = runner.invoke(
        app,
        [
            "probe",
            "--endpoint",
            server.url,
            "--output-tokens",
            "200",
            "--max-duration",
            "1s",
            "--start-concurrency",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "No concurrency level passed completely" in result.stdout
    assert "Stopped because the 1 s time limit (--max-duration) ran out" in result.stdout
    assert "--quick" in result.stdout
    assert "ok (partial)" not in result.stdout
