"""resolve_model on local paths: the exact weight bytes of the files, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hub_builders import config_bytes, llama_config, llama_tensors
from safetensors.numpy import save_file

from planner.errors import InvalidModelConfigError, ModelNotFoundError, ModelResolutionError
from planner.hub.resolve import resolve_model


@pytest.fixture
def model_dir(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    directory = tmp_path / "tiny-llama"
    directory.mkdir()
    config = llama_config(torch_dtype="float16")
    (directory / "config.json").write_bytes(config_bytes(config))
    tensors = llama_tensors(config)
    names = sorted(tensors)
    half = len(names) // 2
    shards = {
        "model-00001-of-00002.safetensors": names[:half],
        "model-00002-of-00002.safetensors": names[half:],
    }
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, directory / shard)
    index = {
        "metadata": {"total_size": sum(a.nbytes for a in tensors.values())},
        "weight_map": {k: shard for shard, keys in shards.items() for k in keys},
    }
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    (directory / "tokenizer.json").write_text("{}")
    return directory, tensors


def test_local_directory_gives_the_exact_bytes_of_its_files(
    model_dir: tuple[Path, dict[str, np.ndarray]],
) -> None:
    directory, tensors = model_dir
    resolved = resolve_model(str(directory))
    assert resolved.source == "local"
    assert resolved.location == str(directory)
    assert resolved.checkpoint is not None and resolved.checkpoint.exact
    exact = sum(a.nbytes for a in tensors.values())
    assert resolved.spec.checkpoint_bytes == resolved.checkpoint.total_bytes == exact
    assert resolved.spec.parameters == sum(a.size for a in tensors.values())
    # Tensor bytes are the files minus their 8-byte length and JSON header.
    on_disk = sum(p.stat().st_size for p in directory.glob("*.safetensors"))
    headers = sum(8 + (f.header_bytes or 0) for f in resolved.checkpoint.files)
    assert on_disk - headers == exact
    assert resolved.spec.num_layers == 2 and resolved.warnings == []
    assert resolved.config == json.loads((directory / "config.json").read_text())  # for --hf-overrides


def test_a_file_inside_the_directory_resolves_the_directory(
    model_dir: tuple[Path, dict[str, np.ndarray]],
) -> None:
    directory, tensors = model_dir
    for path in (directory / "config.json", directory / "model-00001-of-00002.safetensors"):
        resolved = resolve_model(str(path))
        assert resolved.spec.checkpoint_bytes == sum(a.nbytes for a in tensors.values())


def test_revision_is_ignored_for_a_local_path_with_a_warning(
    model_dir: tuple[Path, dict[str, np.ndarray]],
) -> None:
    resolved = resolve_model(str(model_dir[0]), revision="v1")
    assert any("--revision v1 is ignored" in w for w in resolved.warnings)


def test_without_safetensors_the_weights_are_estimated(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(config_bytes(llama_config()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 16)
    resolved = resolve_model(str(tmp_path))
    assert resolved.checkpoint is not None
    assert resolved.checkpoint.format == "estimate" and not resolved.checkpoint.exact
    assert resolved.checkpoint.total_bytes > 0
    assert resolved.spec.checkpoint_bytes is None
    assert any("estimated" in w for w in resolved.warnings)


def test_missing_and_malformed_local_models(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="no such file or directory"):
        resolve_model(str(tmp_path / "absent"))
    with pytest.raises(ModelNotFoundError, match="no such file or directory"):
        resolve_model("./models/absent")
    with pytest.raises(ModelNotFoundError, match=r"has no config\.json"):
        resolve_model(str(tmp_path))
    cache_repo = tmp_path / "models--acme--tiny"
    (cache_repo / "snapshots").mkdir(parents=True)
    with pytest.raises(ModelNotFoundError) as caught:
        resolve_model(str(cache_repo))
    assert "snapshots" in str(caught.value)

    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(InvalidModelConfigError, match="not valid JSON"):
        resolve_model(str(tmp_path))
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    with pytest.raises(InvalidModelConfigError, match="GGUF"):
        resolve_model(str(tmp_path / "model.gguf"))


def test_truncated_local_shard_is_reported(model_dir: tuple[Path, dict[str, np.ndarray]]) -> None:
    directory, _ = model_dir
    shard = directory / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(ModelResolutionError, match="truncated"):
        resolve_model(str(directory))
