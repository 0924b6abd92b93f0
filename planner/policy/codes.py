"""Stable reason codes of policy decisions, and the one-line messages that carry them.

A message is ``KVPnnn <container>: <text>``, at most 120 characters (the Kubernetes API server asks
admission warnings to stay under 120 and may truncate them past 256). Codes never change meaning; new
situations get new codes. KVP0xx are decisions made here; KVP1xx/KVP2xx come from the planner core and
are passed through unchanged.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict

MAX_MESSAGE = 120


class Severity(str, Enum):
    """How a finding weighs in the decision (deny > mutate > warn > allow)."""

    cannot_start = "cannot-start"  # Enforce: deny. Audit: warn.
    mutate = "mutate"  # a change kv-planner made (or, for shell commands, would make)
    warn = "warn"
    info = "info"  # recorded in JSON output, not sent as an admission warning


class Code(str, Enum):
    WEIGHTS_DO_NOT_FIT = "KVP001"
    CONTEXT_DOES_NOT_FIT = "KVP002"
    TOO_FEW_GPUS = "KVP003"
    IDLE_GPUS = "KVP004"
    NO_GPU_REQUEST = "KVP005"
    SHARE_CANNOT_START = "KVP006"
    CARD_OVERCOMMITTED = "KVP007"
    HOST_MEMORY_SHORT = "KVP008"
    THRASH = "KVP010"
    ABOVE_WORST_CASE = "KVP011"
    OVER_SHARE = "KVP012"
    SHARED_GPU = "KVP013"
    SHARE_UNKNOWN = "KVP014"
    HOST_MEMORY_TIGHT = "KVP015"
    FILLED_MAX_MODEL_LEN = "KVP020"
    FILLED_MAX_NUM_SEQS = "KVP021"
    FILLED_GPU_MEMORY_UTILIZATION = "KVP022"
    CLAMPED_MAX_NUM_SEQS = "KVP023"
    CLAMPED_MAX_MODEL_LEN = "KVP024"
    RECORDED_PLAN = "KVP025"
    CLAMPED_GPU_MEMORY_UTILIZATION = "KVP026"
    FILLED_KV_CACHE_MEMORY_BYTES = "KVP027"
    SHELL_NOT_MUTATED = "KVP030"
    CONFIG_FILE_UNKNOWN = "KVP031"
    UNRESOLVED_VARIABLE = "KVP032"
    SEVERAL_VLLM_CONTAINERS = "KVP033"
    PLATFORM_NOT_MUTATED = "KVP034"
    VERSION_ASSUMED = "KVP035"
    VERSION_MATTERS = "KVP036"
    UNKNOWN_MODEL = "KVP040"
    MODEL_LOOKUP_FAILED = "KVP041"
    UNKNOWN_GPU = "KVP042"
    COMMAND_LINE_REJECTED = "KVP043"
    SETTING_REFUSED = "KVP044"
    BAD_WORKLOAD_PROFILE = "KVP045"
    NAMESPACE_OVERRIDE_IGNORED = "KVP046"
    PATCH_DROPPED = "KVP048"
    INTERNAL_ERROR = "KVP049"
    PLANNER_NOTE = "KVP050"
    NOT_VLLM = "KVP060"
    OPTED_OUT = "KVP061"
    OWNED_BY_CONTROLLER = "KVP062"
    UNSUPPORTED_KIND = "KVP063"
    NON_GPU_ACCELERATOR = "KVP064"
    NO_MODEL_FOUND = "KVP065"
    OTHER_ENGINE = "KVP066"
    PLATFORM_CONFIG_UNREADABLE = "KVP067"
    BAD_VERSION_ANNOTATION = "KVP068"
    REVIEW_TIMED_OUT = "KVP051"
    TOO_MANY_CONTAINERS = "KVP070"
    TOO_MANY_ARGS = "KVP071"
    VALUE_TOO_LONG = "KVP072"
    ANNOTATION_TOO_LONG = "KVP073"
    EXPANSION_TOO_LARGE = "KVP074"
    MODEL_NAME_TOO_LONG = "KVP075"
    TOO_DEEP = "KVP076"
    MODEL_NOT_ALLOWED = "KVP077"


SEVERITY: dict[Code, Severity] = {
    Code.WEIGHTS_DO_NOT_FIT: Severity.cannot_start,
    Code.CONTEXT_DOES_NOT_FIT: Severity.cannot_start,
    Code.TOO_FEW_GPUS: Severity.cannot_start,
    Code.IDLE_GPUS: Severity.warn,
    Code.NO_GPU_REQUEST: Severity.warn,
    Code.SHARE_CANNOT_START: Severity.cannot_start,
    Code.CARD_OVERCOMMITTED: Severity.cannot_start,
    Code.HOST_MEMORY_SHORT: Severity.cannot_start,
    Code.THRASH: Severity.warn,
    Code.ABOVE_WORST_CASE: Severity.warn,  # DESIGN: without a profile, --max-num-seqs is warned about
    Code.OVER_SHARE: Severity.warn,  # not isolated: the pod starts, its co-tenants may not
    Code.SHARED_GPU: Severity.info,
    Code.SHARE_UNKNOWN: Severity.warn,
    Code.HOST_MEMORY_TIGHT: Severity.warn,
    Code.FILLED_MAX_MODEL_LEN: Severity.mutate,
    Code.FILLED_MAX_NUM_SEQS: Severity.mutate,
    Code.FILLED_GPU_MEMORY_UTILIZATION: Severity.mutate,
    Code.CLAMPED_MAX_NUM_SEQS: Severity.mutate,
    Code.CLAMPED_MAX_MODEL_LEN: Severity.mutate,
    Code.RECORDED_PLAN: Severity.info,
    Code.CLAMPED_GPU_MEMORY_UTILIZATION: Severity.mutate,
    Code.FILLED_KV_CACHE_MEMORY_BYTES: Severity.mutate,
    Code.SHELL_NOT_MUTATED: Severity.warn,
    Code.CONFIG_FILE_UNKNOWN: Severity.warn,
    Code.UNRESOLVED_VARIABLE: Severity.warn,
    Code.SEVERAL_VLLM_CONTAINERS: Severity.info,
    Code.PLATFORM_NOT_MUTATED: Severity.warn,  # like KVP030: the flags to add, for the owner to write
    Code.VERSION_ASSUMED: Severity.info,  # which release was assumed, and the spread across releases
    Code.VERSION_MATTERS: Severity.warn,  # ... when the decision differs between the possible releases
    Code.UNKNOWN_MODEL: Severity.warn,
    Code.MODEL_LOOKUP_FAILED: Severity.warn,
    Code.UNKNOWN_GPU: Severity.warn,
    Code.COMMAND_LINE_REJECTED: Severity.warn,
    Code.SETTING_REFUSED: Severity.warn,
    Code.BAD_WORKLOAD_PROFILE: Severity.warn,
    Code.NAMESPACE_OVERRIDE_IGNORED: Severity.warn,
    Code.PATCH_DROPPED: Severity.warn,
    Code.INTERNAL_ERROR: Severity.warn,
    Code.PLANNER_NOTE: Severity.info,
    # skip reasons (DESIGN: skip always carries a code); an LLM server kv-planner cannot read warns
    Code.NOT_VLLM: Severity.info,
    Code.OPTED_OUT: Severity.info,
    Code.OWNED_BY_CONTROLLER: Severity.info,
    Code.UNSUPPORTED_KIND: Severity.warn,
    Code.NON_GPU_ACCELERATOR: Severity.warn,
    Code.NO_MODEL_FOUND: Severity.warn,
    Code.OTHER_ENGINE: Severity.info,
    Code.PLATFORM_CONFIG_UNREADABLE: Severity.warn,
    Code.BAD_VERSION_ANNOTATION: Severity.warn,
    # Enforce: deny (policy onTimeout, default deny); Audit: warn. Set on the webhook's timeout answer.
    Code.REVIEW_TIMED_OUT: Severity.warn,
    # Input caps (planner.policy.caps): the manifest's doing, so Enforce denies and Audit warns.
    Code.TOO_MANY_CONTAINERS: Severity.cannot_start,
    Code.TOO_MANY_ARGS: Severity.cannot_start,
    Code.VALUE_TOO_LONG: Severity.cannot_start,
    Code.ANNOTATION_TOO_LONG: Severity.cannot_start,
    Code.EXPANSION_TOO_LARGE: Severity.cannot_start,
    Code.MODEL_NAME_TOO_LONG: Severity.cannot_start,
    Code.TOO_DEEP: Severity.cannot_start,
    Code.MODEL_NOT_ALLOWED: Severity.warn,  # kv-planner only declines to look it up: not checked
}


class Finding(BaseModel):
    """One reason behind a decision."""

    model_config = ConfigDict(frozen=True)

    code: str
    severity: Severity
    message: str


def shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    """Cut ``text`` to ``limit`` characters at a word boundary, marking the cut with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def finding(code: Code, container: str | None, text: str) -> Finding:
    """A finding whose message is ``KVPnnn <container>: <text>``, at most 120 characters."""
    prefix = f"{code.value} {container}: " if container else f"{code.value} "
    if len(prefix) > 60:
        prefix = f"{code.value} {container[:40] if container else ''}…: "
    return Finding(code=code.value, severity=SEVERITY[code], message=shorten(prefix + text))


def passthrough(container: str | None, warning: str) -> Finding:
    """A planner-core warning (``KVP1xx ...``) as an info finding, code kept."""
    code = warning.split(" ", 1)[0] if warning.startswith("KVP") else Code.PLANNER_NOTE.value
    text = warning[len(code) :].strip() if warning.startswith("KVP") else warning
    prefix = f"{code} {container}: " if container else f"{code} "
    return Finding(code=code, severity=Severity.info, message=shorten(prefix + text))
