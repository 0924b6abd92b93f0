"""Benchmark: the `planner` command from a cold process, against the interpreter's own start-up.

Run: python benchmarks/cli_startup.py [--repeats 10] [--compare DIR]
Each command runs ``--repeats`` times in a fresh interpreter (this one's, with this checkout on
PYTHONPATH). Prints the median CPU time (user + sys of the child, from getrusage: the machines are
shared, so wall time mostly measures the other jobs) and the median wall time, each as a ratio to
``python -c pass`` measured in the same run, and the load average before and after.

Children cache their bytecode (in a temporary PYTHONPYCACHEPREFIX, written by one warm-up run per
command) even when this shell sets PYTHONDONTWRITEBYTECODE: an installed kv-planner runs from compiled
modules, and recompiling the planner's sources on every run cost ~0.2 s of CPU that no user pays.
``--compare DIR`` also times the planner commands of another checkout (e.g. ``git archive main`` of an
older commit), interleaved with this one's, for before/after figures from one run. ``--instructions``
adds the instructions each command executes (valgrind's callgrind, one run each, ~50x slower): a count
that does not depend on the machine's load, unlike the times. Figures go in docs/benchmarks.md. Not part
of the test suite.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANNER = [sys.executable, "-c", "from planner.cli import main; main()"]
PLAN = ["recommend", "--gpu", "H100-80GB", "--model", "meta-llama/Llama-3.1-8B-Instruct", "-o", "json"]
FLOOR = "import typer, pydantic\nclass A(pydantic.BaseModel):\n    x: int"
# pydantic alone (no CLI library), plugins off as `planner` has them: what any command that builds one
# model class pays, whatever parses its options.
PYDANTIC_FLOOR = (
    "import os\nos.environ['PYDANTIC_DISABLE_PLUGINS'] = '__all__'\nimport pydantic\n"
    "class A(pydantic.BaseModel):\n    x: int\nA(x=1)"
)
# The least any typer command with an option costs when it also builds a pydantic model class: typer 0.29
# converts option values with pydantic (a TypeAdapter per option), and `planner` turns pydantic's plugin
# scan off the same way.
TYPER_FLOOR = (
    "import os\nos.environ['PYDANTIC_DISABLE_PLUGINS'] = '__all__'\nimport typer, pydantic\n"
    "class A(pydantic.BaseModel):\n    x: int\n"
    "app = typer.Typer()\n@app.command()\ndef main(x: int = 0) -> None:\n    A(x=x)\n"
    "app(['--x', '1'], standalone_mode=False)"
)
BASELINES: list[tuple[str, list[str]]] = [
    ("python -c pass", [sys.executable, "-c", "pass"]),
    ("python -c 'import typer, rich, pydantic'", [sys.executable, "-c", "import typer, rich, pydantic"]),
    ("python -c 'import pydantic' + one BaseModel class (plugins off)", [sys.executable, "-c", PYDANTIC_FLOOR]),
    ("python -c 'import typer, pydantic' + one BaseModel class", [sys.executable, "-c", FLOOR]),
    ("a typer command with one int option + one BaseModel class", [sys.executable, "-c", TYPER_FLOOR]),
]
PLANNER_COMMANDS: list[tuple[str, list[str]]] = [
    ("planner --help", [*PLANNER, "--help"]),
    (f"planner {' '.join(PLAN)}", [*PLANNER, *PLAN]),
    ("planner recommend --gpu H100-80GB (every catalog model)", [*PLANNER, "recommend", "--gpu", "H100-80GB"]),
]


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one cold run, in the folder of the checkout it times: ``python -c``
    puts the working directory first on sys.path, ahead of PYTHONPATH."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    cwd = env["PYTHONPATH"]
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def instructions(argv: list[str], env: dict[str, str]) -> int:
    """Instructions one cold run executes (callgrind's "Collected" count), in the checkout's folder."""
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        env=env,
        cwd=env["PYTHONPATH"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    counts = [line.split()[-1] for line in run.stderr.splitlines() if "Collected :" in line]
    if not counts:
        raise SystemExit(f"no instruction count from valgrind for {argv}:\n{run.stderr[-500:]}")
    return int(counts[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--compare", type=Path, help="another checkout whose planner commands to time too")
    parser.add_argument("--instructions", action="store_true", help="also count instructions (needs valgrind)")
    options = parser.parse_args()
    if options.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind on PATH")
    cache = tempfile.mkdtemp(prefix="cli-startup-pycache-")
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    base_env["PYTHONPYCACHEPREFIX"] = cache
    trees = {"": ROOT, **({" [compare]": options.compare.resolve()} if options.compare else {})}
    jobs: list[tuple[str, list[str], dict[str, str]]] = [
        (label, argv, {**base_env, "PYTHONPATH": str(ROOT)}) for label, argv in BASELINES
    ]
    for suffix, tree in trees.items():
        jobs += [(label + suffix, argv, {**base_env, "PYTHONPATH": str(tree)}) for label, argv in PLANNER_COMMANDS]
    for _, argv, env in jobs:
        run_once(argv, env)  # warm the file cache and write the bytecode
    load_before = os.getloadavg()
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in jobs}
    for _ in range(options.repeats):  # interleaved: a burst of load hits every command alike
        for label, argv, env in jobs:
            runs[label].append(run_once(argv, env))
    load_after = os.getloadavg()
    results = {
        label: (statistics.median(r[0] for r in samples), statistics.median(r[1] for r in samples))
        for label, samples in runs.items()
    }
    bare_cpu, bare_wall = results[BASELINES[0][0]]
    loads = f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    print(f"medians of {options.repeats} cold runs each; {loads}")
    for label, (cpu, wall) in results.items():
        ratios = f"{cpu / bare_cpu:.1f}x python -c pass); wall {wall:.3f} s ({wall / bare_wall:.1f}x)"
        print(f"{label}: CPU {cpu:.3f} s ({ratios}")
    if options.instructions:
        counts = {label: instructions(argv, env) for label, argv, env in jobs}
        bare = counts[BASELINES[0][0]]
        for label, count in counts.items():
            print(f"{label}: {count / 1e6:,.0f} M instructions ({count / bare:.1f}x python -c pass)")


if __name__ == "__main__":
    main()
