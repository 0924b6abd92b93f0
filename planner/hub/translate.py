"""huggingface_hub / HTTP exceptions -> kv-planner's error tree, with a message that says what to do.

huggingface_hub raises ``GatedRepoError`` (a subclass of ``RepositoryNotFoundError``),
``RevisionNotFoundError``, ``EntryNotFoundError``, ``LocalEntryNotFoundError`` (offline or unreachable,
not cached), ``OfflineModeIsEnabled`` and ``HfHubHTTPError``; transport problems surface as httpx errors
(huggingface_hub 1.x) or ``requests``/``OSError`` (0.x). Each becomes one :mod:`planner.errors` class
so the CLI picks an exit code and the webhook answers "model not resolved: not checked".
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from huggingface_hub.errors import (
    EntryNotFoundError,
    FileMetadataError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from planner.errors import (
    GatedModelError,
    HubUnavailableError,
    ModelNotFoundError,
    ModelResolutionError,
    ResolutionTimeoutError,
)
from planner.hub.settings import HubSettings


@dataclass(frozen=True)
class Target:
    """What was being fetched, for the message."""

    repo_id: str
    revision: str | None
    settings: HubSettings
    filename: str | None = None
    license: str | None = None  # from the model card, to name it for gated repos

    @property
    def where(self) -> str:
        rev = f" at revision {self.revision!r}" if self.revision else ""
        return f"{self.repo_id!r}{rev}"


def _status(error: HfHubHTTPError) -> int | None:
    response = getattr(error, "response", None)
    return getattr(response, "status_code", None)


def _server_message(error: HfHubHTTPError) -> str | None:
    message = getattr(error, "server_message", None)
    return message.strip() if isinstance(message, str) and message.strip() else None


def gated_error(target: Target, *, token_refused: bool) -> GatedModelError:
    url = target.settings.model_url(target.repo_id)
    license_text = f"the {target.license} license" if target.license else "the model's license"
    if token_refused:
        message = f"Model {target.repo_id!r} is gated and the Hugging Face token used has no access to it."
        hint = (
            f"Accept {license_text} at {url} with the account that owns the token (some authors approve "
            "requests by hand), or use a token of an account that has access."
        )
    else:
        message = f"Model {target.repo_id!r} is gated: reading its files needs a Hugging Face token."
        hint = (
            f"Accept {license_text} at {url}, create a read token at "
            f"{target.settings.endpoint}/settings/tokens, then pass --token or set HF_TOKEN."
        )
    return GatedModelError(message, model=target.repo_id, hint=hint)


def translate(error: BaseException, target: Target) -> ModelResolutionError:
    """The kv-planner error for a failure of huggingface_hub while fetching ``target``."""
    if isinstance(error, ModelResolutionError):
        return error
    repo = target.repo_id
    token_sent = target.settings.token is not None
    if isinstance(error, GatedRepoError):
        return gated_error(target, token_refused=_status(error) == 403)
    if isinstance(error, RepositoryNotFoundError):
        hint = (
            "Check the id (org/name as on the Hub)."
            if token_sent
            else "Check the id (org/name as on the Hub); if the repository is private, pass --token or set HF_TOKEN."
        )
        return ModelNotFoundError(
            f"Model repository {repo!r} was not found on {target.settings.endpoint}.", model=repo, hint=hint
        )
    if isinstance(error, RevisionNotFoundError):
        return ModelNotFoundError(
            f"Revision {target.revision!r} of {repo!r} does not exist.",
            model=repo,
            hint="Use a branch, a tag or a full commit sha (see the repository's 'Files and versions' page).",
        )
    if isinstance(error, (LocalEntryNotFoundError, OfflineModeIsEnabled)):
        return _unavailable(error, target)
    if isinstance(error, EntryNotFoundError):
        name = target.filename or "the file"
        return ModelNotFoundError(f"{repo!r}{_rev(target)} has no {name}.", model=repo)
    if isinstance(error, FileMetadataError):
        return HubUnavailableError(
            f"The server at {target.settings.endpoint} did not answer like a Hugging Face Hub ({error}).",
            model=repo,
            hint="Check HF_ENDPOINT and any proxy between this machine and the Hub.",
        )
    if isinstance(error, HfHubHTTPError):
        status = _status(error)
        detail = _server_message(error)
        suffix = f": {detail}" if detail else ""
        if status in (401, 403):
            return GatedModelError(
                f"The Hub refused access to {repo!r} (HTTP {status}{suffix}).",
                model=repo,
                hint="Check the token (--token / HF_TOKEN) and its permissions.",
            )
        if status == 404:
            return ModelNotFoundError(f"{repo!r}{_rev(target)}: not found (HTTP 404{suffix}).", model=repo)
        return HubUnavailableError(
            f"The Hub answered HTTP {status} for {repo!r}{suffix}.",
            model=repo,
            hint="The Hub or the HF_ENDPOINT mirror may be down; retry later, or run offline from a cache.",
        )
    if isinstance(error, httpx.TimeoutException):
        return ResolutionTimeoutError(
            f"The Hub at {target.settings.endpoint} did not answer within "
            f"{target.settings.request_timeout:g} s while reading {repo!r}.",
            model=repo,
        )
    if isinstance(error, (httpx.TransportError, OSError, ValueError)):
        return _unavailable(error, target)
    return HubUnavailableError(f"Reading {repo!r} from the Hub failed: {type(error).__name__}: {error}", model=repo)


def _rev(target: Target) -> str:
    return f" at revision {target.revision!r}" if target.revision else ""


def _unavailable(error: BaseException, target: Target) -> HubUnavailableError:
    repo = target.repo_id
    cache = target.settings.cache_dir
    if target.settings.offline or isinstance(error, OfflineModeIsEnabled):
        return HubUnavailableError(
            f"{repo!r}{_rev(target)} is not in the Hugging Face cache {cache} and offline mode is on.",
            model=repo,
            hint=(
                "Run once with network access (or `hf download "
                f"{repo} config.json`) to fill the cache, point HF_HOME / HF_HUB_CACHE at the cache vLLM "
                "uses, or unset HF_HUB_OFFLINE."
            ),
        )
    cause = error.__cause__ or error
    return HubUnavailableError(
        f"Cannot reach the Hub at {target.settings.endpoint} to read {repo!r}{_rev(target)}, and it is not "
        f"in the cache {cache} ({type(cause).__name__}: {cause}).",
        model=repo,
        hint="Check the network, proxy or HF_ENDPOINT mirror, or point HF_HOME / HF_HUB_CACHE at a cache.",
    )
