"""Reading workload profiles from files and Prometheus query results (no network here).

Formats:

* ``*.yaml`` / ``*.yml`` / ``*.json``: a :class:`WorkloadProfile` (docs/workload.md).
* ``*.csv``: a length histogram, one bucket per line, comment lines start with ``#``::

      kind,le,count
      prompt,128,40
      prompt,512,300
      prompt,+Inf,2
      output,64,120
      output,256,220

  ``kind`` is ``prompt`` or ``output``; ``le`` is the bucket's upper bound in tokens (inclusive) or
  ``+Inf``; ``count`` is the number of requests in that bucket (not cumulative).
* A Prometheus HTTP API result (``/api/v1/query``) of ``sum by (le) (...bucket...)``: see
  :func:`distribution_from_prometheus_result`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from planner.errors import PlannerInputError, WorkloadProfileError
from planner.untrusted import read_text
from planner.workload.distribution import cumulative_to_counts
from planner.workload.profile import WorkloadProfile, parse_workload, parse_workload_text

MAX_FILE_BYTES = 16 << 20
"""A workload file is small; refuse anything larger than 16 MiB instead of reading it into memory."""


def _read_text(path: Path) -> str:
    if not path.exists():
        raise WorkloadProfileError(f"{path}: no such file")
    try:  # bounded read: a device or a pipe reports size 0 and never ends
        return read_text(path, what="workload file", limit=MAX_FILE_BYTES)
    except PlannerInputError as error:
        raise WorkloadProfileError(str(error)) from None


def histogram_csv_buckets(text: str, *, source: str = "histogram") -> dict[str, list[tuple[Any, float]]]:
    """Parse the ``kind,le,count`` CSV into ``{"prompt": [(le, count), ...], "output": [...]}``."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    header = [h.strip().lower() for h in (reader.fieldnames or [])]
    if header != ["kind", "le", "count"]:
        raise WorkloadProfileError(f"{source}: the header must be 'kind,le,count', got {','.join(header)!r}")
    buckets: dict[str, list[tuple[Any, float]]] = {"prompt": [], "output": []}
    for number, row in enumerate(reader, start=2):
        kind = (row.get("kind") or "").strip().lower()
        if kind not in buckets:
            raise WorkloadProfileError(f"{source}: line {number}: kind must be 'prompt' or 'output', got {kind!r}")
        le_text = (row.get("le") or "").strip()
        try:
            count = float((row.get("count") or "").strip())
            le: Any = le_text if le_text.lower() in ("+inf", "inf") else float(le_text)
        except ValueError:
            raise WorkloadProfileError(f"{source}: line {number}: le and count must be numbers") from None
        if not math.isfinite(count):
            raise WorkloadProfileError(f"{source}: line {number}: count must be finite")
        buckets[kind].append((le, count))
    for kind, rows in buckets.items():
        if not rows:
            raise WorkloadProfileError(f"{source}: no '{kind}' buckets")
    return buckets


def load_workload_file(path: str | Path, **overrides: Any) -> WorkloadProfile:
    """Load a profile from YAML/JSON or a ``kind,le,count`` CSV; ``overrides`` set top-level fields
    (``target_risk``, ``prefix_cache_hit_rate``) on top of the file."""
    file = Path(path)
    text = _read_text(file)
    data: dict[str, Any]
    if file.suffix.lower() == ".csv":
        buckets = histogram_csv_buckets(text, source=str(file))
        data = {
            "prompt_tokens": {"histogram": buckets["prompt"]},
            "output_tokens": {"histogram": buckets["output"]},
        }
    else:
        data = parse_workload_text(text, source=str(file)).model_dump()
    data.update({k: v for k, v in overrides.items() if v is not None})
    return parse_workload(data, source=str(file))


def _result_vector(result: Any, source: str) -> list[Any]:
    if isinstance(result, str):
        try:
            result = json.loads(result)
        except json.JSONDecodeError as error:
            raise WorkloadProfileError(f"{source}: not JSON: {error}") from None
    if not isinstance(result, dict):
        raise WorkloadProfileError(f"{source}: expected a Prometheus API response object")
    if result.get("status") not in (None, "success"):
        raise WorkloadProfileError(f"{source}: Prometheus answered {result.get('status')}: {result.get('error')}")
    data = result.get("data", result)
    vector_ok = isinstance(data, dict) and data.get("resultType") == "vector"
    if not (vector_ok and isinstance(data.get("result"), list)):
        raise WorkloadProfileError(f"{source}: expected an instant-vector result (resultType 'vector')")
    vector: list[Any] = data["result"]
    return vector


def buckets_from_prometheus_result(result: Any, *, source: str = "Prometheus") -> list[tuple[float, float]]:
    """Cumulative ``(le, count)`` buckets from a Prometheus instant query over a histogram.

    The query should keep only the ``le`` label, e.g.
    ``sum by (le) (increase(vllm:request_prompt_tokens_bucket{model_name="m"}[1d]))``; samples that
    share an ``le`` are added up, so ``sum by (le, pod)`` works too. ``result`` is the decoded JSON (or
    its text) of ``/api/v1/query``.
    """
    totals: dict[float, float] = {}
    for sample in _result_vector(result, source):
        try:
            le = sample["metric"]["le"]
            value = float(sample["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            raise WorkloadProfileError(f"{source}: every sample needs an 'le' label and a value") from None
        bound = math.inf if str(le).lower() in ("+inf", "inf") else float(le)
        if math.isfinite(value):
            totals[bound] = totals.get(bound, 0.0) + value
    if not totals or max(totals.values()) <= 0:
        raise WorkloadProfileError(f"{source}: the query returned no requests (empty window?)")
    return sorted(totals.items())


def profile_from_histograms(
    prompt_buckets: Iterable[tuple[float, float]],
    output_buckets: Iterable[tuple[float, float]],
    **fields: Any,
) -> WorkloadProfile:
    """A profile from cumulative Prometheus buckets of ``vllm:request_prompt_tokens`` and
    ``vllm:request_generation_tokens``; ``fields`` sets ``target_risk`` / ``prefix_cache_hit_rate``."""
    data: dict[str, Any] = {
        "prompt_tokens": {"histogram": _spec_buckets(prompt_buckets)},
        "output_tokens": {"histogram": _spec_buckets(output_buckets)},
    }
    data.update({k: v for k, v in fields.items() if v is not None})
    return parse_workload(data, source="vLLM histograms")


def _spec_buckets(cumulative: Iterable[tuple[float, float]]) -> list[tuple[Any, float]]:
    return [("+Inf" if le == math.inf else le, count) for le, count in cumulative_to_counts(cumulative)]
