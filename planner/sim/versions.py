"""Which vLLM release's observable behaviour the simulator models.

The simulator models the releases whose source kv-planner read (``MODELLED_RELEASES``). Any other
version maps to the newest modelled release that is not newer, which ``tests/sim/test_catalog_source.py``
checks is exact for every release whose source is available.
"""

from __future__ import annotations

from planner.errors import UnknownVllmVersionError
from planner.vllm.metrics_catalog import Version, parse_version

# (modelled release, the wheel whose source was read)
MODELLED_RELEASES: tuple[tuple[str, str], ...] = (
    ("0.8.5", "0.8.5.post1"),
    ("0.10.1", "0.10.1.1"),
    ("0.10.2", "0.10.2"),
    ("0.11.0", "0.11.0"),
    ("0.12.0", "0.12.0"),
    ("0.13.0", "0.13.0"),
    ("0.14.0", "0.14.0"),
    ("0.15.1", "0.15.1"),
    ("0.16.0", "0.16.0"),
    ("0.17.1", "0.17.1"),
    ("0.18.0", "0.18.0"),
    ("0.19.0", "0.19.0"),
    ("0.20.2", "0.20.2"),
    ("0.21.0", "0.21.0"),
    ("0.26.0", "0.26.0"),
    ("0.33.0", "0.33.0"),
)
DEFAULT_RELEASE = MODELLED_RELEASES[-1][0]


def modelled_release(text: str | None) -> tuple[str, Version]:
    """The modelled release whose behaviour applies to vLLM ``text`` (None = newest modelled)."""
    if text is None:
        return DEFAULT_RELEASE, parse_version(DEFAULT_RELEASE)
    wanted = parse_version(text)
    chosen: str | None = None
    for release, _source in MODELLED_RELEASES:
        if parse_version(release) <= wanted:
            chosen = release
    if chosen is None:
        raise UnknownVllmVersionError(
            f"vLLM {text} is older than the oldest release the simulator models ({MODELLED_RELEASES[0][0]})",
            hint="The V1 engine and its metrics start with vLLM 0.8; pick --vllm-version 0.8.5 or newer.",
        )
    return chosen, parse_version(chosen)


def prefix_cache_counts_blocks(version: Version) -> bool:
    """0.8.5 counted prefix-cache queries/hits in blocks; 0.10+ in tokens."""
    return version < parse_version("0.10.1")


def prefix_cache_skips_preempted(version: Version) -> bool:
    """From 0.12 requests that were preempted before are not counted in the prefix-cache counters."""
    return version >= parse_version("0.12.0")


def reserves_full_prompt(version: Version) -> bool:
    """0.19 added ``--scheduler-reserve-full-isl`` (default on): admit only if the whole prompt fits."""
    return version >= parse_version("0.19.0")
