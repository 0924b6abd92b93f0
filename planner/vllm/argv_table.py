"""The option strings of ``vllm serve`` per release (from :mod:`planner.vllm.argv_flags`) and the
preprocessing rules of each release's ``FlexibleArgumentParser``."""

from __future__ import annotations

import re
from functools import cache, lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict

from planner.vllm import argv_flags

Kind = str


class FlagTable(BaseModel):
    """The option strings of ``vllm serve`` in one release, and the release's preprocessing rules."""

    model_config = ConfigDict(frozen=True)

    release: str
    options: dict[str, tuple[str, Kind]]
    requested: str | None = None  # the release in force (a patch release may differ from the table's)

    @property
    def version_key(self) -> tuple[int, ...]:
        return _version_key(self.release)

    @property
    def in_force(self) -> str:
        """The release whose rules apply: the one asked for, else the table's."""
        return self.requested or self.release

    @property
    def serve_model_option(self) -> Literal["refused", "moved", "accepted"]:
        # vllm 0.8.5 .. 0.11.0 vllm/utils: FlexibleArgumentParser.parse_args raises ValueError when a
        # word of `vllm serve ...` equals "--model" (`--model=X` passes); vllm 0.11.1 and later
        # vllm/utils/argparse_utils.py: FlexibleArgumentParser.parse_args logs a deprecation warning
        # and moves `--model X` / `--model=X` to the front as the positional model.
        return "moved" if _version_key(self.in_force) >= (0, 11, 1) else "refused"

    @property
    def config_lists(self) -> bool:  # load_config_file expands YAML lists since 0.10.2
        return self.version_key >= (0, 10, 2)

    @property
    def config_dicts(self) -> bool:  # ... and nested dicts (as JSON) since 0.16.0
        return self.version_key >= (0, 16)

    @property
    def config_false_as_no(self) -> bool:  # `key: false` -> `--no-key` (0.33; earlier: dropped)
        return self.version_key >= (0, 33)

    @property
    def dotted_json(self) -> bool:  # `--json-arg.key value` (absent in 0.8.5)
        return self.version_key >= (0, 10)

    @property
    def dotted_human_ints(self) -> bool:
        """``--json-arg.key 32k`` reads as 32000 (vllm/utils/argparse_utils.py ``human_readable_int`` when the
        value is not JSON: in 0.20.2 and 0.33, not in 0.19.0); before, the text stays a string."""
        return _version_key(self.in_force) >= (0, 20)

    @property
    def optimization_level(self) -> bool:  # `-O3` -> `--optimization-level 3` since 0.12
        return "--optimization-level" in self.options


def _version_key(version: str) -> tuple[int, ...]:
    # Untrusted text may reach here (an image tag): three numbers at most, nine digits each at most.
    parts = [int(p[:9]) for p in re.findall(r"\d+", version[:64])[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


@cache
def _all_tables() -> dict[str, FlagTable]:
    tables: dict[str, FlagTable] = {}
    current: dict[str, tuple[str, Kind]] = {}
    for release in argv_flags.RELEASES:
        current = dict(current)
        for line in argv_flags.CHANGES[release].strip().splitlines():
            parts = line.split()
            if len(parts) == 1 and parts[0].startswith("-"):
                current.pop(parts[0][1:], None)
            elif len(parts) == 3:
                current[parts[0]] = (parts[1], parts[2])
        tables[release] = FlagTable(release=release, options=current)
    return tables


@lru_cache(maxsize=128)
def flag_table(version: str | None = None) -> FlagTable:
    """The flag table of ``version``: the newest generated release not newer than it.

    ``None`` means the newest release kv-planner knows; a version older than every table uses the oldest.
    """
    tables = _all_tables()
    releases = list(tables)
    if version is None:
        return tables[releases[-1]]
    wanted = _version_key(version)
    chosen = releases[0]
    for release in releases:
        if _version_key(release) <= wanted:
            chosen = release
    return tables[chosen].model_copy(update={"requested": version})
