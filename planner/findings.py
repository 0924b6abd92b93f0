"""Every reason code kv-planner reports, and the typed finding that carries one.

One place for all codes: KVP0xx are policy decisions (webhook, ``planner check``), KVP1xx/KVP2xx are
notes from the planner core (plans, releases, model resolution). Each :class:`Code` member carries its
severity, the one-line summary docs/webhook.md lists and the generic fix. **Adding a code is one member
of** :class:`Code` (``NAME = ("KVPnnn", _WARN, "summary", "generic fix")``), nothing else: docs/webhook.md's
table is generated from it (``python -m planner.findings_table docs/webhook.md``) and a test fails while
the two differ. Codes never change meaning; new situations get new codes.

A :class:`Finding` is one occurrence: the code, the full message (never truncated here: only the
admission response shortens warnings for the API server) and, where one is known, a structured
:class:`Fix` — the vLLM arguments that would fix it and the fix in words.
"""

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field


class Severity(str, Enum):
    """How a finding weighs in a decision (deny > mutate > warn > allow)."""

    cannot_start = "cannot-start"  # Enforce: deny. Audit: warn.
    mutate = "mutate"  # a change kv-planner made (or, for shell commands, would make)
    warn = "warn"
    info = "info"  # recorded in JSON output, not sent as an admission warning


_CANNOT, _MUTATE, _WARN, _INFO = Severity.cannot_start, Severity.mutate, Severity.warn, Severity.info


class Code(str, Enum):
    """A stable reason code with its severity, summary and generic fix (see the module docstring)."""

    _value_: str
    severity: Severity
    summary: str
    fix: str

    def __new__(cls, value: str, severity: Severity, summary: str, fix: str = "") -> "Code":
        member = str.__new__(cls, value)
        member._value_ = value
        member.severity = severity
        member.summary = summary
        member.fix = fix
        return member

    @classmethod
    def parse(cls, value: str) -> "Code":
        """The member for ``"KVPnnn"`` (what ``Code("KVPnnn")`` does, in a form type checkers accept)."""
        member = cls._value2member_map_.get(value)
        if not isinstance(member, cls):
            raise ValueError(f"unknown reason code {value!r}")
        return member

    # Policy decisions: can it start, will it thrash.
    WEIGHTS_DO_NOT_FIT = (
        "KVP001",
        _CANNOT,
        "model weights leave no KV cache on this GPU",
        "more GPUs (`--tensor-parallel-size`) or a bigger GPU",
    )
    CONTEXT_DOES_NOT_FIT = (
        "KVP002",
        _CANNOT,
        "`--max-model-len` (or the model's default context) cannot hold one sequence",
        "a shorter `--max-model-len`, an fp8 KV cache or more GPUs",
    )
    TOO_FEW_GPUS = (
        "KVP003",
        _CANNOT,
        "TP x PP x DP needs more GPUs than the pod / LWS group gets",
        "request TP x PP x DP GPUs or lower `--tensor-parallel-size`",
    )
    IDLE_GPUS = (
        "KVP004",
        _WARN,
        "the pod gets more GPUs than TP x PP x DP uses",
        "request TP x PP x DP GPUs or raise `--tensor-parallel-size`",
    )
    NO_GPU_REQUEST = (
        "KVP005",
        _WARN,
        "no GPU resource request: TP x PP not checked",
        "request `nvidia.com/gpu` (or `amd.com/gpu`)",
    )
    SHARE_CANNOT_START = (
        "KVP006",
        _CANNOT,
        "the pod's startup request exceeds its enforced share of a shared GPU (MPS), or the model does not fit it",
        "lower `--gpu-memory-utilization` or `--kv-cache-memory-bytes` to the share, or a bigger share",
    )
    CARD_OVERCOMMITTED = (
        "KVP007",
        _CANNOT,
        "pods placed on one shared GPU (known placement) together need more than it has",
        "lower the co-tenants' budgets or place them on another GPU",
    )
    HOST_MEMORY_SHORT = (
        "KVP008",
        _CANNOT,
        "the container's memory limit cannot hold the KV offload buffers (pinned host memory)",
        "raise the container's memory limit or lower the offload size",
    )
    GIVEN_KV_TOO_LARGE = (
        "KVP009",
        _CANNOT,
        "`--kv-cache-memory-bytes` with the weights is more than the GPU holds",
        "a smaller `--kv-cache-memory-bytes`, or none (vLLM then sizes the cache from what is free)",
    )
    THRASH = (
        "KVP010",
        _WARN,
        "`--max-num-seqs` above what the KV cache holds for the workload profile",
        "lower `--max-num-seqs` to the safe value",
    )
    ABOVE_WORST_CASE = (
        "KVP011",
        _WARN,
        "fewer full-context sequences fit than `--max-num-seqs` (no profile: warned about, never changed)",
        "add a `kv-planner.io/workload` profile or lower `--max-num-seqs`",
    )
    OVER_SHARE = (
        "KVP012",
        _WARN,
        "the pod takes more than its share of a shared GPU without isolation (time-slicing): co-tenants may not start",
        "lower `--gpu-memory-utilization` or `--kv-cache-memory-bytes` to the share",
    )
    SHARED_GPU = ("KVP013", _INFO, "the pod's share of a shared GPU (mechanism, budget, isolation)")
    SHARE_UNKNOWN = (
        "KVP014",
        _WARN,
        "a shared GPU whose per-pod memory is unknown: nothing filled",
        "set the `kv-planner.io/gpu-memory` annotation",
    )
    HOST_MEMORY_TIGHT = (
        "KVP015",
        _WARN,
        "the container's memory limit leaves under 2 GiB beside the KV offload buffers",
        "raise the container's memory limit",
    )
    CONTEXT_FITS_ONLY_AS_PREDICTED = (
        "KVP016",
        _WARN,
        "`--max-model-len` (or the model's default context) fits only if the KV prediction is not off by its "
        "measured error: at the low end of the KV band vLLM refuses to start",
        "a shorter `--max-model-len` (the message gives one), an fp8 KV cache or more GPUs",
    )
    # Changes (mutation: fill / clamp).
    FILLED_MAX_MODEL_LEN = ("KVP020", _MUTATE, "added `--max-model-len`")
    FILLED_MAX_NUM_SEQS = ("KVP021", _MUTATE, "added `--max-num-seqs`")
    FILLED_GPU_MEMORY_UTILIZATION = ("KVP022", _MUTATE, "added `--gpu-memory-utilization`")
    CLAMPED_MAX_NUM_SEQS = ("KVP023", _MUTATE, "lowered `--max-num-seqs` (clamp)")
    CLAMPED_MAX_MODEL_LEN = ("KVP024", _MUTATE, "lowered `--max-model-len` (clamp)")
    RECORDED_PLAN = ("KVP025", _INFO, "plan recorded in annotations only")
    CLAMPED_GPU_MEMORY_UTILIZATION = (
        "KVP026",
        _MUTATE,
        "lowered `--gpu-memory-utilization` to the pod's share of a shared GPU (clamp)",
    )
    FILLED_KV_CACHE_MEMORY_BYTES = (
        "KVP027",
        _MUTATE,
        "added (or set) `--kv-cache-memory-bytes` (shared GPU, or the policy's `targetSeqs`)",
    )
    # What kv-planner cannot read or change.
    SHELL_NOT_MUTATED = (
        "KVP030",
        _WARN,
        "shell command: not changed, the flags it would add are listed",
        "add the listed flags to the script",
    )
    CONFIG_FILE_UNKNOWN = (
        "KVP031",
        _WARN,
        "`--config` file not readable here: its flags are not checked",
        "pass the ConfigMap with the manifests",
    )
    UNRESOLVED_VARIABLE = (
        "KVP032",
        _WARN,
        "a variable in the model or a sizing flag has no value in the manifest",
        "give the variable a value in the container's `env`",
    )
    SEVERAL_VLLM_CONTAINERS = ("KVP033", _INFO, "several vLLM containers in one pod: annotations describe the first")
    PLATFORM_NOT_MUTATED = (
        "KVP034",
        _WARN,
        "a serving platform's resource kv-planner does not edit: the flags it would add are listed",
        "add the listed flags where the platform takes vLLM arguments",
    )
    VERSION_ASSUMED = ("KVP035", _INFO, "vLLM release unknown: the release assumed, and the spread across releases")
    VERSION_MATTERS = (
        "KVP036",
        _WARN,
        "vLLM release unknown and the decision differs between the possible releases",
        "set the `kv-planner.io/vllm-version` annotation",
    )
    COMMAND_UNREADABLE = (
        "KVP037",
        _WARN,
        "a vLLM image with a GPU runs a command kv-planner cannot read (a script file, another program): not checked",
        "start vLLM in the container's `command`/`args` (`vllm serve ...`, or an inline `sh -c` script); "
        "`planner check` reads a script file when the ConfigMap it is mounted from is among its files",
    )
    SIDECAR_NOT_CHECKED = (
        "KVP038",
        _WARN,
        "vLLM runs in a native sidecar (an init container with `restartPolicy: Always`): not checked",
        "run vLLM in the pod's `containers`, or check it with `planner recommend`",
    )
    SEVERAL_SERVERS = (
        "KVP039",
        _WARN,
        "a container's script starts more than one vLLM server: only the one named is checked, and the "
        "others share its GPUs",
        "run one vLLM server per container",
    )
    ENTRYPOINT_ASSUMED = (
        "KVP052",
        _WARN,
        "an image's args give `--model` more than once and no positional model: the model served depends on "
        "the image's entrypoint; the one assumed is checked, nothing is changed and nothing denied",
        "give the model once (first, as the positional model, for a `vllm serve` entrypoint)",
    )
    # kv-planner's own failures: allowed with a warning.
    UNKNOWN_MODEL = ("KVP040", _WARN, "model unknown", "use a Hugging Face repository id or a catalog name")
    MODEL_LOOKUP_FAILED = (
        "KVP041",
        _WARN,
        "model lookup failed (Hub down, gated, timeout)",
        "retry; for gated models give the webhook a Hub token",
    )
    UNKNOWN_GPU = ("KVP042", _WARN, "GPU type unknown", "set the `kv-planner.io/gpu` annotation")
    COMMAND_LINE_REJECTED = (
        "KVP043",
        _WARN,
        "vLLM would reject the command line (unknown or ambiguous flag, bad value)",
        "correct the flag named in the message",
    )
    SETTING_REFUSED = (
        "KVP044",
        _WARN,
        "vLLM would refuse a setting (e.g. context beyond the model's limit)",
        "change the setting named in the message",
    )
    BAD_WORKLOAD_PROFILE = (
        "KVP045",
        _WARN,
        "workload annotation ignored",
        "correct the `kv-planner.io/workload` profile",
    )
    NAMESPACE_OVERRIDE_IGNORED = (
        "KVP046",
        _WARN,
        "namespace override ignored",
        "correct the namespace's `kv-planner.io/*` labels",
    )
    CONFIG_OVERRIDDEN = (
        "KVP047",
        _WARN,
        "`--hf-overrides` changes the model's config: planned with the overrides applied as the release applies "
        "them (an info note); a warning when vLLM does not apply a RoPE override, or when kv-planner cannot apply "
        "them as vLLM does (a key it does not model, the release unknown, a value vLLM fails on): not checked",
        "the message names the key; name the release (`kv-planner.io/vllm-version`), or check the overridden "
        "model with `planner recommend --hf-overrides`",
    )
    PATCH_DROPPED = (
        "KVP048",
        _WARN,
        "a change was dropped (not proven safe, or the patch failed its self-check)",
        "set the limits yourself (`planner recommend` prints them)",
    )
    INTERNAL_ERROR = (
        "KVP049",
        _WARN,
        "internal error or review past its time budget: allowed unchecked",
        "check offline with `planner check`; report the error if it repeats",
    )
    REVIEW_TIMED_OUT = (
        "KVP051",
        _WARN,
        "the review could not be decided in time (Enforce with `onTimeout: deny` denies it)",
        "retry; check offline with `planner check`",
    )
    PLANNER_NOTE = ("KVP050", _INFO, "a planner-core note without a code of its own, passed through")
    # Skip reasons (DESIGN: a skip always carries a code); an LLM server kv-planner cannot read warns.
    NOT_VLLM = ("KVP060", _INFO, "no vLLM container: skipped")
    OPTED_OUT = ("KVP061", _INFO, "`kv-planner.io/skip` is set: skipped")
    OWNED_BY_CONTROLLER = ("KVP062", _INFO, "owned by a controller whose template was reviewed: skipped")
    UNSUPPORTED_KIND = (
        "KVP063",
        _WARN,
        "an LLM-serving kind kv-planner cannot read",
        "check the pods it creates, or set `kv-planner.io/skip`",
    )
    NON_GPU_ACCELERATOR = (
        "KVP064",
        _WARN,
        "the server runs on a non-GPU accelerator: not checked",
        "set `kv-planner.io/skip` to silence it",
    )
    NO_MODEL_FOUND = (
        "KVP065",
        _WARN,
        "no model found in the serving resource: not checked",
        "name the model in the resource (or its vLLM arguments)",
    )
    OTHER_ENGINE = ("KVP066", _INFO, "an LLM server that is not vLLM: not checked")
    PLATFORM_CONFIG_UNREADABLE = (
        "KVP067",
        _WARN,
        "the serving platform's configuration is not readable here",
        "pass the platform's configuration (runtime, ConfigMap) with the manifests",
    )
    BAD_VERSION_ANNOTATION = (
        "KVP068",
        _WARN,
        "`kv-planner.io/vllm-version` is not a vLLM release (X.Y.Z): ignored",
        "set it to a release such as 0.19.0",
    )
    TEMPLATE_ONLY = (
        "KVP069",
        _INFO,
        "a runtime or preset other resources use (ServingRuntime, LLMInferenceServiceConfig): read with the "
        "resources that use it in the same `planner check` input (the webhook reads none)",
    )
    # Input caps (docs/security.md): a review past a cap is the manifest's doing; Enforce denies it.
    TOO_MANY_CONTAINERS = ("KVP070", _CANNOT, "more containers in one pod than the input cap", "split the pod")
    TOO_MANY_ARGS = (
        "KVP071",
        _CANNOT,
        "a container has more arguments or env entries than the input cap",
        "move settings into a `--config` file",
    )
    VALUE_TOO_LONG = (
        "KVP072",
        _CANNOT,
        "an argument, env or selector value is longer than the input cap",
        "shorten the value (a ConfigMap for long ones)",
    )
    ANNOTATION_TOO_LONG = (
        "KVP073",
        _CANNOT,
        "a kv-planner annotation is longer than the input cap",
        "shorten the annotation (e.g. a smaller workload histogram)",
    )
    EXPANSION_TOO_LARGE = (
        "KVP074",
        _CANNOT,
        "`$(VAR)` / shell expansion grows past the input cap",
        "write the values instead of nesting variables",
    )
    MODEL_NAME_TOO_LONG = (
        "KVP075",
        _CANNOT,
        "the model name is longer than the input cap: not planned",
        "use the model's repository id",
    )
    TOO_DEEP = ("KVP076", _CANNOT, "the object is nested deeper than the input cap", "flatten the object")
    MODEL_NOT_ALLOWED = (
        "KVP077",
        _WARN,
        "the model is not in the policy's `allowRepos`: not looked up, not checked",
        "add the repository to `allowRepos`",
    )
    PRESET_NOT_APPLIED = (
        "KVP078",
        _WARN,
        "a KServe LLMInferenceService preset (`spec.baseRefs`) is not applied as KServe applies it: not readable "
        "here (planned without it, never denied), or its `parallelism`, which KServe's templates do not pass to vLLM",
        "pass the LLMInferenceServiceConfig to `planner check` with the service; set `parallelism` in the "
        "LLMInferenceService itself",
    )
    PLAN_NOT_RECORDED = (
        "KVP079",
        _INFO,
        "the plan is not recorded: the platform copies no annotation from its resource to the pods that run "
        "this engine (KubeAI Model, Ray Serve LLM)",
    )
    # Planner core (KVP1xx: planning, KVP2xx: what is not modelled); info in policy decisions.
    MODEL_RESOLUTION_NOTE = (
        "KVP101",
        _INFO,
        "model resolution note (revision ignored, Hub unreachable: cache used, ...)",
    )
    NEWER_RELEASE = (
        "KVP104",
        _INFO,
        "vLLM release newer than the newest checked: planned with that release's behaviour",
    )
    WEIGHTS_ESTIMATED = ("KVP105", _INFO, "weights estimated from the architecture (no exact checkpoint size)")
    AUTO_FIT_CONTEXT = ("KVP106", _INFO, "`--max-model-len auto`: vLLM will reduce the context to what fits")
    GPU_COUNT_MISMATCH = ("KVP107", _INFO, "the pod's GPU count differs from TP x PP x DP")
    CORRECTED = ("KVP108", _INFO, "memory terms corrected with measurements from a calibration file")
    PADDING_LAYERS = ("KVP109", _INFO, "vLLM pads a KV-cache group with layers (memory wasted)")
    CHUNKED_AS_FULL = ("KVP110", _INFO, "chunked local attention sized as full attention (hybrid manager off)")
    CONNECTOR_NO_HYBRID = ("KVP111", _INFO, "a KV connector turns the hybrid KV cache manager off")
    V0_ENGINE = ("KVP112", _INFO, "planned for vLLM's V0 engine")
    ARCHITECTURE_SUPPORT_UNKNOWN = (
        "KVP113",
        _WARN,
        "the model's architecture may not be served by this vLLM release (its registry was not read)",
        "plan for (and run) a release known to serve the architecture",
    )
    WINDOW_BLOCKS_PER_REQUEST = (
        "KVP114",
        _INFO,
        'each request holds window-capped KV blocks whatever its length: the logged "GPU KV cache size" '
        "(concurrency x max_model_len) is not a per-token capacity",
    )
    NO_SAFE_LIMITS = (
        "KVP115",
        _WARN,
        "vLLM's startup check passes as predicted, but no limits hold at the low end of the KV band (the "
        "planner's measured error): no safe limits",
        "a higher `--gpu-memory-utilization`, an fp8 KV cache, more GPUs or a bigger GPU (`planner recommend` "
        "lists what would fit)",
    )
    ENCODER_PROFILE = (
        "KVP130",
        _INFO,
        "multimodal model: vLLM profiles the vision encoder at startup (dummy batch, its peak, what it holds)",
    )
    ENCODER_NOT_MODELLED = (
        "KVP131",
        _WARN,
        "the vision encoder's profile run is not derived for this model or engine: estimated, safety band widened",
        '`--limit-mm-per-prompt \'{"image": 0, "video": 0}\'` to serve text only, or a calibration file '
        "measured on this model",
    )
    SPECULATIVE_NOT_MODELLED = (
        "KVP201",
        _INFO,
        "speculative decoding: the drafter's weights, KV layers and lookahead slots (planned, in numbers)",
    )
    KV_TRANSFER_NOT_MODELLED = ("KVP202", _INFO, "KV transfer (disaggregated prefill/decode) is not modelled")
    CPU_OFFLOAD_NOT_COUNTED = (
        "KVP203",
        _INFO,
        "KV offloading to CPU: the CPU tier's host memory and tokens (or why the flags do nothing)",
    )
    PACKED_DTYPE_APPROXIMATED = ("KVP204", _INFO, "packed KV-cache dtype approximated by its nominal bits")
    SWAP_SPACE_V0_ONLY = ("KVP205", _INFO, "`--swap-space` only matters for the V0 engine")
    DATA_PARALLEL = ("KVP206", _INFO, "data parallel: each engine has the capacity shown")
    SHARED_GPU_BUDGET = ("KVP207", _INFO, "shared GPU: the plan exceeds the pod's share, or the share is unknown")
    TARGET_SEQS_DO_NOT_FIT = (
        "KVP208",
        _INFO,
        "`--target-seqs`: the sequences asked for need more than the GPU (or share) has",
    )
    DRAFTER_LAYOUT = ("KVP209", _INFO, "the drafter's KV layers placed approximately (pages rounded, or no attention)")


class Fix(BaseModel):
    """How to fix a finding: the vLLM arguments to set (empty when the fix is not a flag) and in words."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    args: list[str] = Field(default=[], description='vLLM arguments, e.g. ["--max-model-len", "32768"]')
    text: str = Field(description="the fix in words (every option, when there are several)")


class Finding(BaseModel):
    """One reason behind a plan's notes or a decision. ``message`` is ``KVPnnn [container: ]text``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: Code
    severity: Severity
    message: str
    fix: Fix | None = None

    @classmethod
    def of(
        cls,
        code: Code,
        text: str,
        *,
        container: str | None = None,
        fix: Fix | None = None,
        severity: Severity | None = None,
    ) -> "Finding":
        """A finding whose message is ``KVPnnn <container>: <text>`` (``KVPnnn <text>`` without one).

        ``fix`` defaults to the code's generic fix (no arguments), so every deny and warning says what to do.
        """
        prefix = f"{code.value} {container}: " if container else f"{code.value} "
        if fix is None and code.fix:
            fix = Fix(text=code.fix.replace("`", ""))  # the code's generic fix (its docs markup dropped)
        return cls(code=code, severity=severity or code.severity, message=prefix + " ".join(text.split()), fix=fix)

    @property
    def text(self) -> str:
        """The message without its code (and container) prefix as given to :meth:`of`."""
        return self.message.split(" ", 1)[1] if " " in self.message else ""


def fix_args(args: list[str], text: str | None = None) -> Fix:
    """A fix that sets ``args`` (the text defaults to the arguments as a command-line fragment)."""
    return Fix(args=list(args), text=text if text is not None else " ".join(args))
