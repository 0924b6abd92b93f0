"""``python -m admission webhook``: flags, KV_PLANNER_* environment variables, a clean SIGTERM exit."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import trustme
from typer.testing import CliRunner

from admission.cli import app

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_missing_tls_files_exit_two(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "webhook",
            "--tls-cert-file",
            str(tmp_path / "no.crt"),
            "--tls-key-file",
            str(tmp_path / "no.key"),
            "--no-cluster",
        ],
    )
    assert result.exit_code == 2 and "no such file" in result.output


def test_bad_policy_file_exit_two(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    (tmp_path / "policy.yaml").write_text("mutation: sometimes\n")
    result = CliRunner().invoke(
        app,
        [
            "webhook",
            "--tls-cert-file",
            str(tmp_path / "tls.crt"),
            "--tls-key-file",
            str(tmp_path / "tls.key"),
            "--no-cluster",
            "--policy-file",
            str(tmp_path / "policy.yaml"),
            "--port",
            str(_free_port()),
        ],
    )
    assert result.exit_code == 2 and "mutation" in result.output


@pytest.mark.slow
def test_process_configured_by_environment(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    port, metrics = _free_port(), _free_port()
    env = {
        **os.environ,
        "KV_PLANNER_TLS_CERT_FILE": str(tmp_path / "tls.crt"),
        "KV_PLANNER_TLS_KEY_FILE": str(tmp_path / "tls.key"),
        "KV_PLANNER_PORT": str(port),
        "KV_PLANNER_METRICS_PORT": str(metrics),
        "KV_PLANNER_HOST": "127.0.0.1",
        "KV_PLANNER_CLUSTER": "false",
        "KV_PLANNER_LOG_LEVEL": "warning",
    }
    process = subprocess.Popen([sys.executable, "-m", "admission", "webhook"], env=env, cwd=REPO)
    context = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    try:
        deadline = time.monotonic() + 60
        ready = False
        while time.monotonic() < deadline and not ready:
            assert process.poll() is None, "the webhook exited"
            try:
                ready = httpx.get(f"https://127.0.0.1:{port}/readyz", verify=context, timeout=1).status_code == 200
            except httpx.HTTPError:
                time.sleep(0.2)
        assert ready
        assert "kv_planner_webhook_policy_generation" in httpx.get(f"http://127.0.0.1:{metrics}/metrics").text
    finally:
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught (exit by SIGTERM).
        assert process.wait(timeout=30) in (0, -signal.SIGTERM)
