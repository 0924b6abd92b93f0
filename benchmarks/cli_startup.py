"""Benchmark: the `planner` command from a cold process, against the interpreter's own start-up.

Run: python benchmarks/cli_startup.py [--repeats 10]
Each command runs ``--repeats`` times in a fresh interpreter (this one's, with this checkout on
PYTHONPATH). Prints the median CPU time (user + sys of the child, from getrusage: the machines are
shared, so wall time mostly measures the other jobs) and the median wall time, each as a ratio to
``python -c pass`` and to ``python -c "import typer, rich, pydantic"`` measured in the same run.
Figures go in docs/benchmarks.md. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANNER = [sys.executable, "-c", "from planner.cli import main; main()"]
COMMANDS: list[tuple[str, list[str]]] = [
    ("python -c pass", [sys.executable, "-c", "pass"]),
    ("python -c 'import typer, rich, pydantic'", [sys.executable, "-c", "import typer, rich, pydantic"]),
    ("planner --help", [*PLANNER, "--help"]),
    (
        "planner recommend --gpu H100-80GB --model meta-llama/Llama-3.1-8B-Instruct -o json",
        [*PLANNER, "recommend", "--gpu", "H100-80GB", "--model", "meta-llama/Llama-3.1-8B-Instruct", "-o", "json"],
    ),
    ("planner recommend --gpu H100-80GB (every catalog model)", [*PLANNER, "recommend", "--gpu", "H100-80GB"]),
]


def run_once(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one cold run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=10)
    options = parser.parse_args()
    results: dict[str, tuple[float, float]] = {}
    for _, argv in COMMANDS:
        run_once(argv)  # warm the file cache and .pyc files
    for label, argv in COMMANDS:
        runs = [run_once(argv) for _ in range(options.repeats)]
        results[label] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
    bare_cpu, bare_wall = results[COMMANDS[0][0]]
    libs_cpu, _ = results[COMMANDS[1][0]]
    print(f"medians of {options.repeats} cold runs each")
    for label, (cpu, wall) in results.items():
        print(
            f"{label}: CPU {cpu:.3f} s ({cpu / bare_cpu:.1f}x python -c pass, {cpu / libs_cpu:.2f}x "
            f"the typer+rich+pydantic import); wall {wall:.3f} s ({wall / bare_wall:.1f}x)"
        )


if __name__ == "__main__":
    main()
