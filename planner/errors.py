"""The one exception tree of kv-planner.

Every error kv-planner raises on purpose derives from :class:`KvPlannerError`, and mixes in the
builtin that says what kind of fault it is, so callers can catch either::

    KvPlannerError
    ├── PlannerInputError (ValueError)            bad input from the user: exit 2 / HTTP 4xx
    │   ├── UnknownGPUError (LookupError)         GPU name not in the catalog ("did you mean")
    │   ├── UnknownModelError (LookupError)       model id not in the catalog / not resolvable
    │   ├── UnknownVllmVersionError               version string not understood or not supported
    │   ├── InvalidModelConfigError               a config.json field is missing or malformed
    │   │   └── UnsupportedArchitectureError      a design vLLM cannot serve (names the field)
    │   ├── HfOverridesError                      --hf-overrides kv-planner cannot plan as vLLM applies it
    │   ├── InvalidArgumentError                  a vLLM flag value vLLM itself would refuse
    │   ├── ManifestError                         a Kubernetes manifest that cannot be read
    │   ├── PolicyError                           a policy file that does not validate
    │   ├── InputCapError                         untrusted input over one of its named bounds
    │   ├── UnreadableScriptError                 a container's shell script kv-planner does not read
    │   └── WorkloadProfileError                  a request-length profile that cannot be used
    ├── CapacityError                             the model cannot be served with these settings
    ├── CatalogDataError (RuntimeError)           an embedded catalog file does not validate (a packaging bug)
    ├── ModelResolutionError (OSError)            reading a model from disk or the Hub failed
    │   ├── GatedModelError (PermissionError)     gated/private repo, token missing or refused
    │   ├── ModelNotFoundError (FileNotFoundError) repo, revision or file does not exist
    │   ├── HubUnavailableError (ConnectionError) network down, offline without cache
    │   ├── RepoNotAllowedError (PermissionError) the policy's allow-list does not name the repo
    │   └── ResolutionTimeoutError (TimeoutError) the lookup budget ran out
    └── ScrapeError (OSError)                     a /metrics page could not be fetched or parsed
        ├── ExpositionError                       the page is not valid Prometheus text (promtool would refuse it)
        └── ExpositionLimitError                  the page exceeds a reader's bounds (samples, label length)

Errors carry structured context (``field``, ``suggestions``, ``hint``) so the CLI and the webhook
can render an actionable one-line message without parsing strings.
"""

from __future__ import annotations

from collections.abc import Sequence


class KvPlannerError(Exception):
    """Root of every error kv-planner raises on purpose."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n{self.hint}"
        return self.message


class PlannerInputError(KvPlannerError, ValueError):
    """The user gave input kv-planner cannot use. CLI exit code 2, HTTP 4xx."""


class _LookupFailed(PlannerInputError, LookupError):
    """A name was looked up in a catalog and not found."""

    kind = "name"

    def __init__(self, name: str, suggestions: Sequence[str] = (), *, hint: str | None = None) -> None:
        self.name = name
        self.suggestions = list(suggestions)
        message = f"Unknown {self.kind} {name!r}."
        if self.suggestions:
            message += " Did you mean " + " or ".join(repr(s) for s in self.suggestions[:3]) + "?"
        super().__init__(message, hint=hint)


class UnknownGPUError(_LookupFailed):
    kind = "GPU"


class AmbiguousGPUError(UnknownGPUError):
    """A GPU name that matches several catalog cards (``a100``: 40 GB and 80 GB); lists every candidate."""

    def __init__(self, name: str, candidates: Sequence[str], *, hint: str | None = None) -> None:
        self.name = name
        self.suggestions = list(candidates)
        message = f"Ambiguous GPU {name!r}: it names {len(self.suggestions)} cards: {', '.join(self.suggestions)}."
        PlannerInputError.__init__(self, message, hint=hint)


class UnknownModelError(_LookupFailed):
    kind = "model"


class UnknownVllmVersionError(PlannerInputError):
    """A vLLM version string that is not X.Y.Z or is outside the releases kv-planner knows."""


class InvalidModelConfigError(PlannerInputError):
    """A model config (config.json or catalog entry) with a missing or malformed field."""

    def __init__(self, message: str, *, field: str | None = None, hint: str | None = None) -> None:
        self.field = field
        super().__init__(message, hint=hint)


class UnsupportedArchitectureError(InvalidModelConfigError):
    """A model design kv-planner (or vLLM) cannot serve; the message names the deciding field."""


class HfOverridesError(PlannerInputError):
    """``--hf-overrides`` kv-planner cannot plan as vLLM applies it (not JSON, not an object, past kv-planner's
    bounds, a key whose effect it does not model, a value vLLM would fail on): the message says which and why."""


class InvalidArgumentError(PlannerInputError):
    """A vLLM flag value that vLLM itself would refuse (message as close to vLLM's as possible)."""

    def __init__(self, message: str, *, flag: str | None = None, hint: str | None = None) -> None:
        self.flag = flag
        super().__init__(message, hint=hint)


class ManifestError(PlannerInputError):
    """A Kubernetes manifest (or one document of it) that cannot be read."""


class PolicyError(PlannerInputError):
    """A policy (Helm values / ConfigMap / --policy file) that does not validate."""


class InputCapError(PlannerInputError):
    """Input from an untrusted author (a manifest) over one of its named bounds (docs/security.md).

    ``code`` is the reason code of the bound (a ``planner.policy.codes.Code`` value), so the webhook and
    ``planner check`` can name it; ``limit`` is the bound that was exceeded.
    """

    def __init__(self, message: str, *, code: str, limit: int, hint: str | None = None) -> None:
        self.code = code
        self.limit = limit
        super().__init__(message, hint=hint)


class UnreadableScriptError(PlannerInputError):
    """A shell script kv-planner does not read: syntax the shell itself would reject (an unbalanced ``(``), a
    construct it does not follow, or nesting past its bound (planner.k8s.shell_scan). The script's commands
    stay unknown: the container is "cannot read" (KVP037), never guessed."""


class WorkloadProfileError(PlannerInputError):
    """A request-length profile (percentiles, histogram file, metrics page) that cannot be used."""


class CapacityError(KvPlannerError):
    """The model cannot be served with the given settings (weights or one sequence do not fit)."""


class CatalogDataError(KvPlannerError, RuntimeError):
    """An embedded catalog file (GPUs, instance types, models) that does not validate.

    Never the user's fault: the package ships a broken catalog. The CLI reports it as an internal error.
    """


class ModelResolutionError(KvPlannerError, OSError):
    """Reading a model's config or weights from disk or from the Hugging Face Hub failed."""

    def __init__(self, message: str, *, model: str | None = None, hint: str | None = None) -> None:
        self.model = model
        super().__init__(message, hint=hint)


class GatedModelError(ModelResolutionError, PermissionError):
    """The repository is gated or private and no (accepted) token was given."""


class ModelNotFoundError(ModelResolutionError, FileNotFoundError):
    """The repository, revision or file does not exist."""


class HubUnavailableError(ModelResolutionError, ConnectionError):
    """The Hub cannot be reached (network down, or offline mode without a cached copy)."""


class RepoNotAllowedError(ModelResolutionError, PermissionError):
    """The policy's ``modelLookup.allowRepos`` does not name this repository: it is not looked up."""


class ResolutionTimeoutError(ModelResolutionError, TimeoutError):
    """The lookup did not finish within its time budget."""


class ScrapeError(KvPlannerError, OSError):
    """A vLLM /metrics page (or Prometheus query) could not be fetched or parsed."""


class ExpositionError(ScrapeError):
    """A /metrics page that is not a valid Prometheus text exposition where kv-planner reads it."""


class ExpositionLimitError(ScrapeError):
    """A /metrics page beyond a reader's bounds; ``reason`` names it (``too_many_samples``, ``label_too_long``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
