"""Read vLLM's metric definitions straight from a release's Python source (``ast``, never imported).

Used to check the simulator's catalogue (and the exporter's fixture pages) against vLLM. The source
lives outside the repository: an unpacked tree ``$KV_PLANNER_VLLM_SRC/<version>/vllm/`` (default
``/work/vllm-src``), or the release's wheel in ``$KV_PLANNER_VLLM_SRC/whl/``, from which the few files
read are extracted to a temporary directory. Tests skip when neither is there.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

VLLM_SRC = Path(os.environ.get("KV_PLANNER_VLLM_SRC", "/work/vllm-src"))


@dataclass(frozen=True)
class SourceFamily:
    name: str  # exposition base name (counters without _total)
    kind: str  # gauge | counter | histogram
    labels: str  # the labelnames expression as written
    buckets: str | None  # the buckets expression, with local names resolved
    conditions: tuple[str, ...]  # enclosing if-tests inside __init__ (empty = always registered)


_NEEDED = (
    "vllm/v1/metrics/",
    "vllm/engine/metrics.py",
    "vllm/config.py",
    "vllm/config/cache.py",
    "vllm/v1/engine/__init__.py",
)


@functools.cache
def source_dir(version: str) -> Path | None:
    path = VLLM_SRC / version / "vllm"
    if (path / "v1" / "metrics" / "loggers.py").is_file():
        return path
    wheels = sorted((VLLM_SRC / "whl").glob(f"vllm-{version}-*.whl")) if (VLLM_SRC / "whl").is_dir() else []
    if not wheels:
        return None
    target = Path(tempfile.gettempdir()) / "kv-planner-vllm-src" / version
    if not (target / "vllm" / "v1" / "metrics" / "loggers.py").is_file():
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name in wheel.namelist():
                if name.endswith(".py") and name.startswith(_NEEDED):
                    wheel.extract(name, target)
    return target / "vllm"


def available_versions() -> list[str]:
    """Releases whose source is unpacked or whose wheel is present."""
    if not VLLM_SRC.is_dir():
        return []
    found = {p.name for p in VLLM_SRC.iterdir() if (p / "vllm" / "v1" / "metrics" / "loggers.py").is_file()}
    if (VLLM_SRC / "whl").is_dir():
        for wheel in (VLLM_SRC / "whl").glob("vllm-*.whl"):
            found.add(wheel.name.split("-")[1])
    return sorted(v for v in found if re.fullmatch(r"\d+\.\d+\.\d+(\.\w+)?", v))


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
        self.found: list[SourceFamily] = []
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
            SourceFamily(
                exposed,
                kind,
                ast.unparse(labels) if labels is not None else "",
                ast.unparse(buckets) if buckets is not None else None,
                conditions,
            )
        )


def _families_in_init(path: Path, class_name: str) -> list[SourceFamily]:
    tree = ast.parse(path.read_text())
    out: list[SourceFamily] = []
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and cls.name == class_name:
            for function in cls.body:
                if isinstance(function, ast.FunctionDef) and function.name == "__init__":
                    out.extend(_InitVisitor(function).found)
    return out


@functools.cache
def v1_families(version: str) -> list[SourceFamily]:
    root = source_dir(version)
    assert root is not None
    loggers = root / "v1" / "metrics" / "loggers.py"
    families = _families_in_init(loggers, "PrometheusStatLogger")
    text = loggers.read_text()
    perf = root / "v1" / "metrics" / "perf.py"
    # PerfMetricsProm is constructed unconditionally by PrometheusStatLogger from 0.17 on; its counters
    # are registered before its first early return.
    if "self._perf_metrics_cls(" in text and perf.is_file():
        families += _families_in_init(perf, "PerfMetricsProm")
    return families


@functools.cache
def v0_families(version: str) -> list[SourceFamily]:
    root = source_dir(version)
    assert root is not None
    return _families_in_init(root / "engine" / "metrics.py", "Metrics")


@functools.cache
def cache_config_fields(version: str) -> list[str]:
    root = source_dir(version)
    assert root is not None
    path = root / "config" / "cache.py"
    if not path.is_file():
        path = root / "config.py"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
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
    raise AssertionError(f"no CacheConfig in {path}")


@functools.cache
def finish_reason_strings(version: str) -> tuple[str, ...]:
    root = source_dir(version)
    assert root is not None
    tree = ast.parse((root / "v1" / "engine" / "__init__.py").read_text())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "FINISH_REASON_STRINGS"
        ):
            value = ast.literal_eval(node.value)
            return tuple(value)
    raise AssertionError("FINISH_REASON_STRINGS not found")


def cache_config_has_engine_label(version: str) -> bool:
    root = source_dir(version)
    assert root is not None
    return 'metrics_info["engine"]' in (root / "v1" / "metrics" / "loggers.py").read_text()


def static_bucket_source(version: str, family: str) -> list[float] | None:
    """0.33 keeps bucket families in vllm/v1/metrics/buckets.py as module constants."""
    root = source_dir(version)
    assert root is not None
    path = root / "v1" / "metrics" / "buckets.py"
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text())
    constant = f"{family.upper()}_BUCKETS"
    for node in ast.walk(tree):
        target = (
            getattr(node, "target", None)
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id == constant and node.value is not None:  # type: ignore[union-attr]
            return [float(v) for v in ast.literal_eval(node.value)]  # type: ignore[union-attr]
    return None
