"""A model given as a local path, the way ``vllm serve /models/llama`` takes one.

A directory must hold config.json; its weights are the safetensors files vLLM would load from it (headers
only are read). A file argument may be that config.json or one of the safetensors files; its folder is
used. The Hugging Face cache's own folder layout gets a pointed hint, since pointing at
``models--org--name`` instead of one of its snapshots is an easy mistake.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InvalidModelConfigError, ModelNotFoundError, ModelResolutionError


@dataclass(frozen=True)
class LocalModel:
    directory: Path
    config: dict[str, Any]


def looks_like_path(name: str) -> bool:
    """True for names that can only be a filesystem path (never a Hub id ``org/name``)."""
    return (
        name.startswith(("/", "./", "../", "~", ".\\", "..\\"))
        or name in (".", "..")
        or name.count("/") > 1
        or (os.sep != "/" and os.sep in name)
        or name.endswith((".json", ".safetensors", ".gguf"))
    )


def load_local(path: Path) -> LocalModel:
    """Read config.json of a local model directory (or of the folder of a file inside it)."""
    # Here, not at the top: the resolver imports looks_like_path for every name, catalog ids included.
    from planner.models.checkpoint import read_json_file

    if path.is_file():
        if path.suffix == ".gguf":
            raise InvalidModelConfigError(
                f"{path} is a GGUF file; kv-planner reads Hugging Face checkpoints (config.json + safetensors).",
                hint="Point --model at the original Hugging Face repository or a directory with config.json.",
            )
        directory = path.parent
        config_path = path if path.suffix == ".json" else directory / "config.json"
    else:
        directory = path
        config_path = directory / "config.json"
    if not config_path.is_file():
        hint = None
        if (directory / "snapshots").is_dir() and directory.name.startswith("models--"):
            hint = f"This is a Hugging Face cache folder; use one of {directory / 'snapshots'}/<commit>."
        raise ModelNotFoundError(f"{directory} has no config.json.", model=str(path), hint=hint)
    try:
        config = read_json_file(config_path, what="config.json")
    except ModelResolutionError as error:
        raise InvalidModelConfigError(error.message, hint=error.hint) from None
    return LocalModel(directory=directory, config=config)
