"""The command table: every ``planner`` command, the module that defines it, and its one-paragraph help.

``planner`` imports a command's module only when that command runs (a plan must not pay for the webhook's
decision code, numpy or the simulator), so the top-level ``--help`` lists commands from this table
instead of importing every module. Each command module takes its ``help=`` from here, so the listing
and the command's own help cannot drift apart.

Command modules do not use ``from __future__ import annotations``: typer reads a command's parameters with
``inspect.signature(eval_str=True)`` and ``typing.get_type_hints``, twice each (for the click command and
for its callback), so string annotations were evaluated four times per run: 2% of a cold
``planner recommend`` with its 41 options. Evaluated once at import instead
(tests/cli/test_lazy_commands.py checks it).
"""

from __future__ import annotations

from typing import NamedTuple


class CommandEntry(NamedTuple):
    module: str  # planner.cli.<module> registers the command on the app when imported
    help: str
    summary: str  # one line for the top-level listing (click would cut `help` at the terminal width)


COMMANDS: dict[str, CommandEntry] = {
    "recommend": CommandEntry(
        "recommend",
        "Plan a vLLM deployment: KV memory, blocks, tokens, concurrency, and the safe "
        "--max-model-len / --max-num-seqs. Without --model: one row per catalog model.",
        "Plan a model on a GPU: KV cache, fit, safe limits.",
    ),
    "estimate": CommandEntry(
        "estimate",
        "KV-cache bytes per token and per sequence, from --model or from raw --layers/--kv-heads/--head-dim.",
        "KV-cache bytes per token and per sequence.",
    ),
    "gpus": CommandEntry(
        "catalog",
        "List the GPU catalog: the memory CUDA reports (what vLLM multiplies by --gpu-memory-utilization), "
        "bandwidth, MIG profiles and every alias (GFD labels, GKE accelerators, karpenter names).",
        "List the GPU catalog and every alias.",
    ),
    "models": CommandEntry(
        "catalog",
        "List the embedded model catalog (works offline): architecture facts vLLM sizes the KV cache "
        "with, exact parameter counts and checkpoint bytes where known, and where each entry comes from.",
        "List the embedded model catalog.",
    ),
    "validate": CommandEntry(
        "validate",
        "Compare the planner with real vLLM startup reports (JSONL). Without FILE: the calibration data "
        "shipped with kv-planner (the figures of docs/accuracy.md).",
        "Compare the planner with real vLLM startup reports.",
    ),
    "calibrate": CommandEntry(
        "calibrate",
        "Parse real vLLM startup logs (V0 or V1), compare them with the planner, and write a "
        "corrections file that `planner recommend --calibration FILE` applies. With --fit, refit the "
        "memory model on a JSONL of startup records and report leave-one-model-out errors.",
        "Read vLLM startup logs; write a corrections file.",
    ),
    "check": CommandEntry(
        "check",
        "Check Kubernetes manifests as the admission webhook would: deny / mutate / warn / allow.",
        "Check manifests as the admission webhook would.",
    ),
    "probe": CommandEntry(
        "probe",
        "Probe a live OpenAI-compatible vLLM server: run a bounded staircase of concurrent long requests, "
        "watch KV usage, preemptions, queue and latency, and report the highest safe concurrency.",
        "Measure a live vLLM server's highest safe concurrency.",
    ),
    "simulate": CommandEntry(
        "simulate",
        "Run a simulated vLLM server (vLLM's HTTP API and metrics, a block-by-block KV-cache scheduler).",
        "Run a simulated vLLM server (no GPU needed).",
    ),
}
