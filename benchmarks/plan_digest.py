"""A digest of many plans, for changes that must not move any number (speed-ups, refactors).

Run it on two checkouts and compare the digests:

    PYTHONPATH=OLD python benchmarks/plan_digest.py
    PYTHONPATH=.   python benchmarks/plan_digest.py

(the script only needs ``make_plan`` and ``fleet_rows``: an older checkout runs this copy of it).
``--releases 0.7.2,0.26.0,unknown`` plans other releases than the default three (``unknown``: no version).

It hashes the JSON of ``make_plan`` (recommendation, alternatives and the bigger GPUs ``planner recommend``
offers) for every catalog model x every third catalog GPU x {auto, fp8} KV cache x TP {1, 2, 4} x vLLM
{unknown, 0.10.1, 0.20.0} (refusals by their message), the catalog table (``fleet_rows``) of every GPU x
{auto, fp8} x TP {1, 2} at those releases, and the output of ``planner validate --output json`` on each
shipped calibration file. ``--out FILE`` writes every line hashed, to diff two runs. Not part of the test
suite (minutes of CPU).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from planner.errors import KvPlannerError
from planner.gpus.catalog import all_gpus
from planner.models.catalog import all_models
from planner.plan import make_plan
from planner.plan.fleet import fleet_rows
from planner.vllm.args import ServingArgs

RELEASES = (None, "0.10.1", "0.20.0")


def lines(releases: tuple[str | None, ...] = RELEASES) -> list[str]:
    gpus, models = list(all_gpus()), list(all_models())
    out = []
    for release in releases:
        for gpu in gpus[::3]:
            bigger = sorted(
                (g for g in gpus if g.vendor == gpu.vendor and g.memory_bytes > gpu.memory_bytes),
                key=lambda g: g.memory_bytes,
            )
            for model in models:
                for kv in ("auto", "fp8"):
                    for tp in (1, 2, 4):
                        args = ServingArgs(kv_cache_dtype=kv, tensor_parallel_size=tp)
                        try:
                            out.append(
                                make_plan(model, gpu, args, vllm_version=release, bigger_gpus=bigger).model_dump_json()
                            )
                        except KvPlannerError as error:
                            out.append(
                                f"refused {model.id} {gpu.name} {kv} {tp} {release}: {type(error).__name__}: {error}"
                            )
        for gpu in gpus:
            for kv in ("auto", "fp8"):
                for tp in (1, 2):
                    rows = fleet_rows(
                        models, gpu, ServingArgs(kv_cache_dtype=kv, tensor_parallel_size=tp), vllm_version=release
                    )
                    out.append(json.dumps([row.model_dump() for row in rows]))
    import planner

    data = Path(planner.__file__).parent / "data" / "calibration"
    for path in sorted(data.glob("*.jsonl")):
        # The `planner` command of the checkout on PYTHONPATH (its console script may be another's).
        command = [sys.executable, "-c", "from planner.cli import main; main()", "validate", str(path), "-o", "json"]
        out.append(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write every hashed line here")
    parser.add_argument(
        "--releases",
        help="comma-separated vLLM releases to plan, 'unknown' for none (default: unknown,0.10.1,0.20.0)",
    )
    options = parser.parse_args()
    releases = RELEASES
    if options.releases:
        releases = tuple(None if r.strip() == "unknown" else r.strip() for r in options.releases.split(","))
    start = time.process_time()
    found = lines(releases)
    digest = hashlib.sha256("\n".join(found).encode()).hexdigest()
    if options.out:
        options.out.write_text("\n".join(found) + "\n")
    print(f"{len(found)} lines, sha256 {digest} ({time.process_time() - start:.0f} s CPU)")


if __name__ == "__main__":
    main()
