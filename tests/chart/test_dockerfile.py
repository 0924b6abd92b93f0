"""The Dockerfile: linted with hadolint, its structure checked against the chart, and its entrypoint run
as the image runs it, from the installed package outside the checkout (no Docker engine here: e2e/kind.sh
builds the image)."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.chart.chart_helpers import CHART, REPO_ROOT, component, render
from tests.conftest import require_tool

DOCKERFILE = REPO_ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def test_hadolint() -> None:
    hadolint = require_tool("hadolint")
    proc = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_runtime_stage_is_slim_non_root_and_runs_admission() -> None:
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE))
    stage = final_stage()
    base = stage[0][1].replace("${PYTHON_IMAGE}", args.get("PYTHON_IMAGE", ""))
    assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", base), base
    users = [rest for word, rest in stage if word == "USER"]
    assert users, "the runtime stage must drop root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit() and int(gid) > 0
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert int(uid) == values["podSecurityContext"]["runAsUser"]
    assert int(gid) == values["podSecurityContext"]["runAsGroup"]
    entrypoint = [rest for word, rest in stage if word == "ENTRYPOINT"]
    assert json.loads(entrypoint[-1]) == ["python", "-m", "admission"]
    exposed = {int(p) for word, rest in stage if word == "EXPOSE" for p in rest.split()}
    assert {values["webhook"]["port"], values["webhook"]["metricsPort"], values["exporter"]["port"]} <= exposed


def test_no_compilers_anywhere() -> None:
    runs = " ".join(rest for word, rest in instructions() if word == "RUN")
    for tool in ("gcc", "g++", "build-essential", "clang", "make ", "apt-get install", "apk add"):
        assert tool not in runs, tool
    # Dependencies must come as wheels, so nothing is compiled even implicitly.
    assert runs.count("--only-binary=:all:") >= 1


def test_build_context_has_what_the_build_copies() -> None:
    copies = [rest.split() for word, rest in instructions() if word == "COPY" and "--from" not in rest]
    sources = [src for parts in copies for src in parts[:-1]]
    ignore = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore  # allow-list: everything else stays out of the context
    for src in sources:
        assert f"!{src.rstrip('/')}" in ignore or f"!{src.rstrip('/')}/" in ignore, src
        if src != "README.md":  # the lead's README; pyproject.toml names it as the package readme
            assert (REPO_ROOT / src).exists(), src


@pytest.fixture(scope="module")
def image_python() -> Path:
    """The interpreter standing in for the image's /opt/kv-planner/bin/python: the one running the tests,
    which has kv-planner installed (the user's venv after `pip install .`, or CI's interpreter). A venv
    built here would see only the base interpreter's packages, not those of the venv it was made from."""
    return Path(sys.executable)


def run_entrypoint(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    entrypoint = json.loads(next(rest for word, rest in final_stage() if word == "ENTRYPOINT"))
    assert entrypoint[0] == "python"
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1", "TERM": "dumb"}
    env = {k: v for k, v in env.items() if not k.startswith("KV_PLANNER_")}
    return subprocess.run(
        [str(python), *entrypoint[1:], *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tempfile.gettempdir(),  # outside the checkout: the import must come from the installed package
        env=env,
    )


@functools.cache
def command_listing(python: Path) -> subprocess.CompletedProcess[str]:
    return run_entrypoint(python, "--help")


@pytest.mark.slow
def test_entrypoint_runs_from_a_virtualenv(image_python: Path) -> None:
    proc = command_listing(image_python)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Usage" in proc.stdout


CLI_CASES = [
    pytest.param("webhook", (), id="webhook"),
    pytest.param("exporter", (), id="exporter-discover-recommend"),
    pytest.param(
        "exporter",
        (
            "exporter.source=targets",
            "exporter.targets[0]=http://a:8000/metrics",
            "exporter.targets[1]=http://b:8000/metrics",
            "exporter.retune=off",
        ),
        id="exporter-targets",
    ),
    pytest.param(
        "exporter",
        (
            "exporter.source=prometheus",
            "exporter.prometheusUrl=http://prom:9090",
            "exporter.retune=apply",
            "exporter.events.enabled=false",
            "exporter.annotateRecommendations=true",
            "exporter.rbac.namespaces[0]=team-a",
            'json:policy.workload={"prompt_tokens": {"p50": 800}, "target_risk": 0.05}',
        ),
        id="exporter-prometheus-apply",
    ),
]


@pytest.mark.needs_helm
@pytest.mark.parametrize(("comp", "values"), CLI_CASES)
def test_chart_arguments_are_accepted_by_the_cli(
    comp: str, values: tuple[str, ...], image_python: Path, helm: str
) -> None:
    """Contract between the chart and `python -m admission`: every flag the chart passes and every
    KV_PLANNER_* variable it sets is declared by the command (click stops at --help before running)."""
    container = component(render(set_values=values), "Deployment", comp)["spec"]["template"]["spec"]["containers"][0]
    listing = command_listing(image_python)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    # typer runs a lone registered command without its name, so `admission webhook ...` only works while
    # both commands are registered (or admission/cli.py declares an @app.callback()).
    assert re.search(rf"^\W*{comp}\b", listing.stdout, re.MULTILINE), listing.stdout
    proc = run_entrypoint(image_python, *container["args"], "--help")
    assert proc.returncode == 0, (
        f"the image would fail to start the {comp}: `python -m admission {' '.join(container['args'])}` -> "
        f"{proc.stderr.strip() or proc.stdout.strip()}"
    )
    for env in container.get("env", []):
        if env["name"].startswith("KV_PLANNER_"):
            assert env["name"] in proc.stdout, f"{env['name']} is set by the chart but not read by the {comp}"
