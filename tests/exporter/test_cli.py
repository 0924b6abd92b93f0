"""``python -m admission exporter``: usage errors, env-var flags, and a real process on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from admission.cli import app
from planner.sim import SimulatorSettings, start_simulator


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "--targets URL..., --discover or --prometheus-url"),
        (["--targets", "h:1", "--discover"], "cannot be combined"),
        (["--targets", "h:1", "--retune", "apply"], "list the namespaces it may write in (--retune-namespaces)"),
        (["--targets", "h:1", "--retune-annotate"], "list the namespaces it may write in"),
        (["--targets", "h:1", "--retune-namespaces", "*"], "not a namespace name"),
        (["--targets", "h:1#nope=1"], "unknown option"),
        (["--targets", "h:1", "--retune-min-seqs", "9", "--retune-max-seqs", "4"], "is below min_seqs"),
        (["--targets", "h:1", "--retune", "sometimes"], "sometimes"),
    ],
)
def test_usage_errors_exit_2(args: list[str], fragment: str) -> None:
    result = CliRunner().invoke(app, ["exporter", *args])
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    assert "Traceback" not in result.output


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_exporter_process_reads_flags_from_the_environment() -> None:
    settings = SimulatorSettings(num_gpu_blocks=90, max_model_len=512, time_scale=0.0)
    with start_simulator(settings) as sim:
        port = _free_port()
        env = dict(
            os.environ,
            KV_PLANNER_TARGETS=f"{sim.metrics_url}#namespace=ml&workload=sim",
            KV_PLANNER_PORT=str(port),
            KV_PLANNER_HOST="127.0.0.1",
            KV_PLANNER_RETUNE="off",
            KV_PLANNER_LOG_LEVEL="warning",
        )
        process = subprocess.Popen(
            [sys.executable, "-m", "admission", "exporter"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            page = ""
            for _ in range(300):  # bounded: ~30 s
                if process.poll() is not None:
                    pytest.fail(f"the exporter exited: {process.stdout.read() if process.stdout else ''}")
                try:
                    page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            assert 'kv_planner_target_up{namespace="ml"' in page
            assert "kv_planner_kv_blocks_total" in page and "90.0" in page
            assert "kv_planner_max_num_seqs_recommended" not in page  # --retune off
        finally:
            process.terminate()
            process.communicate(timeout=10)
