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
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.datafiles import read_yaml
from planner.errors import CatalogDataError, UnknownModelError
from planner.models.spec import ModelSpec

__all__ = ["DATA_DIR", "all_models", "lookup_model"]

DATA_DIR = Path(__file__).parent / "data"
_VALIDATING = threading.Lock()
_URL_PREFIX = re.compile(r"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/", re.IGNORECASE)


@dataclass
class _Entry:
    """One catalog entry as written, validated into a :class:`ModelSpec` the first time it is used."""

    document: dict[str, Any]
    file: str
    spec: ModelSpec | None = None

    @property
    def id(self) -> str:
        model_id: str = self.document["id"]  # a str: checked when the index was built
        return model_id

    def validated(self) -> ModelSpec:
        if self.spec is None:
            with _VALIDATING:  # one object per entry, also when two webhook threads look it up at once
                if self.spec is None:
                    try:
                        self.spec = ModelSpec.model_validate(self.document)
                    except ValidationError as error:
                        message = f"model catalog {self.file}: {self.id} does not validate:\n{error}"
                        raise CatalogDataError(message) from error
        return self.spec


@dataclass
class _Index:
    """Ids, aliases and short names -> entries. An entry is validated when a lookup returns it (a plan of one
    model does not validate the other ~160: ~2% of a cold `planner recommend`), always into the same
    :class:`ModelSpec` object, which the per-model memos key on (planner/models/memo.py)."""

    entries: list[_Entry]
    by_key: dict[str, _Entry] = field(default_factory=dict)

    def all_specs(self) -> list[ModelSpec]:
        return [entry.validated() for entry in self.entries]


def _key(name: str) -> str:
    text = _URL_PREFIX.sub("", name.strip())
    text = re.sub(r"/(?:tree|blob)/[^/]+.*$", "", text)  # .../tree/main pasted from the browser
    return text.strip("/").lower()


def _load_file(path: Path) -> list[_Entry]:
    """The entries of one file, with the fields the index needs checked (the rest is checked on use)."""
    # Through the folder's JSON snapshot (planner.datafiles): parsing the YAML dominated a cold run.
    data = read_yaml(path, what="model catalog")
    models = data.get("models") if isinstance(data, dict) and set(data) == {"models"} else None
    if not isinstance(models, list) or not models:
        raise CatalogDataError(f"model catalog {path.name} does not validate: it must be a non-empty `models:` list")
    entries = []
    for number, document in enumerate(models, 1):
        model_id = document.get("id") if isinstance(document, dict) else None
        aliases = document.get("aliases", []) if isinstance(document, dict) else None
        if not isinstance(model_id, str) or not (
            isinstance(aliases, list) and all(isinstance(a, str) for a in aliases)
        ):
            raise CatalogDataError(
                f"model catalog {path.name} does not validate: entry {number} needs a string `id` and a list of "
                "string `aliases`"
            )
        entries.append(_Entry(document=document, file=path.name))
    return entries


def build_index(paths: list[Path], *, validate: bool = True) -> _Index:
    """Load catalog files and index ids, aliases and unique repository names.

    Raises :class:`CatalogDataError` when two entries claim one id or alias, or an entry lacks its source,
    and (``validate``) when an entry is not a valid :class:`ModelSpec`; with ``validate=False`` that is
    found when the entry is first used.
    """
    entries: list[_Entry] = []
    for path in sorted(paths):
        entries.extend(_load_file(path))
    index = _Index(entries=entries)
    owner: dict[str, str] = {}
    for entry in entries:
        if entry.document.get("source") is None:
            raise CatalogDataError(f"model catalog: {entry.id} has no source")
        if "/" not in entry.id:
            raise CatalogDataError(f"model catalog: {entry.id} is not a Hugging Face id (org/name)")
        for spelling in (entry.id, *entry.document.get("aliases", [])):
            key = _key(spelling)
            if key in owner:
                raise CatalogDataError(f"model catalog: {spelling!r} names both {owner[key]} and {entry.id}")
            owner[key] = entry.id
            index.by_key[key] = entry
    # Bare repository names ("Qwen2.5-7B-Instruct") when exactly one entry has it and nothing else claims it.
    short: dict[str, list[_Entry]] = {}
    for entry in entries:
        short.setdefault(_key(entry.id).split("/", 1)[1], []).append(entry)
    for name, group in short.items():
        if len(group) == 1 and name not in index.by_key:
            index.by_key[name] = group[0]
    if validate:
        index.all_specs()
    return index


@functools.cache
def _index() -> _Index:
    return build_index(list(DATA_DIR.glob("*.yaml")), validate=False)


def all_models() -> list[ModelSpec]:
    """Every catalog model: the most deployed first (``popular_rank``), then by id."""
    return sorted(_index().all_specs(), key=lambda m: (m.popular_rank is None, m.popular_rank or 0, m.id.lower()))


def lookup_model(model_id: str) -> ModelSpec:
    """The catalog entry for a Hugging Face id or alias (case-insensitive).

    Raises :class:`UnknownModelError` with the closest ids when it is not in the catalog (which does
    not mean the model does not exist: the resolver then asks the Hub).
    """
    index = _index()
    key = _key(model_id) if isinstance(model_id, str) else ""
    entry = index.by_key.get(key)
    if entry is not None:
        return entry.validated()
    raise UnknownModelError(str(model_id), _suggest(key, index))


def _suggest(key: str, index: _Index) -> list[str]:
    ids = {_key(entry.id): entry.id for entry in index.entries}
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
