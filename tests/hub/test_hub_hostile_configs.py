"""Hostile config.json files on the Hub (any repo a manifest names) end as clear, memoized config errors: exit 2
for ``planner recommend``, a "model not checked" finding (KVP040) for ``planner check`` and the webhook, never
an internal error (exit 70, KVP049) and never minutes of work (docs/security.md, "Hugging Face Hub").

Before: ``num_hidden_layers: 1000000000`` (a 1 KB file) ran for minutes and past 5 GiB in ``planner check`` and
``planner recommend``; ``1e308``, ``NaN``, ``Infinity``, a 5000-digit integer and a 200k-deep ``[[[...]]]`` were
"internal error, this is a kv-planner bug" (exit 70 / KVP049), and none was memoized, so every admission of the
workload repeated the Hub lookup.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hub_builders import config_bytes, llama_config, llama_tensors, real_safetensors
from hub_fake_server import FakeHub, Repo
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InvalidModelConfigError
from planner.hub.resolve import resolve_model
from planner.hub.settings import HubLimits

pytestmark = pytest.mark.timeout(60)

_SMALL = real_safetensors(llama_tensors(llama_config()))

HOSTILE: dict[str, tuple[bytes, str]] = {
    "layers-billion": (config_bytes(llama_config(num_hidden_layers=10**9)), "num_hidden_layers is 1000000000"),
    "layers-1e5": (config_bytes(llama_config(num_hidden_layers=10**5)), "num_hidden_layers is 100000"),
    "layers-1e308": (config_bytes(llama_config(num_hidden_layers=1e308)), "num_hidden_layers is 1e\\+308"),
    "hidden-nan": (config_bytes(llama_config(hidden_size=float("nan"))), "hidden_size must be a finite number"),
    "heads-inf": (
        config_bytes(llama_config(num_attention_heads=float("inf"))),
        "num_attention_heads must be a finite number",
    ),
    "vision-huge": (
        config_bytes(llama_config(vision_config={"hidden_size": 10**15})),
        "vision_config.hidden_size is 1000000000000000",
    ),
    "int-5000-digits": (
        config_bytes(llama_config()).replace(b'"vocab_size": 256', b'"vocab_size": ' + b"9" * 5000),
        "Exceeds the limit",
    ),
    "deep-nesting": (
        b'{"architectures": ["LlamaForCausalLM"], "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
        "nests deeper than 64 levels",
    ),
}


def _publish(hub: FakeHub, name: str) -> str:
    repo_id = f"evil/{name}"
    repo = hub.repos.get(repo_id) or hub.add(Repo(repo_id))
    repo.commit({"config.json": HOSTILE[name][0], "model.safetensors": _SMALL})
    return repo_id


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_config_is_a_clear_memoized_config_error(hub: FakeHub, name: str) -> None:
    repo_id = _publish(hub, name)
    started = time.monotonic()
    with pytest.raises(InvalidModelConfigError, match=HOSTILE[name][1]):
        resolve_model(repo_id)
    assert time.monotonic() - started < 10
    hub.reset_log()
    with pytest.raises(InvalidModelConfigError, match=HOSTILE[name][1]):
        resolve_model(repo_id)  # memoized: an admission loop does not repeat the lookup
    assert hub.requests == []


@pytest.mark.parametrize("name", ["layers-billion", "hidden-nan", "deep-nesting"])
def test_the_webhook_lookup_gets_the_same_error(hub: FakeHub, name: str) -> None:
    repo_id = _publish(hub, name)
    with pytest.raises(InvalidModelConfigError, match=HOSTILE[name][1]):
        resolve_model(repo_id, local=False, limits=HubLimits(), timeout=20)
    hub.reset_log()
    with pytest.raises(InvalidModelConfigError):
        resolve_model(repo_id, local=False, limits=HubLimits(), timeout=20)
    assert hub.requests == []


@pytest.mark.parametrize("name", ["layers-billion", "layers-1e308", "hidden-nan", "int-5000-digits", "deep-nesting"])
def test_planner_recommend_exits_2_with_the_field(hub: FakeHub, name: str) -> None:
    repo_id = _publish(hub, name)
    started = time.monotonic()
    result = CliRunner().invoke(app, ["recommend", "--model", repo_id, "--gpu", "H100"])
    output = result.stdout + result.stderr
    assert result.exit_code == 2, output
    assert "internal error" not in output and "Traceback" not in output
    assert "config.json" in output
    assert time.monotonic() - started < 20


def _deployment(model: str) -> str:
    container: dict[str, Any] = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.19.0",
        "args": ["--model", model],
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    pod = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "containers": [container]}
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "evil", "namespace": "inference"},
            "spec": {
                "selector": {"matchLabels": {"app": "evil"}},
                "template": {"metadata": {"labels": {"app": "evil"}}, "spec": pod},
            },
        }
    )


@pytest.mark.parametrize("name", ["layers-billion", "layers-1e308", "heads-inf", "int-5000-digits", "deep-nesting"])
def test_planner_check_says_not_checked_not_internal_error(hub: FakeHub, tmp_path: Path, name: str) -> None:
    repo_id = _publish(hub, name)
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(_deployment(repo_id))
    started = time.monotonic()
    result = CliRunner().invoke(app, ["check", "-f", str(manifest), "--output", "json"])
    assert time.monotonic() - started < 20
    data = json.loads(result.stdout)
    (workload,) = data["workloads"]
    assert "KVP049" not in workload["codes"], workload
    assert workload["codes"] == ["KVP040"], workload
    assert "config.json" in " ".join(workload["messages"])
