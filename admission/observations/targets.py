"""Scrape targets: a vLLM ``/metrics`` URL plus what the exporter knows about the pod behind it.

Static targets carry their metadata in the URL fragment (never sent to the server), for example::

    http://10.0.3.7:8000/metrics#namespace=llm&pod=qwen-0&workload=qwen&planned-num-gpu-blocks=65811&max-num-seqs=256

Keys: ``namespace``, ``pod``, ``workload``, ``kind`` (Deployment, StatefulSet ...),
``planned-num-gpu-blocks``, ``planned-num-gpu-blocks-low``, ``max-num-seqs``, ``max-model-len``, ``gpu``,
``gpu-count``, ``vllm-version``.
Without ``pod`` the target is named after ``host:port`` (plus the path when it is not ``/metrics``).
A bare ``host:port`` means ``http://host:port/metrics``.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import PlannerInputError

_KEYS = {
    "namespace": "namespace",
    "pod": "pod",
    "workload": "workload",
    "kind": "workload_kind",
    "planned-num-gpu-blocks": "planned_num_gpu_blocks",
    "planned-num-gpu-blocks-low": "planned_num_gpu_blocks_low",
    "max-num-seqs": "max_num_seqs",
    "max-model-len": "max_model_len",
    "gpu": "gpu",
    "gpu-count": "gpu_count",
    "vllm-version": "vllm_version",
}
_INT_KEYS = {"planned_num_gpu_blocks", "planned_num_gpu_blocks_low", "max_num_seqs", "max_model_len", "gpu_count"}


class Target(BaseModel):
    """One vLLM server to watch (one pod; its engines come from the page's ``engine`` label)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(description="the /metrics URL")
    namespace: str = ""
    pod: str
    workload: str = ""
    workload_kind: str = ""
    planned_num_gpu_blocks: int | None = Field(default=None, ge=1)
    planned_num_gpu_blocks_low: int | None = Field(
        default=None, ge=1, description="the plan's blocks at the low end of its KV band (numGpuBlocksLow)"
    )
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_model_len: int | None = Field(default=None, ge=1)
    # From the plan annotation (kv-planner.io/plan): exposed as kv_planner_plan_info for the dashboards.
    gpu: str = ""
    gpu_count: int | None = Field(default=None, ge=1)
    vllm_version: str = ""
    source: str = Field(default="static", description="static | kubernetes | prometheus")

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.pod

    @property
    def workload_key(self) -> tuple[str, str]:
        return self.namespace, self.workload or self.pod


def parse_static_target(text: str) -> Target:
    """``--targets`` value -> Target; raises PlannerInputError with the offending part named."""
    raw = text.strip()
    if not raw:
        raise PlannerInputError("empty --targets entry")
    if "://" not in raw:
        raw = f"http://{raw}"
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PlannerInputError(f"--targets {text!r}: expected http(s)://host:port[/path][#key=value&...]")
    try:
        port = parts.port
    except ValueError:
        raise PlannerInputError(f"--targets {text!r}: the port is not a number") from None
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    url = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    fields: dict[str, object] = {}
    for key, value in parse_qsl(parts.fragment, keep_blank_values=True):
        name = _KEYS.get(key.replace("_", "-"))
        if name is None:
            raise PlannerInputError(f"--targets {text!r}: unknown option {key!r} (known: {', '.join(sorted(_KEYS))})")
        if name in _INT_KEYS:
            try:
                fields[name] = int(value)
            except ValueError:
                raise PlannerInputError(f"--targets {text!r}: {key} must be an integer, got {value!r}") from None
            if int(value) < 1:
                raise PlannerInputError(f"--targets {text!r}: {key} must be positive")
        else:
            fields[name] = value
    # The path is part of the default name when it is not the usual one: two servers behind one
    # host:port (a proxy) are two targets, not one series twice.
    host = f"{parts.hostname}:{port}" if port else parts.hostname
    fields.setdefault("pod", host if path == "/metrics" else f"{host}{path}")
    return Target.model_validate({"url": url, "source": "static", **fields})
