"""Which vLLM releases serve the 2026 architectures at all.

A release whose ``vllm/model_executor/models/registry.py`` does not list a model's ``architectures[0]``
refuses to start it ("Model architectures [...] are not supported for now"), so a plan for it would be
a number vLLM never prints. Each row below was read in the registries of released wheels
(``pip download vllm==X.Y.Z --no-deps``): ``present_in`` is the oldest release read that lists the
architecture, ``absent_in`` the newest release read that does not. Releases after ``absent_in`` and
before ``present_in`` were not read: the plan goes ahead with a finding that says support is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import UnsupportedArchitectureError
from planner.findings import Code, Finding
from planner.vllm.releases import Version


@dataclass(frozen=True)
class ArchitectureSupport:
    family: str
    names: tuple[str, ...]
    present_in: str
    """Oldest release read whose registry lists the architecture."""
    absent_in: str
    """Newest release read whose registry does not."""


SUPPORT: tuple[ArchitectureSupport, ...] = (
    # registry.py of 0.18.0 (absent) and 0.19.0 (present): the first release is known exactly.
    ArchitectureSupport("Gemma-4", ("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"), "0.19.0", "0.18.0"),
    # registry.py of 0.10.0 (absent) and 0.18.0 (present); releases in between not read.
    ArchitectureSupport("DeepSeek-V3.2", ("DeepseekV32ForCausalLM",), "0.18.0", "0.10.0"),
    # registry.py of 0.10.0 (absent) and 0.12.0 (present; 0.15.1 and 0.18.0 too); 0.11 not read.
    ArchitectureSupport("Kimi-Linear", ("KimiLinearForCausalLM",), "0.12.0", "0.10.0"),
    ArchitectureSupport(
        "Qwen3.5",
        (
            "Qwen3_5ForCausalLM",
            "Qwen3_5MoeForCausalLM",
            "Qwen3_5ForConditionalGeneration",
            "Qwen3_5MoeForConditionalGeneration",
        ),
        "0.18.0",
        "0.10.0",
    ),
    # registry.py of 0.19.0 (absent) and 0.20.0 (present): the first release is known exactly.
    ArchitectureSupport("DeepSeek-V4", ("DeepseekV4ForCausalLM",), "0.20.0", "0.19.0"),
)

_BY_NAME = {name: row for row in SUPPORT for name in row.names}


def check_architecture(architecture: str, version: Version) -> list[Finding]:
    """Refuse a release known not to register ``architecture``; a finding where it was not read."""
    row = _BY_NAME.get(architecture)
    if row is None:
        return []
    if version <= Version.parse(row.absent_in):
        raise UnsupportedArchitectureError(
            f"vLLM {version} does not serve {architecture} ({row.family}): its model registry does not list "
            f"it (read in {row.absent_in}; first seen in {row.present_in}). Plan for vLLM >= {row.present_in}.",
            field="architectures",
        )
    if version < Version.parse(row.present_in):
        return [
            Finding.of(
                Code.ARCHITECTURE_SUPPORT_UNKNOWN,
                f"{architecture} ({row.family}) is in vLLM {row.present_in}'s model registry but not in "
                f"{row.absent_in}'s; releases in between were not read, so vLLM {version} may refuse it",
            )
        ]
    return []
