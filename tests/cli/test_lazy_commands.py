"""`planner` imports a command's module only when that command runs (see planner/cli/_commands.py)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cli import app, load_all_commands
from planner.cli._commands import COMMANDS

_PROBE = """
import json, sys
from planner.cli import main
sys.argv = ["planner", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
prefixes = ("planner.", "numpy", "fastapi", "uvicorn", "matplotlib", "rich", "yaml", "huggingface_hub", "httpx",
            "concurrent.futures")
loaded = sorted(m for m in sys.modules if m.startswith(prefixes))
print(json.dumps(loaded), file=sys.stderr)
"""


def _modules_loaded_by(*argv: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(argv))], capture_output=True, text=True, check=False
    )
    return set(json.loads(result.stderr.strip().splitlines()[-1]))


def test_top_level_help_imports_no_command_module() -> None:
    loaded = _modules_loaded_by("--help")
    assert not {f"planner.cli.{entry.module}" for entry in COMMANDS.values()} & loaded
    assert "planner.plan" not in loaded


@pytest.mark.slow
def test_a_plan_imports_neither_policy_nor_the_shells() -> None:
    loaded = _modules_loaded_by("recommend", "--gpu", "H100-80GB", "--model", "meta-llama/Llama-3.1-8B-Instruct")
    assert "planner.cli.recommend" in loaded
    forbidden = (
        "planner.policy",
        "planner.sim",
        "planner.probe",
        "planner.cli.check",
        "fastapi",
        "uvicorn",
        "matplotlib",
    )
    assert not [m for m in loaded if m.startswith(forbidden)]


@pytest.mark.slow
def test_a_json_plan_of_a_catalog_model_imports_only_what_it_prints() -> None:
    """-o json prints no rich output and parses no YAML (the catalogs come from their JSON snapshots,
    planner.datafiles); corrections, GPU sharing, inverse sizing and the catalog table are not asked for,
    and a catalog id needs neither the safetensors reader nor the Hub client."""
    plan = ("recommend", "--gpu", "H100-80GB", "--model", "meta-llama/Llama-3.1-8B-Instruct")
    loaded = _modules_loaded_by(*plan, "-o", "json")
    assert "planner.plan.build" in loaded
    unused = (
        "rich",
        "yaml",
        "huggingface_hub",
        "httpx",
        "concurrent.futures",  # the Hub lookup's deadline thread
        "planner.models.checkpoint",  # a catalog id reads no checkpoint (planner.hub.resolve)
        "planner.hub.remote",
        "planner.calibration",
        "planner.untrusted",
        "planner.plan.shared",
        "planner.plan.inverse",
        "planner.plan.fleet",
        "planner.cli._plan_table",
    )
    assert not [m for m in loaded if m.startswith(unused)]
    # The table is the one output that needs rich (and the probe sees it).
    assert {"rich.table", "planner.cli._plan_table"} <= _modules_loaded_by(*plan)


@pytest.mark.slow
def test_a_check_without_a_workload_profile_imports_no_numpy() -> None:
    """The policy imports planner.workload (numpy) only when a policy or an annotation gives a request-length
    profile (planner/policy/model.py): a plain manifest is checked without it."""
    manifest = str(Path(__file__).resolve().parents[2] / "examples" / "deployment.yaml")
    loaded = _modules_loaded_by("check", "-f", manifest, "-o", "json")
    assert "planner.policy.decide" in loaded
    assert not [m for m in loaded if m.startswith(("numpy", "planner.workload."))]


@pytest.mark.slow
def test_the_catalog_commands_import_only_their_catalog() -> None:
    """`planner gpus` and `planner models` share planner/cli/catalog.py: the GPU listing does not import the
    model catalog, and JSON output builds no rich table."""
    gpus_json = _modules_loaded_by("gpus", "-o", "json")
    assert "planner.gpus.catalog" in gpus_json
    assert not [m for m in gpus_json if m.startswith(("planner.models", "rich"))]
    assert "rich.table" in _modules_loaded_by("gpus")
    models_json = _modules_loaded_by("models", "-o", "json")
    assert "planner.models.catalog" in models_json
    assert not [m for m in models_json if m.startswith("rich")]


@pytest.mark.slow
def test_an_estimate_imports_no_gpu_catalog() -> None:
    """`planner estimate` needs a model, not a GPU: planner/cli/_lookup.py imports the GPU catalog in gpu_for."""
    loaded = _modules_loaded_by(
        "estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--tokens", "32k", "-o", "json"
    )
    assert {"planner.cli._lookup", "planner.kv.specs"} <= loaded
    assert not [m for m in loaded if m.startswith("planner.gpus")]


_ENTRY_POINT_PROBE = """
import importlib.metadata, sys
scans = []
real = importlib.metadata.entry_points
importlib.metadata.entry_points = lambda **kw: scans.append(kw) or real(**kw)
from planner.cli import main
sys.argv = ["planner", "recommend", "--gpu", "H100-80GB", "--model", "llama-3.1-8b", "-o", "json"]
try:
    main()
except SystemExit:
    pass
print(scans, file=sys.stderr)
"""


@pytest.mark.slow
def test_the_command_does_not_scan_for_pydantic_plugins() -> None:
    """pydantic scans every installed distribution for plugins at the first model class unless
    PYDANTIC_DISABLE_PLUGINS says not to; `planner` sets it unless the caller did."""
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    run = subprocess.run(
        [sys.executable, "-c", _ENTRY_POINT_PROBE], capture_output=True, text=True, env=env, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr.strip().splitlines()[-1] == "[]"
    # The caller's choice wins: with plugins enabled, pydantic looks for them.
    env["PYDANTIC_DISABLE_PLUGINS"] = ""
    run = subprocess.run(
        [sys.executable, "-c", _ENTRY_POINT_PROBE], capture_output=True, text=True, env=env, check=False
    )
    assert "'group': 'pydantic'" in run.stderr.strip().splitlines()[-1]


def test_every_registered_command_is_in_the_table() -> None:
    load_all_commands()
    names = {info.name or info.callback.__name__ for info in app.registered_commands if info.callback}
    names |= {info.name for info in app.registered_groups}
    assert names == set(COMMANDS)


def test_help_lists_every_command_with_its_help() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from planner.cli import main; main()", "--help"],
        capture_output=True,
        text=True,
        check=False,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
    )
    assert result.returncode == 0
    for name, entry in COMMANDS.items():
        assert name in result.stdout
        assert entry.summary in result.stdout


def test_command_signatures_are_evaluated_at_import() -> None:
    """typer evaluates string annotations four times per run (see planner/cli/_commands.py)."""
    load_all_commands()
    callbacks = [info.callback for info in app.registered_commands if info.callback]
    callbacks += [c.callback for group in app.registered_groups for c in group.typer_instance.registered_commands]
    assert callbacks
    lazy = [
        f"{cb.__module__}.{cb.__name__}({name})"
        for cb in callbacks
        for name, annotation in inspect.get_annotations(cb).items()
        if isinstance(annotation, str)
    ]
    assert not lazy, f"string annotations (from __future__ import annotations?): {lazy}"


_VALIDATED_PROBE = """
import sys
from planner.cli import main
sys.argv = ["planner", "recommend", "--gpu", "H100-80GB", "--model", "meta-llama/Llama-3.1-8B-Instruct", "-o", "json"]
try:
    main()
except SystemExit:
    pass
from planner.models.catalog import _index
print(sorted(entry.id for entry in _index().entries if entry.spec is not None), file=sys.stderr)
"""


@pytest.mark.slow
def test_a_plan_of_one_catalog_model_validates_one_entry() -> None:
    """The model catalog validates an entry when it is first used (planner/models/catalog.py)."""
    run = subprocess.run([sys.executable, "-c", _VALIDATED_PROBE], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stderr.strip().splitlines()[-1] == "['meta-llama/Llama-3.1-8B-Instruct']"
