"""The command table: every ``planner`` command, the module that defines it, and its one-paragraph help.

``planner`` imports a command's module only when that command runs (a plan must not pay for the webhook's
decision code, numpy or the simulator), so the top-level ``--help`` lists commands from this table
instead of importing every module. Each command module takes its ``help=`` from here, so the listing
and the command's own help cannot drift apart.
"""

from __future__ import annotations

from typing import NamedTuple


class CommandEntry(NamedTuple):
    module: str  # planner.cli.<module> registers the command on the app when imported
    help: str


COMMANDS: dict[str, CommandEntry] = {
    "recommend": CommandEntry(
        "recommend",
        "Plan a vLLM deployment: KV memory, blocks, tokens, concurrency, and the safe "
        "--max-model-len / --max-num-seqs. Without --model: one row per catalog model.",
    ),
    "estimate": CommandEntry(
        "estimate",
        "KV-cache bytes per token and per sequence, from --model or from raw --layers/--kv-heads/--head-dim.",
    ),
    "gpus": CommandEntry(
        "catalog",
        "List the GPU catalog: the memory CUDA reports (what vLLM multiplies by --gpu-memory-utilization), "
        "bandwidth, MIG profiles and every alias (GFD labels, GKE accelerators, karpenter names).",
    ),
    "models": CommandEntry(
        "catalog",
        "List the embedded model catalog (works offline): architecture facts vLLM sizes the KV cache "
        "with, exact parameter counts and checkpoint bytes where known, and where each entry comes from.",
    ),
    "validate": CommandEntry(
        "validate",
        "Compare the planner with real vLLM startup reports (JSONL). Without FILE: the calibration data "
        "shipped with kv-planner (the figures of docs/accuracy.md).",
    ),
    "calibrate": CommandEntry(
        "calibrate",
        "Parse real vLLM startup logs (V0 or V1), compare them with the planner, and write a "
        "corrections file that `planner recommend --calibration FILE` applies. With --fit, refit the "
        "memory model on a JSONL of startup records and report leave-one-model-out errors.",
    ),
    "check": CommandEntry(
        "check", "Check Kubernetes manifests as the admission webhook would: deny / mutate / warn / allow."
    ),
    "probe": CommandEntry(
        "probe",
        "Probe a live OpenAI-compatible vLLM server: run a bounded staircase of concurrent long requests, "
        "watch KV usage, preemptions, queue and latency, and report the highest safe concurrency.",
    ),
    "simulate": CommandEntry(
        "simulate",
        "Run a simulated vLLM server (vLLM's HTTP API and metrics, a block-by-block KV-cache scheduler).",
    ),
}
