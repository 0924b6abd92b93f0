"""Resolve a model named the way vLLM names it to its config and exact weight bytes.

``resolve_model`` accepts what ``vllm serve`` accepts: a local directory (or a file in it), a Hugging
Face repository id with an optional ``revision`` (branch, tag or commit). The order is:

1. an existing local path: config.json + safetensors headers of that directory;
2. the built-in catalog (:func:`planner.models.catalog.lookup_model`), unless a revision is pinned or
   ``refresh`` asks for the Hub;
3. the Hugging Face Hub through ``huggingface_hub`` (config via the cache-aware download API, weight bytes
   via the safetensors metadata API), or its local cache when offline or when the Hub is unreachable.

With ``timeout`` (the webhook's budget), the Hub lookup runs in a background thread and the call raises
:class:`~planner.errors.ResolutionTimeoutError` when the budget is spent; the lookup finishes anyway and
fills the in-memory memo, so the next call for that model answers at once. Every failure is an error of
:mod:`planner.errors`: :class:`~planner.errors.ModelResolutionError` subclasses for "could not read"
(callers on the admission path treat them as "model not resolved: not checked") and
:class:`~planner.errors.PlannerInputError` subclasses for bad names and configs.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from planner.errors import (
    InvalidArgumentError,
    InvalidModelConfigError,
    ModelNotFoundError,
    ModelResolutionError,
    RepoNotAllowedError,
    UnknownModelError,
)
from planner.hub.local import looks_like_path
from planner.hub.memo import Memo, SingleFlight, run_with_deadline, ttl_for
from planner.hub.settings import HubSettings
from planner.models.spec import ModelSpec

# A catalog id never reads a checkpoint: the safetensors reader, the config parser and the local-path
# loader are imported by the paths that use them (tests/cli/test_lazy_commands.py).
if TYPE_CHECKING:
    from planner.hub.progress import ResolveProgress
    from planner.hub.settings import HubLimits
    from planner.models.checkpoint import CheckpointInfo

Source = Literal["local", "catalog", "hub", "hub-cache"]


@dataclass(frozen=True)
class ResolvedModel:
    """A model's architecture and checkpoint, and where they were read from.

    A dataclass, not a pydantic model: it is built from already validated parts and never crosses a wire,
    and as a pydantic model its ``checkpoint`` field made every catalog lookup build the checkpoint
    reader's models.
    """

    name: str  # the name or path as given
    spec: ModelSpec  # checkpoint_bytes/parameters set when the checkpoint was read exactly
    source: Source
    checkpoint: CheckpointInfo | None = None  # None for catalog entries (their spec carries checkpoint_bytes)
    revision: str | None = None  # commit sha the files came from (Hub)
    location: str | None = None  # directory config.json was read from
    warnings: list[str] = field(default_factory=list)
    # config.json as read (local path, Hub), for what vLLM changes in it (--hf-overrides); None for the catalog
    config: dict[str, Any] | None = None

    @property
    def weights_exact(self) -> bool:
        if self.checkpoint is not None:
            return self.checkpoint.exact
        return self.spec.checkpoint_bytes is not None


_MEMO: Memo[ResolvedModel] = Memo()
_FLIGHTS: SingleFlight[ResolvedModel] = SingleFlight()


def clear_resolution_cache() -> None:
    """Forget every in-memory lookup (the on-disk Hugging Face cache is kept)."""
    _MEMO.clear()


def resolve_model(
    name_or_path: str,
    *,
    revision: str | None = None,
    token: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    refresh: bool = False,
    timeout: float | None = None,
    progress: ResolveProgress | None = None,
    local: bool = True,
    hub_allowed: Callable[[str], bool] | None = None,
    limits: HubLimits | None = None,
) -> ResolvedModel:
    """Resolve ``name_or_path`` (local path, catalog id or Hub repo id) to a :class:`ResolvedModel`.

    ``token``/``cache_dir``/``offline`` default to ``HF_TOKEN``, ``HF_HUB_CACHE``/``HF_HOME`` and
    ``HF_HUB_OFFLINE`` read now; ``HF_ENDPOINT`` picks a mirror. ``refresh`` skips the catalog and every
    cache (files are downloaded again). ``timeout`` bounds the wait in seconds (webhook path).
    ``local=False`` never touches the local file system for the name (the webhook: a name is untrusted
    input, and ``etc/passwd`` must not be read relative to the process's directory); ``hub_allowed``
    decides which repo ids may be fetched from the Hub (the policy's allow-list); ``limits`` bounds the
    Hub lookup (planner.hub.budget: requests, bytes, file sizes, shards, wall time, concurrency, disk).
    """
    name = name_or_path.strip()
    if not name:
        raise InvalidArgumentError("The model name is empty.", flag="--model")
    if timeout is not None and timeout <= 0:
        raise InvalidArgumentError(f"The model lookup timeout must be positive, not {timeout}.")
    if local:
        path = Path(name).expanduser()
        if _exists(path):
            return _resolve_local(name, path, revision=revision)
        if looks_like_path(name):
            raise ModelNotFoundError(f"{name}: no such file or directory.", model=name)
    elif looks_like_path(name):
        raise UnknownModelError(name, hint="local model paths are not read here")
    settings = HubSettings.from_env(token=token, cache_dir=cache_dir, offline=offline)
    if refresh and settings.offline:
        raise InvalidArgumentError(
            "--refresh needs the Hub, but offline mode is on (HF_HUB_OFFLINE).", flag="--refresh"
        )
    # The token is part of the key (as a digest, never kept in clear) so that an answer obtained with one
    # token, or a "gated" refusal without one, is not handed to a caller with other credentials.
    token_id = hashlib.sha256(settings.token.encode()).hexdigest()[:16] if settings.token else None
    key: Hashable = (
        settings.endpoint,
        str(settings.cache_dir),
        name,
        revision or "main",
        settings.offline,
        token_id,
    )
    if not refresh:
        # Before the catalog: only Hub answers are memoized, and a catalog miss costs milliseconds
        # (it computes "did you mean" suggestions), too much to repeat on every admission.
        hit = _MEMO.get(key)
        if hit is not None:
            return hit
    unknown: UnknownModelError | None = None
    if revision is None and not refresh:
        spec, unknown = _from_catalog(name)
        if spec is not None:
            return ResolvedModel(name=name, spec=spec, source="catalog", revision=_catalog_revision(spec))
    repo_id = _repo_id(name, unknown)
    if hub_allowed is not None and not hub_allowed(repo_id):
        raise RepoNotAllowedError(f"{repo_id} is not in the policy's modelLookup.allowRepos", model=repo_id)

    def job() -> ResolvedModel:
        return _resolve_hub(key, repo_id, revision, settings, refresh=refresh, progress=progress, limits=limits)

    if timeout is None:
        return job()
    concurrent = limits.max_concurrent if limits is not None else None
    return run_with_deadline(_FLIGHTS, key, job, timeout, what=repo_id, limit=concurrent)


def _resolve_local(name: str, path: Path, *, revision: str | None) -> ResolvedModel:
    from planner.hub.local import load_local
    from planner.models.checkpoint import read_local_checkpoint
    from planner.models.config import parse_config

    local = load_local(path)
    spec = parse_config(local.config, model_id=name)
    checkpoint = read_local_checkpoint(local.directory, config=local.config, num_layers=spec.num_layers)
    warnings = []
    if revision is not None:
        warnings.append(f"--revision {revision} is ignored for the local path {name}.")
    if checkpoint is None:
        warnings.append(
            f"{local.directory} has no safetensors files; weight bytes are estimated from the architecture."
        )
    return _assemble(
        name,
        spec,
        checkpoint,
        source="local",
        revision=None,
        location=str(local.directory),
        warnings=warnings,
        config=local.config,
    )


def _resolve_hub(
    key: Hashable,
    repo_id: str,
    revision: str | None,
    settings: HubSettings,
    *,
    refresh: bool,
    progress: ResolveProgress | None,
    limits: HubLimits | None = None,
) -> ResolvedModel:
    # Imported on the first Hub lookup: huggingface_hub and httpx take about a second to import, which
    # local paths and catalog ids never need (the CLI starts faster).
    from planner.hub.budget import LookupBudget, bound_cache, budget_scope, install
    from planner.hub.remote import HubReader
    from planner.models.config import parse_config

    budget = None
    if limits is not None and install():
        budget = LookupBudget(limits, repo_id)
    try:
        with budget_scope(budget):
            reader = HubReader(repo_id, revision, settings, refresh=refresh, progress=progress)
            fetched = reader.fetch_config()
            spec = parse_config(fetched.config, model_id=repo_id)
            checkpoint, notes = reader.fetch_checkpoint(fetched, num_layers=spec.num_layers)
        result = _assemble(
            repo_id,
            spec,
            checkpoint,
            source="hub" if fetched.online else "hub-cache",
            revision=fetched.commit,
            location=str(fetched.snapshot_dir),
            warnings=[*fetched.warnings, *notes],
            config=fetched.config,
        )
    except (ModelResolutionError, InvalidModelConfigError) as error:
        _MEMO.put_failure(key, error)
        raise
    finally:
        if limits is not None:
            bound_cache([settings.cache_dir, settings.assets_dir / "kv-planner"], limits.max_cache_bytes)
    _MEMO.put(key, result, ttl_for(revision))
    return result


def _assemble(
    name: str,
    spec: ModelSpec,
    checkpoint: CheckpointInfo | None,
    *,
    source: Source,
    revision: str | None,
    location: str | None,
    warnings: list[str],
    config: dict[str, Any] | None = None,
) -> ResolvedModel:
    from planner.models.checkpoint import CheckpointInfo
    from planner.models.weights import estimate_weights

    if checkpoint is None:
        estimate = estimate_weights(spec, dtype=spec.dtype)
        checkpoint = CheckpointInfo(
            format="estimate",
            exact=False,
            total_bytes=estimate.max_bytes,
            parameters=estimate.parameters,
            logical_parameters=estimate.parameters,
        )
    else:
        update: dict[str, int] = {"checkpoint_bytes": checkpoint.total_bytes}
        if checkpoint.logical_parameters is not None:
            update["parameters"] = checkpoint.logical_parameters
        spec = spec.model_copy(update=update)
    return ResolvedModel(
        name=name,
        spec=spec,
        checkpoint=checkpoint,
        source=source,
        revision=revision,
        location=location,
        warnings=warnings,
        config=config,
    )


# The Hub's repository id rules (huggingface_hub validate_repo_id): [namespace/]name, each part 1-96 of
# letters, digits, "-", "_", ".", not starting or ending with "-" or ".", and no "--" or "..". Checked
# without a regular expression: the name is untrusted input on the admission path.
_REPO_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def _repo_part(part: str) -> bool:
    return 1 <= len(part) <= 96 and part[0] not in "-." and part[-1] not in "-." and set(part) <= _REPO_CHARS


def _repo_id(name: str, unknown: UnknownModelError | None) -> str:
    parts = name.split("/")
    if len(parts) > 2 or "--" in name or ".." in name or not all(_repo_part(p) for p in parts):
        raise UnknownModelError(
            name,
            unknown.suggestions if unknown is not None else (),
            hint="It is not a local path, not in the built-in catalog, and not a Hugging Face repository id "
            "(org/name).",
        )
    return name


def _from_catalog(name: str) -> tuple[ModelSpec | None, UnknownModelError | None]:
    # Imported on first use: the catalog loads its YAML data, which local paths and Hub ids never need.
    try:
        catalog = importlib.import_module("planner.models.catalog")
    except ModuleNotFoundError:  # a build without the catalog: go straight to the Hub
        return None, None
    lookup: Callable[[str], ModelSpec] = catalog.lookup_model
    try:
        return lookup(name), None
    except UnknownModelError as error:
        return None, error


def _catalog_revision(spec: ModelSpec) -> str | None:
    return spec.source.revision if spec.source is not None else None


def _exists(path: Path) -> bool:
    """``path.exists()``, False for a name the file system refuses (ENAMETOOLONG: a 300-character model
    name raised OSError there, an internal error instead of "not found")."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False
