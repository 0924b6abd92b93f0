#!/usr/bin/env python3
"""Record (or check) what vLLM's own source says, release by release, from the releases' wheels.

The test suite never needs vLLM's source: it checks the simulator's metric catalogue against the facts
recorded here in ``tests/sim/vllm_metric_facts.json`` (each release with its wheel's name and sha256),
and the flag table ``planner/vllm/argv_flags.py`` is generated here from the same wheels. A wheel is
~430 MB, 16 of them ~7 GB: too much for every CI run, so the wheels are read only when a release is
added or the extraction changes:

    python3 scripts/vllm_facts.py            # rewrite both files from the wheels
    python3 scripts/vllm_facts.py --check    # exit 1 when either file differs from what the wheels say

Wheels come from ``pip download vllm==X --no-deps`` into ``$KV_PLANNER_VLLM_WHEELS`` (default
``~/.cache/kv-planner/vllm-wheels``) and stay there; only their ``vllm/**.py`` files are unpacked, next
to them. vLLM is read with :mod:`ast` (never imported: it needs torch); only facts are recorded.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import gen_vllm_flags  # noqa: E402

from planner.sim.versions import MODELLED_RELEASES  # noqa: E402

RECORD = REPO / "tests" / "sim" / "vllm_metric_facts.json"
FLAG_TABLE = REPO / "planner" / "vllm" / "argv_flags.py"


def wheels_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kv-planner" / "vllm-wheels"
    return Path(os.environ.get("KV_PLANNER_VLLM_WHEELS", default))


def wheel(version: str) -> Path:
    """The release's wheel in the cache, downloaded with pip when absent."""
    folder = wheels_dir()
    found = sorted(folder.glob(f"vllm-{version}-*.whl"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps", "--quiet", "-d", str(folder)],
            check=True,
        )
        found = sorted(folder.glob(f"vllm-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip download vllm=={version} left no wheel in {folder}")
    return found[0]


def unpacked(version: str) -> Path:
    """``<cache>/src/<version>``, holding the wheel's ``vllm/**.py`` (unpacked once)."""
    target = wheels_dir() / "src" / version
    done = target / ".unpacked"
    if not done.is_file():
        with zipfile.ZipFile(wheel(version)) as archive:
            for name in archive.namelist():
                if name.startswith("vllm/") and name.endswith(".py"):
                    archive.extract(name, target)
        done.write_text(wheel(version).name + "\n")
    return target


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- metric families ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    name: str  # exposition base name (counters without _total)
    kind: str  # gauge | counter | histogram
    labels: str  # the labelnames expression as written
    buckets: str | None  # the buckets expression, with local names resolved
    conditions: tuple[str, ...]  # enclosing if-tests inside __init__ (empty = always registered)


def _kind(func: str) -> str | None:
    lowered = func.lower()
    for kind in ("histogram", "counter", "gauge"):
        if kind in lowered:
            return kind
    return None


class _InitVisitor:
    """Collects ``name="vllm:..."`` metric constructions in one ``__init__`` with their enclosing ifs."""

    def __init__(self, function: ast.FunctionDef) -> None:
        self.assigns: dict[str, ast.expr] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.assigns[node.targets[0].id] = node.value
        # An early return makes everything after it conditional.
        self.returned = False
        self.found: list[Family] = []
        for statement in function.body:
            self.visit(statement, ())

    def visit(self, node: ast.AST, conditions: tuple[str, ...]) -> None:
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            for child in node.body:
                self.visit(child, (*conditions, test))
            for child in node.orelse:
                self.visit(child, (*conditions, f"not {test}"))
            return
        if isinstance(node, ast.Return):
            self.returned = True
        if isinstance(node, ast.Call):
            self._call(node, conditions)
        for child in ast.iter_child_nodes(node):
            self.visit(child, conditions)

    def _call(self, node: ast.Call, conditions: tuple[str, ...]) -> None:
        keywords = {k.arg: k.value for k in node.keywords}
        name = keywords.get("name")
        if not (isinstance(name, ast.Constant) and str(name.value).startswith("vllm:")):
            return
        kind = _kind(ast.unparse(node.func))
        if kind is None:
            return
        exposed = str(name.value)
        if kind == "counter" and exposed.endswith("_total"):
            exposed = exposed[: -len("_total")]
        buckets = keywords.get("buckets")
        if isinstance(buckets, ast.Name) and buckets.id in self.assigns:
            buckets = self.assigns[buckets.id]
        labels = keywords.get("labelnames")
        if self.returned:
            conditions = (*conditions, "after an early return")
        self.found.append(
            Family(
                exposed,
                kind,
                ast.unparse(labels) if labels is not None else "",
                ast.unparse(buckets) if buckets is not None else None,
                conditions,
            )
        )


def _families_in_init(path: Path, class_name: str) -> list[Family]:
    tree = ast.parse(path.read_text())
    out: list[Family] = []
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and cls.name == class_name:
            for function in cls.body:
                if isinstance(function, ast.FunctionDef) and function.name == "__init__":
                    out.extend(_InitVisitor(function).found)
    return out


def v1_families(root: Path) -> list[Family]:
    loggers = root / "v1" / "metrics" / "loggers.py"
    families = _families_in_init(loggers, "PrometheusStatLogger")
    perf = root / "v1" / "metrics" / "perf.py"
    # PerfMetricsProm is constructed unconditionally by PrometheusStatLogger from 0.17 on; its counters
    # are registered before its first early return.
    if "self._perf_metrics_cls(" in loggers.read_text() and perf.is_file():
        families += _families_in_init(perf, "PerfMetricsProm")
    return families


def v0_families(root: Path) -> list[Family] | None:
    path = root / "engine" / "metrics.py"
    return _families_in_init(path, "Metrics") if path.is_file() else None


def cache_config_fields(root: Path) -> list[str]:
    path = root / "config" / "cache.py"
    if not path.is_file():
        path = root / "config.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == "CacheConfig":
            fields = [
                st.target.id
                for st in node.body
                if isinstance(st, ast.AnnAssign)
                and isinstance(st.target, ast.Name)
                and "ClassVar" not in ast.unparse(st.annotation)
            ]
            for st in node.body:
                if isinstance(st, ast.FunctionDef) and st.name == "__post_init__":
                    for sub in ast.walk(st):
                        if isinstance(sub, ast.Assign):
                            for target in sub.targets:
                                if (
                                    isinstance(target, ast.Attribute)
                                    and isinstance(target.value, ast.Name)
                                    and target.value.id == "self"
                                    and target.attr not in fields
                                ):
                                    fields.append(target.attr)
            return fields
    raise SystemExit(f"no CacheConfig in {path}")


def finish_reasons(root: Path) -> list[str]:
    tree = ast.parse((root / "v1" / "engine" / "__init__.py").read_text())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "FINISH_REASON_STRINGS"
        ):
            return list(ast.literal_eval(node.value))
    raise SystemExit("FINISH_REASON_STRINGS not found")


def static_buckets(root: Path) -> dict[str, list[float]] | None:
    """The ``*_BUCKETS`` constants of ``vllm/v1/metrics/buckets.py`` (from 0.33 on), else None."""
    path = root / "v1" / "metrics" / "buckets.py"
    if not path.is_file():
        return None
    found: dict[str, list[float]] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id.endswith("_BUCKETS") and value is not None:
            found[target.id] = [float(v) for v in ast.literal_eval(value)]
    return found


def release_facts(version: str) -> dict[str, Any]:
    root = unpacked(version) / "vllm"
    v0 = v0_families(root)
    return {
        "wheel": wheel(version).name,
        "sha256": sha256(wheel(version)),
        "v1_families": [asdict(f) for f in v1_families(root)],
        "v0_families": None if v0 is None else [asdict(f) for f in v0],
        "finish_reasons": finish_reasons(root),
        "cache_config_fields": cache_config_fields(root),
        "cache_config_has_engine_label": 'metrics_info["engine"]'
        in (root / "v1" / "metrics" / "loggers.py").read_text(),
        "static_buckets": static_buckets(root),
    }


def source_versions() -> list[str]:
    """The wheels read: those of the releases the simulator and the flag table model."""
    return [source for _, source in MODELLED_RELEASES]


def metric_record() -> str:
    record = {
        "about": "Facts read from vLLM's wheels by scripts/vllm_facts.py (do not edit; rerun the script).",
        "releases": {version: release_facts(version) for version in source_versions()},
    }
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def flag_table() -> str:
    tables = []
    for version in source_versions():
        release = ".".join(version.split(".")[:3])
        tables.append((release, gen_vllm_flags.serve_options(unpacked(version))))
    return gen_vllm_flags.render(tables)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args(argv)
    outputs = {RECORD: metric_record(), FLAG_TABLE: flag_table()}
    stale = [path for path, text in outputs.items() if not path.is_file() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(REPO)} differs from what the wheels say: rerun scripts/vllm_facts.py")
        return 1 if stale else 0
    for path in stale:
        path.write_text(outputs[path])
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
