"""``planner check``: the admission decision on manifest files, without a cluster (CI, GitOps)."""

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from planner.cli._app import EXIT_USAGE, app
from planner.cli._commands import COMMANDS
from planner.cli._output import console, err_console
from planner.errors import ManifestError, PlannerInputError, UnknownGPUError
from planner.gpus.catalog import lookup_gpu
from planner.k8s.nodes import NodeInfo, nodes_from_documents
from planner.policy.check import CheckReport, check_policy, run_check, summary
from planner.policy.manifests import MAX_INPUT_BYTES, Document, read_documents
from planner.policy.planning import CoreBackend
from planner.untrusted import load_yaml


class CheckOutput(str, Enum):
    table = "table"
    json = "json"
    patched = "patched"


class _Budget:
    """Bytes of input one run may still read (manifests are untrusted: ``-f /dev/zero`` must end)."""

    def __init__(self) -> None:
        self.left = MAX_INPUT_BYTES


def _read(path: str, budget: _Budget | None = None) -> tuple[str, str]:
    budget = budget or _Budget()
    source = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read(budget.left + 1)
        else:
            with Path(path).open("rb") as handle:
                data = handle.read(budget.left + 1)
        if len(data) > budget.left:
            raise ManifestError(
                f"{source}: the input is larger than {MAX_INPUT_BYTES // 2**20} MiB in all; check fewer files at a time"
            )
        budget.left -= len(data)
        return data.decode("utf-8"), source
    except (OSError, UnicodeDecodeError) as error:
        raise ManifestError(f"{source}: cannot read: {getattr(error, 'strerror', None) or error}") from None


def _nodes(path: Path) -> list[NodeInfo]:
    text, source = _read(str(path))
    documents = read_documents(text, source)
    bad = [d.error for d in documents if d.error]
    if bad:
        raise ManifestError(f"--nodes: {bad[0]}")
    return nodes_from_documents([d.content for d in documents])


def _policy(path: Path | None) -> Any:
    if path is None:
        return check_policy(None)
    text, source = _read(str(path))
    data = load_yaml(text, source=source) if text.strip() else None
    return check_policy(data, source=source)


def _print_table(report: CheckReport) -> None:
    table = Table(show_lines=False, header_style="bold")
    for column in ("workload", "container", "model", "GPU", "KV cache/GPU", "decision", "codes"):
        table.add_column(column, overflow="fold")  # wrap long names, never cut them
    for entry in report.workloads:
        gpu = entry.gpu
        gpu_text = (
            ""
            if gpu.name is None and gpu.label is None
            else (f"{gpu.count or '?'} x {gpu.name or gpu.label}" + (f" ({gpu.source})" if gpu.source else ""))
        )
        table.add_row(
            f"{entry.kind}/{entry.name}" + (f" [{entry.template}]" if entry.template else ""),
            entry.container or "",
            entry.model or "",
            gpu_text,
            entry.kv_cache.text if entry.kv_cache is not None else "",
            entry.decision,
            " ".join(entry.codes),
        )
    console.print(table)
    for entry in report.workloads:
        shown: set[str] = set()
        for item in entry.findings:
            if item.message in shown:
                continue
            shown.add(item.message)
            # Whole messages, wrapped at the terminal's width; the fix's flags when the text lacks them.
            console.print(f"  {entry.kind}/{entry.name}: {item.message}")
            if item.fix is not None and item.fix.args and " ".join(item.fix.args) not in item.message:
                console.print(f"    fix: {' '.join(item.fix.args)}")
    for error in report.errors:
        err_console.print(f"error: document {error.document}: {error.message}")
    counts = summary(report)
    console.print(", ".join(f"{n} {d}" for d, n in sorted(counts.items())) or "no workloads")


@app.command(
    help=COMMANDS["check"].help,
    epilog="Examples: helm template ./chart | planner check -f - --output json ; "
    "planner check -f k8s/ -f extra.yaml --nodes nodes.yaml --output patched",
)
def check(
    files: Annotated[
        list[str],
        typer.Option("-f", "--file", help="Manifest file, directory (*.yaml, *.yml, *.json) or - for stdin."),
    ],
    policy: Annotated[Path | None, typer.Option(help="Policy file (the chart's ConfigMap schema).")] = None,
    nodes: Annotated[
        Path | None, typer.Option(help="Node list (kubectl get nodes -o yaml): the GPU inventory.")
    ] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU when nothing in a manifest says which.")] = None,
    output: Annotated[CheckOutput, typer.Option("--output", "-o", help="table, json or patched.")] = CheckOutput.table,
) -> None:
    wants_json = output == CheckOutput.json
    try:
        backend = CoreBackend()
        effective_policy = _policy(policy)
        inventory = _nodes(nodes) if nodes is not None else None
        if gpu is not None and backend.catalog.lookup(gpu) is None:
            lookup_gpu(gpu)  # raises UnknownGPUError with suggestions
        documents: list[Document] = []
        budget = _Budget()
        for item in files:
            paths = _expand(item)
            for path in paths:
                text, source = _read(path, budget)
                first = documents[-1].index + 1 if documents else 0
                documents += read_documents(text, source, first_index=first)
        if not documents:
            # A Helm render or kustomize build that produced nothing must not pass CI silently.
            raise ManifestError(f"no Kubernetes objects in {', '.join(files)} (an empty render?)")
    except (PlannerInputError, UnknownGPUError) as error:
        if wants_json:
            typer.echo(json.dumps({"workloads": [], "errors": [{"document": -1, "message": str(error)}]}, indent=2))
        else:
            typer.echo(f"error: {error}", err=True)
        raise typer.Exit(EXIT_USAGE) from None

    report = run_check(documents, policy=effective_policy, backend=backend, inventory=inventory, default_gpu=gpu)
    if wants_json:
        typer.echo(json.dumps(report.model_dump(mode="json"), indent=2))
    elif output == CheckOutput.patched:
        typer.echo(yaml.safe_dump_all([d for d in report.patched if d is not None], sort_keys=False).rstrip())
        for problem in report.errors:
            typer.echo(f"error: document {problem.document}: {problem.message}", err=True)
    else:
        _print_table(report)
    raise typer.Exit(report.exit_code())


def _expand(item: str) -> list[str]:
    if item == "-":
        return ["-"]
    path = Path(item)
    if path.is_dir():
        if (path / "Chart.yaml").is_file():
            raise ManifestError(
                f"{path} is a Helm chart: its templates are not Kubernetes manifests until Helm renders them",
                hint=f"Render it first: helm template my-release {path} | planner check -f -",
            )
        charts = {c.parent for c in path.rglob("Chart.yaml")}
        # Symbolic links are not followed: a link in a checked repository may point anywhere on the machine
        # (`-o patched` would print the file it points to).
        found = sorted(
            p
            for p in path.rglob("*")
            if p.suffix in (".yaml", ".yml", ".json")
            and not p.is_symlink()
            and p.is_file()
            and not charts.intersection(p.parents)
            and not any(parent.is_symlink() for parent in p.relative_to(path).parents if parent != Path("."))
        )
        for chart in sorted(charts):
            err_console.print(
                f"[yellow]note[/] skipped {chart}: a Helm chart (render it with `helm template` and pipe it in)"
            )
        if not found:
            raise ManifestError(f"{path}: no *.yaml, *.yml or *.json files")
        return [str(p) for p in found]
    if not path.exists():
        raise ManifestError(f"{path}: no such file or directory")
    return [item]
