"""``python -m admission webhook``: the admission webhook process.

Every flag also reads ``KV_PLANNER_<FLAG>`` (``--tls-cert-file`` <- ``KV_PLANNER_TLS_CERT_FILE``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from admission.cli import app
from admission.webhook.server import WebhookSettings, run
from planner.errors import KvPlannerError


def _env(flag: str) -> str:
    return "KV_PLANNER_" + flag.upper().replace("-", "_")


@app.command("webhook")
def webhook(
    tls_cert_file: Annotated[Path, typer.Option(envvar=_env("tls-cert-file"), help="PEM certificate (chain).")],
    tls_key_file: Annotated[Path, typer.Option(envvar=_env("tls-key-file"), help="PEM private key.")],
    port: Annotated[int, typer.Option(envvar=_env("port"), min=1, max=65535, help="TLS port.")] = 8443,
    host: Annotated[str, typer.Option(envvar=_env("host"), help="Address to bind.")] = "0.0.0.0",
    policy_file: Annotated[
        Path | None, typer.Option(envvar=_env("policy-file"), help="Policy YAML/JSON (reloaded on change).")
    ] = None,
    metrics_port: Annotated[
        int, typer.Option(envvar=_env("metrics-port"), min=1, max=65535, help="Plain-HTTP /metrics port.")
    ] = 9090,
    client_ca_file: Annotated[
        Path | None,
        typer.Option(envvar=_env("client-ca-file"), help="Require client certs signed by this CA."),
    ] = None,
    reload_interval: Annotated[
        float, typer.Option(envvar=_env("reload-interval"), min=0.1, help="Seconds between file checks.")
    ] = 10.0,
    max_pending_bytes: Annotated[
        int,
        typer.Option(
            envvar=_env("max-pending-bytes"), min=1024 * 1024, help="Request bytes held at once (503 past it)."
        ),
    ] = 64 * 2**20,
    body_limit: Annotated[
        int, typer.Option(envvar=_env("body-limit"), min=1024, help="Largest request body (bytes).")
    ] = 7 * 1024 * 1024,
    cluster: Annotated[
        bool,
        typer.Option(
            "--cluster/--no-cluster",
            envvar=_env("cluster"),
            help="Watch Nodes and Namespaces through the API server (GPU inventory, namespace overrides).",
        ),
    ] = True,
    log_level: Annotated[str, typer.Option(envvar=_env("log-level"), help="debug, info, warning, error.")] = "info",
    metrics_host: Annotated[
        str | None, typer.Option(envvar=_env("metrics-host"), help="Address of the metrics port (default: --host).")
    ] = None,
    tls_min_version: Annotated[
        str, typer.Option(envvar=_env("tls-min-version"), help="1.2 (AEAD suites only) or 1.3 (1.3 only).")
    ] = "1.2",
    workers: Annotated[
        int,
        typer.Option(
            envvar=_env("workers"),
            min=0,
            max=64,
            help="Decision worker processes; 0: one per CPU of the CPU limit plus one, at least 3.",
        ),
    ] = 0,
    review_budget: Annotated[
        float,
        typer.Option(
            envvar=_env("review-budget"),
            min=0.05,
            max=30,
            help="Seconds one review may take; past it the worker is replaced and the policy's onTimeout answers.",
        ),
    ] = 1.0,
    max_waiting: Annotated[
        int, typer.Option(envvar=_env("max-waiting"), min=1, help="Reviews of one namespace waiting for a worker.")
    ] = 32,
    worker_max_memory: Annotated[
        int,
        typer.Option(envvar=_env("worker-max-memory"), min=0, help="Worker RSS bytes that replace it."),
    ] = 200 * 2**20,
    request_timeout: Annotated[
        float, typer.Option(envvar=_env("request-timeout"), min=0.1, help="Seconds to receive one request.")
    ] = 10.0,
    keep_alive: Annotated[
        float, typer.Option(envvar=_env("keep-alive"), min=0.1, help="Seconds an idle connection is kept open.")
    ] = 5.0,
    max_connections: Annotated[
        int, typer.Option(envvar=_env("max-connections"), min=1, help="Open connections on the TLS port.")
    ] = 1000,
) -> None:
    """Serve /mutate and /validate (AdmissionReview v1) over TLS, /metrics over plain HTTP."""
    for path, flag in ((tls_cert_file, "--tls-cert-file"), (tls_key_file, "--tls-key-file")):
        if not path.is_file():
            typer.echo(f"error: {flag} {path}: no such file", err=True)
            raise typer.Exit(2)
    if tls_min_version not in ("1.2", "1.3"):
        typer.echo(f"error: --tls-min-version {tls_min_version}: use 1.2 or 1.3", err=True)
        raise typer.Exit(2)
    settings = WebhookSettings(
        host=host,
        metrics_host=metrics_host,
        tls_min_version="1.3" if tls_min_version == "1.3" else "1.2",
        workers=workers,
        review_budget=review_budget,
        max_waiting=max_waiting,
        worker_max_rss=worker_max_memory,
        request_timeout=request_timeout,
        keep_alive=keep_alive,
        max_connections=max_connections,
        max_pending_bytes=max_pending_bytes,
        port=port,
        tls_cert_file=str(tls_cert_file),
        tls_key_file=str(tls_key_file),
        client_ca_file=str(client_ca_file) if client_ca_file else None,
        policy_file=str(policy_file) if policy_file else None,
        metrics_port=metrics_port,
        reload_interval=reload_interval,
        body_limit=body_limit,
        cluster=cluster,
        log_level=log_level.lower(),
    )
    try:
        run(settings)
    except KvPlannerError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
