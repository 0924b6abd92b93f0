"""``python -m admission webhook|exporter``: one image, two processes.

Every flag of both processes also reads an environment variable ``KV_PLANNER_<FLAG>`` (for example
``--tls-cert-file`` <- ``KV_PLANNER_TLS_CERT_FILE``); each command module declares them with typer's
``envvar``.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="admission",
    help="kv-planner cluster processes: the admission webhook and the exporter/retuner.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    # Plain help: it wraps long flag names instead of cutting them at the terminal width (rich's panels do).
    rich_markup_mode=None,
)


@app.callback()
def _group() -> None:
    """Keeps `webhook` / `exporter` as explicit subcommands (typer runs a lone command without its name)."""


for _module in ("admission.webhook.cli", "admission.exporter.cli"):
    importlib.import_module(_module)


def main() -> None:
    app()
