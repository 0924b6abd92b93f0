"""The policy: what the webhook and ``planner check`` do with what the planner finds.

File format (YAML or JSON, camelCase keys, unknown keys rejected); the Helm chart renders it into a
ConfigMap, ``planner check --policy FILE`` reads the same schema::

    validationAction: Audit        # Enforce | Audit
    mutation: fill                 # off | fill | clamp
    headroom: 0.1                  # 0 <= headroom < 1
    workload: null                 # default request-length profile (planner.workload)
    targetSeqs: null               # fill the smallest --kv-cache-memory-bytes holding N sequences
    defaultGpu: null               # GPU when nothing on the workload says which
    vllmVersion: null              # release assumed when nothing shows the release (null: plan the range)
    onTimeout: deny                # deny | allow: Enforce's answer when a review cannot be decided in time
    modelLookup: {timeoutSeconds: 0.5, offline: false, allowRepos: null}
    limits: {maxContainers: 64, ...}  # input caps (planner.policy.caps)
    namespaces: {team-a: {validationAction: Enforce, mutation: clamp, headroom: 0.2, workload: {...},
                          vllmVersion: 0.19.0}}

Namespace annotations (or labels) ``kv-planner.io/validation-action``, ``kv-planner.io/mutation``,
``kv-planner.io/headroom`` and ``kv-planner.io/workload`` override the file for their namespace; a
workload's own ``kv-planner.io/workload`` annotation overrides both for that workload.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from planner.errors import PlannerInputError, PolicyError, WorkloadProfileError
from planner.policy.caps import InputCaps
from planner.untrusted import load_yaml

ValidationAction = Literal["Enforce", "Audit"]
Mutation = Literal["off", "fill", "clamp"]
OnTimeout = Literal["deny", "allow"]
NS_VALIDATION_ACTION = "kv-planner.io/validation-action"
NS_MUTATION = "kv-planner.io/mutation"
NS_HEADROOM = "kv-planner.io/headroom"
WORKLOAD_ANNOTATION = "kv-planner.io/workload"


class _Camel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


def _check_workload(value: Any) -> Any:
    """Validate a workload profile with planner.workload (the one owner of that schema)."""
    if value is None:
        return None
    # Imported here, not at the top: planner.workload imports numpy (~0.1 s), which a policy without a
    # workload profile (most, and every `planner check` of a plain manifest) never needs.
    from planner.workload import parse_workload

    try:
        parse_workload(value, source="workload")
    except WorkloadProfileError as error:
        raise ValueError(error.message) from None
    return value


class ModelLookup(_Camel):
    timeout_seconds: float = Field(default=0.5, gt=0, le=10, description="budget to resolve an unknown model")
    offline: bool = Field(default=False, description="never reach the Hugging Face Hub from the webhook")
    allow_repos: list[str] | None = Field(
        default=None,
        description="Hub repo id patterns the webhook may look up ('*' matches within one part, e.g. "
        "'meta-llama/*'); null: any repo. A repo outside the list is not looked up (KVP077, not checked).",
        max_length=1000,
    )

    @field_validator("allow_repos")
    @classmethod
    def _patterns(cls, value: list[str] | None) -> list[str] | None:
        for pattern in value or []:
            if not pattern or len(pattern) > 200 or pattern.count("/") > 1:
                raise ValueError(f"{pattern!r} is not a repo pattern like 'org/*' or 'org/name'")
        return value


_RELEASE_PATTERN = r"^v?\d+\.\d+\.\d+(\.\d+|\.post\d+)?$"


class NamespacePolicy(_Camel):
    validation_action: ValidationAction | None = None
    on_timeout: OnTimeout | None = None
    mutation: Mutation | None = None
    headroom: float | None = Field(default=None, ge=0, lt=1)
    workload: dict[str, Any] | None = None
    target_seqs: int | None = Field(default=None, ge=1, le=65536)
    vllm_version: str | None = Field(default=None, pattern=_RELEASE_PATTERN)

    @field_validator("workload")
    @classmethod
    def _workload(cls, value: Any) -> Any:
        return _check_workload(value)


class Policy(_Camel):
    """The policy file (see the module docstring)."""

    validation_action: ValidationAction = "Audit"
    # What Enforce does with a review that cannot be decided within its budget (the planner overran, or
    # the tenant's queue is full): deny, so that a slow or flooded webhook is never a way around Enforce.
    # Audit always allows (KVP051 warning either way).
    on_timeout: OnTimeout = "deny"
    mutation: Mutation = "fill"
    headroom: float = Field(default=0.1, ge=0, lt=1)
    workload: dict[str, Any] | None = None
    target_seqs: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="fill the smallest --kv-cache-memory-bytes that holds this many sequences (with fill/clamp)",
    )
    default_gpu: str | None = None
    vllm_version: str | None = Field(default=None, pattern=_RELEASE_PATTERN)
    model_lookup: ModelLookup = Field(default_factory=ModelLookup)
    limits: InputCaps = Field(default_factory=InputCaps)
    namespaces: dict[str, NamespacePolicy] = Field(default_factory=dict)

    @field_validator("workload")
    @classmethod
    def _workload(cls, value: Any) -> Any:
        return _check_workload(value)

    def for_namespace(self, namespace: str | None, namespace_meta: Mapping[str, Any] | None = None) -> EffectivePolicy:
        """The policy in force in ``namespace``: file, then its ``namespaces`` entry, then the
        namespace's own annotations/labels (a bad value there is ignored with a note)."""
        values: dict[str, Any] = {
            "validation_action": self.validation_action,
            "on_timeout": self.on_timeout,
            "mutation": self.mutation,
            "headroom": self.headroom,
            "workload": self.workload,
            "target_seqs": self.target_seqs,
            "vllm_version": self.vllm_version,
        }
        notes: list[str] = []
        entry = self.namespaces.get(namespace or "")
        if entry is not None:
            values.update({k: v for k, v in entry.model_dump().items() if v is not None})
        for source in ("labels", "annotations"):
            meta = (namespace_meta or {}).get(source)
            if isinstance(meta, Mapping):
                notes += _apply_namespace_meta(values, meta, namespace)
        return EffectivePolicy(
            validation_action=values["validation_action"],
            on_timeout=values["on_timeout"],
            mutation=values["mutation"],
            headroom=values["headroom"],
            workload=values["workload"],
            target_seqs=values["target_seqs"],
            default_gpu=self.default_gpu,
            vllm_version=values["vllm_version"],
            model_lookup=self.model_lookup,
            limits=self.limits,
            notes=notes,
        )


class EffectivePolicy(BaseModel):
    """The policy for one namespace, after overrides."""

    model_config = ConfigDict(frozen=True)

    validation_action: ValidationAction
    on_timeout: OnTimeout = "deny"
    mutation: Mutation
    headroom: float
    workload: dict[str, Any] | None = None
    target_seqs: int | None = None
    default_gpu: str | None = None
    vllm_version: str | None = None
    model_lookup: ModelLookup = Field(default_factory=ModelLookup)
    limits: InputCaps = Field(default_factory=InputCaps)
    notes: list[str] = Field(default_factory=list, description="namespace overrides that were ignored")


def _apply_namespace_meta(values: dict[str, Any], meta: Mapping[str, Any], namespace: str | None) -> list[str]:
    notes: list[str] = []
    action = meta.get(NS_VALIDATION_ACTION)
    if action is not None:
        normalised = str(action).strip().capitalize()
        if normalised in ("Enforce", "Audit"):
            values["validation_action"] = normalised
        else:
            notes.append(f"namespace {namespace}: {NS_VALIDATION_ACTION}={action!r} ignored (Enforce|Audit)")
    mutation = meta.get(NS_MUTATION)
    if mutation is not None:
        normalised = str(mutation).strip().lower()
        if normalised in ("off", "fill", "clamp"):
            values["mutation"] = normalised
        else:
            notes.append(f"namespace {namespace}: {NS_MUTATION}={mutation!r} ignored (off|fill|clamp)")
    headroom = meta.get(NS_HEADROOM)
    if headroom is not None:
        try:
            number = float(str(headroom))
            if not 0 <= number < 1:
                raise ValueError
            values["headroom"] = number
        except ValueError:
            notes.append(f"namespace {namespace}: {NS_HEADROOM}={headroom!r} ignored (0 <= h < 1)")
    workload = meta.get(WORKLOAD_ANNOTATION)
    if isinstance(workload, str) and workload.strip():
        try:
            data = load_yaml(workload, source=WORKLOAD_ANNOTATION)
            _check_workload(data)
            values["workload"] = data
        except ValueError as error:  # PlannerInputError is a ValueError too
            notes.append(f"namespace {namespace}: {WORKLOAD_ANNOTATION} ignored: {str(error)[:80]}")
    return notes


def parse_policy(data: Any, *, source: str = "policy") -> Policy:
    """Validate a decoded policy document."""
    if data is None:
        return Policy()
    if not isinstance(data, Mapping):
        raise PolicyError(f"{source}: expected a mapping of policy keys, got {type(data).__name__}")
    try:
        return Policy.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in error.errors()[:5])
        raise PolicyError(
            f"{source}: {problems}",
            hint="keys: validationAction, onTimeout, mutation, headroom, workload, targetSeqs, defaultGpu, "
            "vllmVersion, modelLookup, limits, namespaces (docs/webhook.md)",
        ) from None


def parse_policy_text(text: str, *, source: str = "policy") -> Policy:
    try:
        data = load_yaml(text, source=source) if text.strip() else None
    except PlannerInputError as error:
        raise PolicyError(str(error)) from None
    return parse_policy(data, source=source)


def load_policy(path: str | Path) -> Policy:
    """Read a policy file (YAML or JSON). Raises :class:`PolicyError` with the file name on any problem."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise PolicyError(f"{file}: cannot read the policy file: {error.strerror or error}") from None
    return parse_policy_text(text, source=str(file))
