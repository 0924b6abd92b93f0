"""Reason codes for what kv-planner saw but did not plan (DESIGN.md: ``skip`` always carries a reason
code, and an LLM server kv-planner cannot read is a warning with a code, never a silent skip)."""

from __future__ import annotations

from collections.abc import Sequence

from planner.k8s.inspect import WorkloadFinding
from planner.k8s.platforms.base import NoteReason, PlatformNote
from planner.policy.codes import Code, Finding, finding

NOTE_CODES: dict[NoteReason, Code] = {
    "unsupported-kind": Code.UNSUPPORTED_KIND,
    "non-gpu-accelerator": Code.NON_GPU_ACCELERATOR,
    "no-model": Code.NO_MODEL_FOUND,
    "not-vllm": Code.OTHER_ENGINE,
    "unreadable-config": Code.PLATFORM_CONFIG_UNREADABLE,
    "bad-version-annotation": Code.BAD_VERSION_ANNOTATION,
    "template-only": Code.TEMPLATE_ONLY,
    "unreadable-command": Code.COMMAND_UNREADABLE,
    "sidecar": Code.SIDECAR_NOT_CHECKED,
    "several-servers": Code.SEVERAL_SERVERS,
    "preset-not-read": Code.PRESET_NOT_APPLIED,
    "preset-not-passed": Code.PRESET_NOT_APPLIED,
}
# Notes after which the plan is provisional: what is missing may change anything, so nothing is denied.
PROVISIONAL: frozenset[NoteReason] = frozenset({"preset-not-read"})


def note_findings(notes: Sequence[PlatformNote]) -> list[Finding]:
    return [finding(NOTE_CODES[note.reason], note.where, note.text) for note in notes]


def skip_findings(workload: WorkloadFinding) -> list[Finding]:
    """Why ``workload`` is skipped: its platform notes, else the generic reason."""
    if workload.skip == "opted-out":
        return [finding(Code.OPTED_OUT, None, "kv-planner.io/skip is set: not checked")]
    if workload.skip == "owned-by-controller":
        return [finding(Code.OWNED_BY_CONTROLLER, None, "owned by a controller whose template was reviewed")]
    notes = note_findings(workload.notes)
    if notes:
        return notes
    return [finding(Code.NOT_VLLM, None, "no vLLM container")]
