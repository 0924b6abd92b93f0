"""Run every manifest under a directory through ``planner check`` (offline) and count what was read.

    python scripts/sweep_manifests.py DIR [--tsv OUT.tsv]

For robustness sweeps over third-party manifest trees (docs/platforms.md): crashes (an exception out of
``run_check``) and internal errors (KVP049) are listed; the vLLM entries are counted by the fields read.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

from planner.policy.check import check_policy, run_check
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend

KEYWORDS = ("vllm", "kubeai.org", "ray.io", "huggingface", "LLMInferenceService", "DynamoGraph", "orchestration.aibrix")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--tsv", type=Path)
    options = parser.parse_args()
    backend = CoreBackend()
    policy = check_policy({"modelLookup": {"offline": True}})
    counts: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    rows: list[str] = []
    for path in sorted(options.directory.rglob("*.y*ml")):
        counts["files"] += 1
        text = path.read_text(errors="replace")
        if not any(k in text for k in KEYWORDS):
            continue
        counts["files mentioning a serving platform"] += 1
        try:
            report = run_check(read_documents(text, str(path)), policy=policy, backend=backend)
        except Exception as error:  # the point of the sweep: nothing may escape
            problems.append(f"{path}: {error!r}")
            continue
        for entry in report.workloads:
            if "KVP049" in entry.codes:
                problems.append(f"{path}: {entry.kind}/{entry.name}: {entry.messages}")
            if not entry.vllm:
                continue
            counts["vLLM entries"] += 1
            counts["with model"] += entry.model is not None
            counts["with GPU count"] += entry.gpu.count is not None
            counts["with GPU type"] += entry.gpu.name is not None
            counts["with vLLM release"] += entry.vllm_version is not None
            fields = (path.name, entry.kind, entry.name, entry.template, entry.decision, entry.model)
            found = (entry.vllm_version, entry.gpu.name, entry.gpu.count, ",".join(entry.codes))
            rows.append("\t".join(str(v) for v in (*fields, *found)))
    for key, value in counts.items():
        print(f"{key}: {value}")
    print(f"crashes or internal errors: {len(problems)}")
    for problem in problems:
        print("  " + problem)
    if options.tsv:
        options.tsv.write_text("\n".join(rows) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
