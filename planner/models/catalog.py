"""The embedded model catalog: architecture facts of popular open models, usable offline.

Entries live in ``planner/models/data/*.yaml`` (one file per family), each a :class:`ModelSpec` in
kv-planner's own schema with its ``source`` (Hugging Face URL, revision, whether it was checked field
by field against a real ``config.json``) and, where known exactly, the parameter count and checkpoint
bytes. docs/catalog.md says where each fact comes from and how to add an entry.

Lookup ignores case and accepts, besides the Hugging Face id, the entry's aliases (``llama-3.1-8b``,
an organisation's former name such as ``neuralmagic/...``), the bare repository name when only one
entry has it (``Qwen2.5-7B-Instruct``), and a ``https://huggingface.co/`` prefix.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.datafiles import read_yaml
from planner.errors import CatalogDataError, UnknownModelError
from planner.models.spec import ModelSpec

__all__ = ["DATA_DIR", "all_models", "lookup_model"]

DATA_DIR = Path(__file__).parent / "data"
_URL_PREFIX = re.compile(r"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/", re.IGNORECASE)


class _CatalogFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    models: list[ModelSpec] = Field(min_length=1)


@dataclass
class _Index:
    models: list[ModelSpec]
    by_key: dict[str, ModelSpec] = field(default_factory=dict)


def _key(name: str) -> str:
    text = _URL_PREFIX.sub("", name.strip())
    text = re.sub(r"/(?:tree|blob)/[^/]+.*$", "", text)  # .../tree/main pasted from the browser
    return text.strip("/").lower()


def _load_file(path: Path) -> list[ModelSpec]:
    # Through the folder's JSON snapshot (planner.datafiles): parsing the YAML dominated a cold run.
    data = read_yaml(path, what="model catalog")
    try:
        return list(_CatalogFile.model_validate(data).models)
    except ValidationError as error:
        raise CatalogDataError(f"model catalog {path.name} does not validate:\n{error}") from error


def build_index(paths: list[Path]) -> _Index:
    """Load catalog files and index ids, aliases and unique repository names.

    Raises :class:`CatalogDataError` when two entries claim one id or alias, or an entry lacks its source.
    """
    models: list[ModelSpec] = []
    for path in sorted(paths):
        models.extend(_load_file(path))
    index = _Index(models=models)
    owner: dict[str, str] = {}
    for spec in models:
        if spec.source is None:
            raise CatalogDataError(f"model catalog: {spec.id} has no source")
        if "/" not in spec.id:
            raise CatalogDataError(f"model catalog: {spec.id} is not a Hugging Face id (org/name)")
        for spelling in (spec.id, *spec.aliases):
            key = _key(spelling)
            if key in owner:
                raise CatalogDataError(f"model catalog: {spelling!r} names both {owner[key]} and {spec.id}")
            owner[key] = spec.id
            index.by_key[key] = spec
    # Bare repository names ("Qwen2.5-7B-Instruct") when exactly one entry has it and nothing else claims it.
    short: dict[str, list[ModelSpec]] = {}
    for spec in models:
        short.setdefault(_key(spec.id).split("/", 1)[1], []).append(spec)
    for name, specs in short.items():
        if len(specs) == 1 and name not in index.by_key:
            index.by_key[name] = specs[0]
    return index


@functools.cache
def _index() -> _Index:
    return build_index(list(DATA_DIR.glob("*.yaml")))


def all_models() -> list[ModelSpec]:
    """Every catalog model: the most deployed first (``popular_rank``), then by id."""
    return sorted(_index().models, key=lambda m: (m.popular_rank is None, m.popular_rank or 0, m.id.lower()))


def lookup_model(model_id: str) -> ModelSpec:
    """The catalog entry for a Hugging Face id or alias (case-insensitive).

    Raises :class:`UnknownModelError` with the closest ids when it is not in the catalog (which does
    not mean the model does not exist: the resolver then asks the Hub).
    """
    index = _index()
    key = _key(model_id) if isinstance(model_id, str) else ""
    spec = index.by_key.get(key)
    if spec is not None:
        return spec
    raise UnknownModelError(str(model_id), _suggest(key, index))


def _suggest(key: str, index: _Index) -> list[str]:
    ids = {_key(m.id): m.id for m in index.models}
    close = difflib.get_close_matches(key, list(index.by_key), n=8, cutoff=0.6)
    found: list[str] = []
    for match in close:
        model = index.by_key[match].id
        if model not in found:
            found.append(model)
    if not found and key:
        tail = key.rsplit("/", 1)[-1]
        found = [original for lowered, original in ids.items() if tail and tail in lowered]
    return found[:3]
