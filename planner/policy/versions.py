"""Planning when the vLLM release is not known (DESIGN.md, Trust boundaries).

The release comes from evidence (an official or mapped image, the ``kv-planner.io/vllm-version``
annotation) or from the policy's ``vllmVersion`` (per namespace): then it is known, or assumed by the
admin, and planned as such. Otherwise kv-planner plans every release row of its table
(:data:`planner.vllm.releases.RELEASES`, one row per behaviour change), decides with the one that
leaves the least KV cache at the low end of its band (limits hold there; a release with a little more
KV cache as predicted but a wider measured error can leave less), fills nothing release-specific
(``--gpu-memory-utilization``, vLLM's default ``--max-num-seqs``) and reports the spread. A setting
that cannot start under some releases but can under others is not denied: kv-planner does not know
which one runs, so it warns and asks for the annotation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from planner.errors import PlannerInputError
from planner.plan.margin import low_end_blocks
from planner.plan.models import Plan
from planner.policy.codes import Code, Finding, Severity, finding
from planner.vllm.args import ServingArgs
from planner.vllm.releases import RELEASES

VersionBasis = Literal["evidence", "policy", "range"]


class ReleaseSpread(BaseModel):
    """The plans of the candidate releases for one command line."""

    model_config = ConfigDict(frozen=True)

    worst: str  # the release with the least KV cache at the low end of its band (ties: the newest)
    tokens: dict[str, int]  # release -> KV cache tokens (as predicted)
    fits: dict[str, bool]
    low_tokens: dict[str, int] = {}  # release -> KV cache tokens at the low end of the band

    @property
    def mixed(self) -> bool:
        return len(set(self.fits.values())) > 1


def candidate_releases() -> list[str]:
    """The first release of every behaviour row kv-planner knows."""
    return [row.since for row in RELEASES]


def release_spread(plan: Callable[[str], Plan], args: ServingArgs) -> ReleaseSpread | None:
    """Plan ``args`` for each candidate release (``plan(version)``); None when no release plans."""
    tokens: dict[str, int] = {}
    low_tokens: dict[str, int] = {}
    fits: dict[str, bool] = {}
    for version in candidate_releases():
        try:
            result = plan(version)
        except PlannerInputError:
            continue
        kv = result.kv_cache
        tokens[version] = kv.tokens
        # (the tokens in the same proportion as the blocks: what vLLM logs at the low end)
        low_tokens[version] = kv.tokens * low_end_blocks(result) // kv.num_gpu_blocks if kv.num_gpu_blocks else 0
        fits[version] = result.fits
    if not tokens:
        return None
    least = min(low_tokens.values())
    worst = [v for v in low_tokens if low_tokens[v] == least][-1]
    return ReleaseSpread(worst=worst, tokens=tokens, fits=fits, low_tokens=low_tokens)


def assumption_findings(
    name: str, basis: VersionBasis, version: str | None, spread: ReleaseSpread | None, image: str | None
) -> list[Finding]:
    """What was assumed about the release, for the report."""
    if basis == "evidence":
        return []
    what = f"image {image.rsplit('/', 1)[-1][:40]}" if image else "no image"
    if basis == "policy":
        return [finding(Code.VERSION_ASSUMED, name, f"vLLM release unknown ({what}): assumed {version} (policy)")]
    if spread is None:
        return [finding(Code.VERSION_ASSUMED, name, f"vLLM release unknown ({what}): no release could be planned")]
    low, high = min(spread.tokens.values()), max(spread.tokens.values())
    first, last = candidate_releases()[0], candidate_releases()[-1]
    text = (
        f"vLLM release unknown: KV {low}-{high} tokens over {first}-{last}, planned {spread.worst}; "
        "no release default added"
    )
    out = [finding(Code.VERSION_ASSUMED, name, text)]
    if spread.mixed:
        good = [v for v, ok in spread.fits.items() if ok]
        bad = [v for v, ok in spread.fits.items() if not ok]
        out.append(
            finding(
                Code.VERSION_MATTERS,
                name,
                f"starts with vLLM {_span(good)}, not {_span(bad)}: set kv-planner.io/vllm-version",
            )
        )
    return out


def _span(versions: list[str]) -> str:
    return versions[0] if len(versions) == 1 else f"{versions[0]}..{versions[-1]} ({len(versions)} rows)"


def soften(findings: list[Finding]) -> list[Finding]:
    """Cannot-start findings as warnings (the release that would refuse may not be the one that runs)."""
    return [
        Finding(code=f.code, severity=Severity.warn, message=f.message) if f.severity == Severity.cannot_start else f
        for f in findings
    ]
