"""Read a model's config.json and checkpoint headers from the Hugging Face Hub (or its cache).

Online, one ``model_info`` call (``GET /api/models/{repo}/revision/{rev}``) resolves the revision to a
commit and lists the repository's files; ``hf_hub_download`` fetches config.json into the standard cache
(so refs/ and snapshots/ look exactly as vLLM leaves them); the safetensors headers come from
``HfApi.parse_safetensors_file_metadata`` (HTTP range requests, no tensor data), or straight from the
snapshot folder when the weights are already in the cache (a vLLM pod's volume). Offline, or when the Hub
cannot be reached, only the cache is read. Every failure leaves as a :mod:`planner.errors` exception.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
    SafetensorsParsingError,
)
from huggingface_hub.hf_api import ModelInfo

from planner.errors import InvalidModelConfigError, ModelResolutionError
from planner.hub.budget import budget_scope, current_budget
from planner.hub.progress import NullProgress, ResolveProgress
from planner.hub.settings import HubSettings
from planner.hub.store import load_summary, save_summary
from planner.hub.translate import Target, translate
from planner.models.checkpoint import (
    SAFETENSORS_INDEX,
    CheckpointInfo,
    SafetensorsHeader,
    TensorMeta,
    filter_by_index,
    index_total_size,
    read_json_file,
    read_safetensors_header,
    select_weight_files,
    summarize_checkpoint,
)

R = TypeVar("R")

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_HEADER_WORKERS = 8
_OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".gguf", ".ckpt")


class _NoBar:
    """A do-nothing progress bar for huggingface_hub downloads: our own display (or none) is used."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: float | None = 1) -> None:
        return None

    def close(self) -> None:
        return None


# huggingface_hub grew ``tqdm_class`` (hf_hub_download) and ``timeout`` (parse_safetensors_file_metadata)
# after 0.24, the oldest release pyproject allows; pass them only where they exist.
_DOWNLOAD_EXTRA: dict[str, Any] = (
    {"tqdm_class": cast(Any, _NoBar)} if "tqdm_class" in inspect.signature(hf_hub_download).parameters else {}
)
_HEADER_TIMEOUT = "timeout" in inspect.signature(HfApi.parse_safetensors_file_metadata).parameters


@dataclass
class ConfigFetch:
    """config.json of one commit, and what is known about the repository's files there."""

    config: dict[str, Any]
    commit: str
    snapshot_dir: Path
    online: bool  # the Hub answered (False: served from the cache only)
    siblings: list[str] | None = None  # files of the repository at the commit (None: not listed)
    warnings: list[str] = field(default_factory=list)


class HubReader:
    """Fetches one repository at one revision (a branch, tag or commit; None = main)."""

    def __init__(
        self,
        repo_id: str,
        revision: str | None,
        settings: HubSettings,
        *,
        refresh: bool = False,
        progress: ResolveProgress | None = None,
    ) -> None:
        self.repo_id = repo_id
        self.revision = revision
        self.settings = settings
        self.refresh = refresh
        self.progress: ResolveProgress = progress if progress is not None else NullProgress()
        self.api = HfApi(endpoint=settings.endpoint, token=settings.token)
        self.license: str | None = None

    # -- plumbing ---------------------------------------------------------------------------------

    def _target(self, filename: str | None = None, revision: str | None = None) -> Target:
        return Target(self.repo_id, revision or self.revision, self.settings, filename=filename, license=self.license)

    def _call(self, target: Target, fn: Callable[[], R]) -> R:
        try:
            return fn()
        except ModelResolutionError:
            raise
        except Exception as error:  # the boundary to huggingface_hub: every failure gets our type
            raise translate(error, target) from error

    def _download(self, filename: str, revision: str, *, local_only: bool = False, force: bool = False) -> Path:
        def fetch() -> str:
            return cast(
                str,
                hf_hub_download(
                    self.repo_id,
                    filename,
                    revision=revision,
                    cache_dir=str(self.settings.cache_dir),
                    token=self.settings.token,
                    endpoint=self.settings.endpoint,
                    local_files_only=local_only,
                    force_download=force,
                    etag_timeout=self.settings.request_timeout,
                    **_DOWNLOAD_EXTRA,
                ),
            )

        return Path(self._call(self._target(filename, revision), fetch))

    def _model_info(self, revision: str | None) -> ModelInfo:
        return self.api.model_info(
            self.repo_id, revision=revision, timeout=self.settings.request_timeout, token=self.settings.token
        )

    # -- config.json ------------------------------------------------------------------------------

    def fetch_config(self) -> ConfigFetch:
        if self.settings.offline:
            return self._config_from_cache(unreachable=None)
        self.progress.step(f"Reading {self.repo_id} from {self.settings.endpoint}")
        target = self._target("config.json")
        try:
            info: ModelInfo | None = self._model_info(self.revision)
        except (GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError) as error:
            raise translate(error, target) from error
        except HfHubHTTPError as error:
            status = getattr(getattr(error, "response", None), "status_code", None)
            if status == 404:
                info = None  # a mirror without the /api/models endpoint: list files by probing
            elif status in (401, 403):
                raise translate(error, target) from error
            else:
                return self._config_from_cache(unreachable=error)
        except (httpx.TransportError, OSError, OfflineModeIsEnabled) as error:
            return self._config_from_cache(unreachable=error)
        if info is not None:
            self.license = _license_of(info)
        path = self._download("config.json", self.revision or "main", force=self.refresh)
        commit = _commit_of(path, info)
        if info is not None and info.sha and info.sha != commit:
            info = self._call(target, lambda: self._model_info(commit))  # the branch moved in between
        try:
            config = read_json_file(path, what="config.json")
        except ModelResolutionError:
            # A corrupted cache entry (disk trouble, a hand edit): fetch it again, atomically replaced.
            path = self._download("config.json", commit, force=True)
            try:
                config = read_json_file(path, what="config.json")
            except ModelResolutionError as error:
                raise InvalidModelConfigError(
                    f"config.json of {self.repo_id!r} (commit {commit}) is not a valid JSON object: {error}"
                ) from None
        siblings = None if info is None or info.siblings is None else [s.rfilename for s in info.siblings]
        return ConfigFetch(config, commit, path.parent, online=True, siblings=siblings)

    def _config_from_cache(self, *, unreachable: BaseException | None) -> ConfigFetch:
        revision = self.revision or "main"
        try:
            path = self._download("config.json", revision, local_only=True)
        except ModelResolutionError as error:
            if unreachable is None:
                raise
            raise translate(unreachable, self._target("config.json")) from error
        commit = _commit_of(path, None)
        try:
            config = read_json_file(path, what="cached config.json")
        except ModelResolutionError as error:
            raise ModelResolutionError(
                f"The cached config.json of {self.repo_id!r} is corrupted: {error}",
                model=self.repo_id,
                hint=f"Run again with network access and --refresh, or delete {path}.",
            ) from None
        warnings = []
        if unreachable is not None:
            warnings.append(
                f"The Hub at {self.settings.endpoint} could not be reached ({type(unreachable).__name__}); "
                f"using the cached copy of {self.repo_id} (commit {commit[:12]})."
            )
        return ConfigFetch(config, commit, path.parent, online=False, warnings=warnings)

    # -- weights ----------------------------------------------------------------------------------

    def fetch_checkpoint(
        self, fetched: ConfigFetch, *, num_layers: int | None
    ) -> tuple[CheckpointInfo | None, list[str]]:
        """Exact checkpoint bytes of the commit (None: no safetensors weights to read)."""
        if not self.refresh:
            stored = load_summary(self.settings, self.repo_id, fetched.commit)
            if stored is not None:
                return stored, []
        if not fetched.online:
            return self._checkpoint_from_snapshot(fetched, num_layers=num_layers)
        names = fetched.siblings if fetched.siblings is not None else self._probe_weight_names(fetched.commit)
        candidates, index_name = select_weight_files(names)
        if not candidates:
            others = sorted(n for n in names if n.endswith(_OTHER_WEIGHTS))
            return None, [_no_safetensors(self.repo_id, fetched.commit, others)]
        where = f"{self.repo_id} (commit {fetched.commit[:12]})"
        if index_name is not None:
            index = self._read_index(index_name, fetched.commit)
            candidates = filter_by_index(candidates, index, where=where)
        budget = current_budget()
        if budget is not None:
            budget.check_shards(len(candidates))  # before one header request is made
        headers = self._read_headers(candidates, fetched.commit, fetched.snapshot_dir)
        info = summarize_checkpoint(headers, config=fetched.config, num_layers=num_layers)
        save_summary(self.settings, self.repo_id, fetched.commit, info)
        return info, []

    def _read_index(self, index_name: str, commit: str) -> dict[str, Any]:
        path = self._download(index_name, commit, force=self.refresh)
        try:
            return read_json_file(path, what=index_name)
        except ModelResolutionError:
            path = self._download(index_name, commit, force=True)  # corrupted cache entry: fetch again
            return read_json_file(path, what=index_name)

    def _probe_weight_names(self, commit: str) -> list[str]:
        """Weight files of a repository whose mirror has no file listing API."""
        try:
            index = self._read_index(SAFETENSORS_INDEX, commit)
        except ModelResolutionError as error:
            if not isinstance(error.__cause__, EntryNotFoundError):
                raise
        else:
            weight_map = index.get("weight_map")
            shards = sorted({str(v) for v in weight_map.values()}) if isinstance(weight_map, dict) else []
            return [SAFETENSORS_INDEX, *shards]
        target = self._target("model.safetensors", commit)
        exists = self._call(
            target,
            lambda: self.api.file_exists(self.repo_id, "model.safetensors", revision=commit, token=self.settings.token),
        )
        return ["model.safetensors"] if exists else []

    def _read_headers(self, names: Sequence[str], commit: str, snapshot: Path) -> list[SafetensorsHeader]:
        local = {n: snapshot / n for n in names if (snapshot / n).is_file()}
        remote = [n for n in names if n not in local]
        headers: dict[str, SafetensorsHeader] = {n: read_safetensors_header(p) for n, p in local.items()}
        if remote:
            self.progress.files(f"Reading safetensors headers of {self.repo_id}", len(remote))
            workers = min(_HEADER_WORKERS, len(remote))
            budget = current_budget()  # (context variables do not follow work into pool threads)

            def read(name: str) -> SafetensorsHeader:
                with budget_scope(budget):
                    return self._remote_header(name, commit)

            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kv-planner-headers") as pool:
                for header in pool.map(read, remote):
                    headers[header.filename] = header
        return [headers[n] for n in names]

    def _remote_header(self, name: str, commit: str) -> SafetensorsHeader:
        def fetch() -> SafetensorsHeader:
            try:
                extra: dict[str, Any] = {"timeout": self.settings.request_timeout} if _HEADER_TIMEOUT else {}
                metadata = self.api.parse_safetensors_file_metadata(
                    self.repo_id, name, revision=commit, token=self.settings.token, **extra
                )
            except SafetensorsParsingError as error:
                raise ModelResolutionError(
                    f"{name} of {self.repo_id!r} (commit {commit[:12]}) has an invalid safetensors header: {error}",
                    model=self.repo_id,
                ) from None
            tensors = {
                key: TensorMeta(str(t.dtype), tuple(t.shape), int(t.data_offsets[0]), int(t.data_offsets[1]))
                for key, t in metadata.tensors.items()
            }
            return SafetensorsHeader(name, tensors)

        header = self._call(self._target(name, commit), fetch)
        self.progress.advance()
        return header

    def _checkpoint_from_snapshot(
        self, fetched: ConfigFetch, *, num_layers: int | None
    ) -> tuple[CheckpointInfo | None, list[str]]:
        """Weights of a commit from the cache alone: headers of cached shards, or the index's total."""
        snapshot = fetched.snapshot_dir
        names = [p.name for p in snapshot.iterdir() if p.is_file()]
        candidates, index_name = select_weight_files(names)
        where = f"cached {self.repo_id} (commit {fetched.commit[:12]})"
        index: dict[str, Any] | None = None
        if index_name is not None:
            index = read_json_file(snapshot / index_name, what=f"cached {index_name}")
            listed = weight_map_files(index)
            indexed = bool(listed) and listed <= set(candidates)
            candidates = filter_by_index(candidates, index, where=where) if indexed else []
        if candidates:
            headers = [read_safetensors_header(snapshot / n) for n in candidates]
            info = summarize_checkpoint(headers, config=fetched.config, num_layers=num_layers)
            save_summary(self.settings, self.repo_id, fetched.commit, info)
            return info, []
        total = index_total_size(index) if index is not None else None
        if total is not None:
            note = (
                f"Weights of {self.repo_id} are not in the cache; total bytes taken from the cached "
                f"{index_name} (no per-dtype breakdown)."
            )
            return CheckpointInfo(format="safetensors-index", exact=True, total_bytes=total), [note]
        return None, [
            f"The safetensors headers of {self.repo_id} (commit {fetched.commit[:12]}) are not in the cache; "
            "weights are estimated from the architecture. Run once with network access for exact bytes."
        ]


def weight_map_files(index: dict[str, Any]) -> set[str]:
    weight_map = index.get("weight_map")
    return {str(v) for v in weight_map.values()} if isinstance(weight_map, dict) else set()


def _commit_of(path: Path, info: ModelInfo | None) -> str:
    """The commit a cached file belongs to: its snapshots/<sha>/ folder."""
    name = path.parent.name
    if _COMMIT.match(name):
        return name
    if info is not None and info.sha:
        return info.sha
    return name


def _license_of(info: ModelInfo) -> str | None:
    card = info.card_data
    value = getattr(card, "license", None) if card is not None else None
    if isinstance(value, str) and value:
        name = getattr(card, "license_name", None)
        return name if value == "other" and isinstance(name, str) and name else value
    for tag in info.tags or []:
        if tag.startswith("license:"):
            return tag.split(":", 1)[1]
    return None


def _no_safetensors(repo_id: str, commit: str, others: list[str]) -> str:
    found = f" (it has {', '.join(others[:3])}{' ...' if len(others) > 3 else ''})" if others else ""
    return (
        f"{repo_id} (commit {commit[:12]}) has no safetensors weights{found}; weight bytes are estimated "
        "from the architecture."
    )
