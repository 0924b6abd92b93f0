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
) -> None:
    """Serve /mutate and /validate (AdmissionReview v1) over TLS, /metrics over plain HTTP."""
    for path, flag in ((tls_cert_file, "--tls-cert-file"), (tls_key_file, "--tls-key-file")):
        if not path.is_file():
            typer.echo(f"error: {flag} {path}: no such file", err=True)
            raise typer.Exit(2)
    settings = WebhookSettings(
        host=host,
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
