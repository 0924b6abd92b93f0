#!/usr/bin/env python3
"""Replay many AdmissionReviews through the webhook's decision path in-process; hash and time every answer.

What it is for: a change to the decision path (decoding, the worker's job format, memos, the risk model's
arithmetic) must leave every answer byte-identical. This replays a fixed corpus through exactly what the
server runs (``app`` decodes and builds the job, ``worker.answer`` decides, both in this process with the
fork server's warmed backend) and writes one line per review (corpus, policy, endpoint, SHA-256 of the
response body); ``--compare FILE`` checks a run against an earlier one and names the first differences.

The corpus (fixed seeds, so two runs see the same bytes):

* ``cold``: the latency benchmark's never-seen Deployments (30-60 KB, 6 models x 4 GPUs, a new context
  each), every other one with a request-length profile (``kv-planner.io/workload``);
* ``golden``: the golden AdmissionReviews (tests/webhook/golden);
* ``fuzz``: the fuzz campaign's mutations of the golden reviews and tests/k8s/manifests
  (benchmarks/webhook_fuzz.py: deletions, type swaps, huge values, deep nesting, adversarial strings);

each under four policies (the default; Enforce + clamp; Audit + fill with a namespace workload profile;
mutation off), for ``/mutate`` and ``/validate``, with and without a GPU node inventory. Model lookups are
offline with the longest budget (no Hub traffic, and a loaded machine does not turn "not in the cache"
into "not resolved in time": the same answer every run).

``--only cold --profile FILE`` also writes a cProfile of the decisions (never-seen reviews: where the
milliseconds go); ``--once`` answers each review once (the first policy, ``/mutate``), so that every cold
review is a workload never seen before, and the CPU time per answer is the figure to compare; ``--again``
then answers each a second time (a known workload now: its plans are in the memos, if ``--count`` reviews'
plans fit them), timed apart, and checks that the second answer is the first. ``--gap MS``
sleeps before each answer, as a served worker idles between paced reviews: the same decisions then run
on cold caches, which is what the served figures pay. Not run by the test suite. Examples::

    python3 benchmarks/webhook_decisions.py --out /tmp/before.txt
    python3 benchmarks/webhook_decisions.py --compare /tmp/before.txt
    python3 benchmarks/webhook_decisions.py --only cold --profiles all --count 200 --profile /tmp/cold.prof
    python3 benchmarks/webhook_decisions.py --only cold --profiles none --once --count 300   # CPU per review
    python3 benchmarks/webhook_decisions.py --only cold --profiles none --once --count 300 --gap 20  # paced
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import hashlib
import json
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from planner.native_threads import use_one_native_thread

use_one_native_thread()  # as `python -m admission` does, before numpy's import (the workers' environment)

from webhook_fuzz import encode, mutate, seeds  # noqa: E402
from webhook_latency import realistic_deployment, review_body  # noqa: E402

POLICIES: dict[str, dict[str, Any]] = {
    "default": {},
    "enforce-clamp": {"validationAction": "Enforce", "mutation": "clamp"},
    "audit-fill-profile": {
        "validationAction": "Audit",
        "mutation": "fill",
        "workload": {"prompt_tokens": {"p50": 1500, "p99": 6000}, "output_tokens": {"p50": 300, "p99": 1200}},
    },
    "off": {"mutation": "off", "headroom": 0.2},
}
NODES = [
    {
        "metadata": {"name": f"gpu-{i}", "labels": {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "8"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }
    for i, product in enumerate(["NVIDIA-L4", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"])
]


def corpus(only: str | None, count: int, profiles: str = "half") -> Iterator[tuple[str, bytes]]:
    """(corpus name, review body) in a fixed order."""
    if only in (None, "cold"):
        rng = random.Random(7)
        for i in range(count):
            with_profile = profiles == "all" or (profiles == "half" and i % 2 == 0)
            obj = realistic_deployment(i, rng, context=1024 + 16 * i, profiles=with_profile, profile_every=1)
            yield "cold", review_body(obj, f"uid-{i}")
    if only in (None, "golden"):
        for path in sorted((Path(__file__).resolve().parents[1] / "tests" / "webhook" / "golden").glob("*.in.json")):
            yield "golden", json.dumps(json.loads(path.read_text())["review"]).encode()
    if only in (None, "fuzz"):
        rng = random.Random(11)
        base = seeds()
        for i in range(count):
            review = copy.deepcopy(base[i % len(base)])
            review["request"]["uid"] = f"fuzz-{i}"
            if isinstance(review["request"].get("object"), dict):
                mutate(review["request"]["object"], rng)
            yield "fuzz", encode(review, rng)


class Server:
    """The server's side of one review (decode, namespace policy, job) and the worker's (decide), in-process."""

    def __init__(self) -> None:
        from admission.webhook import preload  # the fork server's warmed backend, as the workers have it
        from admission.webhook.handler import PolicyHolder, Reviewer
        from planner.k8s.nodes import node_info
        from planner.policy.model import parse_policy

        self.reviewer = Reviewer(backend=preload.BACKEND)
        self.policies = {
            name: PolicyHolder(None, parse_policy({**body, "modelLookup": {"offline": True, "timeoutSeconds": 10}}))
            for name, body in POLICIES.items()
        }
        self.nodes = [node_info(n) for n in NODES]

    def answer(self, body: bytes, policy: str, endpoint: str, with_nodes: bool) -> bytes:
        from admission.webhook.handler import BadRequest, receive, skipped
        from admission.webhook.worker import Job, answer

        try:
            received = receive(body)
        except BadRequest as error:
            return b"400 " + str(error).encode()
        if not received.reviewable:
            return skipped(received.request).body
        effective = self.policies[policy].policy.for_namespace(received.namespace, None)
        nodes = self.nodes if with_nodes else []
        job = Job(received.payload, received.encoding, endpoint, effective, 1, None)  # type: ignore[arg-type]
        return answer(self.reviewer, job, nodes).body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["cold", "golden", "fuzz"], help="one corpus (default: all three)")
    parser.add_argument("--count", type=int, default=300, help="reviews of the cold and the fuzz corpus each")
    parser.add_argument(
        "--profiles", choices=["half", "all", "none"], default="half", help="cold reviews with a workload profile"
    )
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated policy names")
    parser.add_argument(
        "--once",
        action="store_true",
        help="one answer per review (the first policy, /mutate, no inventory): each "
        "cold review is then a workload never seen before, for timing",
    )
    parser.add_argument(
        "--again",
        action="store_true",
        help="with --once: then answer every review a second time (the same workloads, planned now: what a "
        "known workload costs), timed apart; each second answer must equal the first. The plans of all --count "
        "reviews must fit the decisions' memo (1,024 plans: ~2 per review, ~3.7 with a profile, so at most "
        "~250 profiled reviews), or the second pass finds only evicted plans",
    )
    parser.add_argument("--out", help="write one line per answer here")
    parser.add_argument("--compare", help="an earlier --out file: report the answers that differ")
    parser.add_argument("--profile", help="write a cProfile of the decisions here")
    parser.add_argument(
        "--gap",
        type=float,
        default=0.0,
        help="sleep this many ms before each answer: the idle time a served worker has between reviews at a "
        "paced rate (20 at 50 reviews/s), after which the same decision runs on cold caches",
    )
    args = parser.parse_args()
    if args.again and not args.once:
        parser.error("--again times the second answer of each review: it needs --once")
    policies = args.policies.split(",")
    server = Server()
    reviews = list(corpus(args.only, args.count, args.profiles))
    lines: list[str] = []
    answers: list[str] = []
    times: dict[str, list[float]] = {}
    cpu_ms: dict[str, list[float]] = {}  # (CPU time does not depend on what else the machine runs)
    profiler = cProfile.Profile() if args.profile else None
    for index, (name, body) in enumerate(reviews):
        for policy in policies[:1] if args.once else policies:
            for endpoint in ("mutate",) if args.once else ("mutate", "validate"):
                for with_nodes in (False,) if args.once else (False, True):
                    if args.gap > 0:
                        time.sleep(args.gap / 1000)
                    started, cpu = time.perf_counter(), time.process_time()
                    if profiler is not None:
                        profiler.enable()
                    answer = server.answer(body, policy, endpoint, with_nodes)
                    if profiler is not None:
                        profiler.disable()
                    times.setdefault(name, []).append((time.perf_counter() - started) * 1000)
                    cpu_ms.setdefault(name, []).append((time.process_time() - cpu) * 1000)
                    digest = hashlib.sha256(answer).hexdigest()
                    answers.append(answer.decode(errors="replace"))
                    lines.append(f"{name} {index} {policy} {endpoint} {'nodes' if with_nodes else '-'} {digest}")
    if args.again:
        differ = 0
        for (name, body), first in zip(reviews, answers, strict=True):
            started, cpu = time.perf_counter(), time.process_time()
            answer = server.answer(body, policies[0], "mutate", False)
            times.setdefault(f"{name}, again", []).append((time.perf_counter() - started) * 1000)
            cpu_ms.setdefault(f"{name}, again", []).append((time.process_time() - cpu) * 1000)
            differ += answer.decode(errors="replace") != first
        print(f"answered again: {differ} of {len(reviews)} answers differ from the first", file=sys.stderr)
        if differ:
            raise SystemExit(1)
    total = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    for name, values in times.items():
        ordered = sorted(values)
        print(
            f"{name}: {len(values)} answers, ms per answer p50 {statistics.median(values):.2f}, "
            f"p99 {ordered[int(0.99 * (len(ordered) - 1))]:.2f}, mean {statistics.fmean(values):.2f}; "
            f"CPU ms per answer mean {statistics.fmean(cpu_ms[name]):.2f}",
            file=sys.stderr,
        )
    print(f"{len(lines)} answers, sha256 of all: {total}")
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
        Path(args.out + ".bodies").write_text("".join(json.dumps(a) + "\n" for a in answers))
    if profiler is not None:
        profiler.dump_stats(args.profile)
    if args.compare:
        before = Path(args.compare).read_text().splitlines()
        bodies = Path(args.compare + ".bodies")
        old = [json.loads(line) for line in bodies.read_text().splitlines()] if bodies.is_file() else []
        differ = [i for i, (a, b) in enumerate(zip(before, lines, strict=False)) if a != b]
        if len(before) != len(lines):
            print(f"DIFFERENT: {len(before)} answers before, {len(lines)} now")
        for i in differ[:10]:
            print(f"DIFFERENT: {lines[i]}\n  before {old[i] if i < len(old) else before[i]}\n  now    {answers[i]}")
        print(f"{len(differ)} of {len(lines)} answers differ" if differ else "identical to " + args.compare)
        if differ or len(before) != len(lines):
            raise SystemExit(1)


if __name__ == "__main__":
    main()
