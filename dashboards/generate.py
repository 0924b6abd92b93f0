"""Write the dashboards and the rules file (the one source of both), and their copies for the chart.

    python -m dashboards.generate            # rewrite every generated file
    python -m dashboards.generate --check    # exit 1 and list the files that are out of date

The chart reads its copies with ``.Files.Get`` (Helm cannot read outside ``charts/``); both places get
byte-identical text.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dashboards import fleet_capacity, kv_cache_pressure
from dashboards.common import encode
from dashboards.params import DEFAULT_PARAMS, Params
from dashboards.prometheus_rules import render_rules

REPO_ROOT = Path(__file__).resolve().parent.parent

DASHBOARD_FILES = {
    "kv-cache-pressure.json": kv_cache_pressure.build,
    "fleet-capacity.json": fleet_capacity.build,
}
RULES_FILE = "kv-planner.rules.yaml"

# Where each generated file goes: the source folder and the chart's copy.
SOURCE_DASHBOARDS = Path("dashboards")
SOURCE_RULES = Path("dashboards/rules")
CHART_DASHBOARDS = Path("charts/files/dashboards")
CHART_RULES = Path("charts/files/rules")


def dashboards(params: Params = DEFAULT_PARAMS) -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {name: encode(build(params)) for name, build in DASHBOARD_FILES.items()}


def artifacts(params: Params = DEFAULT_PARAMS) -> dict[Path, str]:
    """Repository-relative path -> text of every generated file (source and chart copy)."""
    out: dict[Path, str] = {}
    for name, text in dashboards(params).items():
        out[SOURCE_DASHBOARDS / name] = text
        out[CHART_DASHBOARDS / name] = text
    rules = render_rules(params)
    out[SOURCE_RULES / RULES_FILE] = rules
    out[CHART_RULES / RULES_FILE] = rules
    return out


def stale(root: Path, params: Params = DEFAULT_PARAMS) -> list[Path]:
    """Generated files that are missing under ``root`` or differ from the generator's output."""
    result = []
    for rel, text in artifacts(params).items():
        path = root / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            result.append(rel)
    return result


def write(root: Path, params: Params = DEFAULT_PARAMS) -> list[Path]:
    """Write every generated file under ``root``; returns the paths that changed."""
    changed = []
    for rel, text in artifacts(params).items():
        path = root / rel
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        # newline="" keeps "\n" on every platform, so the copies stay byte-identical.
        path.write_text(text, encoding="utf-8", newline="")
        changed.append(rel)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only report out-of-date files (exit 1 if any)")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="repository root (default: here)")
    args = parser.parse_args(argv)
    if args.check:
        out_of_date = stale(args.root)
        for rel in out_of_date:
            sys.stderr.write(f"out of date: {rel} (run `python -m dashboards.generate`)\n")
        return 1 if out_of_date else 0
    for rel in write(args.root):
        sys.stdout.write(f"wrote {rel}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
