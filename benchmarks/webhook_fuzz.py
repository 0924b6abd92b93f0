#!/usr/bin/env python3
"""Fuzz the admission webhook over TLS with mutated AdmissionReviews and check every answer.

Seeds are the repository's published fixtures: the golden AdmissionReviews (tests/webhook/golden) and the
real-world manifests of tests/k8s/manifests (Helm and Kustomize output, KServe, LeaderWorkerSet, Jobs),
each wrapped in an AdmissionReview. Every request mutates one seed's object 1-3 times: deletions, type
swaps, huge values, deep nesting, adversarial strings (catastrophic-backtracking bait, nested ``$(VAR)``
references, paths, control characters) at random places and at the places kv-planner reads (vLLM
arguments, env, GPU annotations and node selectors, images). The server is the real process
(``python -m admission webhook --no-cluster``, Enforce + clamp, Hub offline).

For each answer it counts:

* ``5xx`` — any 5xx status (the server must answer 4xx for what it cannot read, 200 otherwise);
* ``invalid`` — a 200 that is not an AdmissionReview v1 response with the request's uid and a boolean
  ``allowed``, or a patch without ``patchType: JSONPatch``;
* ``non-applying`` — a patch that jsonpatch cannot apply to the object as sent (the API server would
  reject the user's request: a kv-planner bug blocking a workload);
* ``non-idempotent`` — the patched object sent again gets another non-empty patch.

It also samples ``/healthz`` (a separate connection, every 50 ms) and the RSS of the server's process
tree during the run. Not run by the test suite. Example::

    python3 benchmarks/webhook_fuzz.py --requests 10000 --markdown
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import json
import multiprocessing
import os
import random
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from webhook_latency import start_server

ROOT = Path(__file__).resolve().parents[1]
DEEP = "__kv_planner_fuzz_deep__"
ADVERSARIAL = [
    "-" * 12_000,
    " " * 12_000 + "x",
    "_-" * 6_000 + "3g.40gb",
    "nvidia-" + "a" * 20_000 + "-mig-1g.10gb",
    "$(A)" * 3_000,
    "etc/passwd",
    "../../../../etc/passwd",
    "/proc/self/environ",
    "logs",
    "org/" + "m" * 5_000,
    "{{ .Name }}" * 500,
    "\u202e\u0000\u0007\ud7ff" * 100,
    "💥" * 2_000,
    "--max-model-len=-1",
    "--max-model-len",
    "--tensor-parallel-size=0",
    "--max-num-seqs=99999999999999999999",
    "1e309",
    "NaN",
    "v" + "9" * 10_000 + ".0.0",
    "vllm/vllm-openai:v0.19.0-rocm" + "x" * 20_000,
    "'" * 5_000,
    "\\" * 5_000,
    "a" * 100_000,
]


def seeds() -> list[dict[str, Any]]:
    """AdmissionReviews built from the repository's published fixtures."""
    reviews = []
    for path in sorted((ROOT / "tests" / "webhook" / "golden").glob("*.in.json")):
        review = json.loads(path.read_text())["review"]
        if isinstance(review.get("request", {}).get("object"), dict):
            reviews.append(review)
    for path in sorted((ROOT / "tests" / "k8s" / "manifests").glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
                reviews.append(wrap(obj))
    return reviews


def wrap(obj: dict[str, Any]) -> dict[str, Any]:
    group, _, version = str(obj.get("apiVersion", "v1")).rpartition("/")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "seed",
            "kind": {"group": group, "version": version, "kind": obj.get("kind", "")},
            "name": obj["metadata"].get("name"),
            "namespace": obj["metadata"].get("namespace") or "ml",
            "operation": "CREATE",
            "object": obj,
            "dryRun": False,
        },
    }


def _places(value: Any, path: tuple[Any, ...] = (), out: list[tuple[Any, ...]] | None = None) -> list[tuple[Any, ...]]:
    out = [] if out is None else out
    if len(out) > 5_000:
        return out
    if isinstance(value, dict):
        for key, child in value.items():
            out.append((*path, key))
            _places(child, (*path, key), out)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out.append((*path, index))
            _places(child, (*path, index), out)
    return out


def _parent(root: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        root = root[key]
    return root


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    stack: list[Any] = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if isinstance(value.get("containers"), list):
                found += [c for c in value["containers"] if isinstance(c, dict)]
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


def _swap(value: Any, rng: random.Random) -> Any:
    choices: list[Any] = ["x", 7, -1, 2**63, 1.5e308, True, None, [], {}, ["a", 1], {"k": "v"}, "", "0"]
    return rng.choice([c for c in choices if type(c) is not type(value)] or choices)


def mutate(obj: dict[str, Any], rng: random.Random) -> None:
    """1-3 mutations in place."""
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["delete", "swap", "huge", "deep", "adversarial", "targeted", "targeted", "targeted"])
        places = _places(obj)
        if kind in ("delete", "swap", "huge", "deep", "adversarial") and places:
            path = rng.choice(places)
            parent = _parent(obj, path)
            key = path[-1]
            if kind == "delete":
                del parent[key]
            elif kind == "swap":
                parent[key] = _swap(parent[key], rng)
            elif kind == "huge":
                parent[key] = rng.choice(["z" * 200_000, list(range(5_000)), {f"k{i}": i for i in range(5_000)}])
            elif kind == "deep":
                parent[key] = DEEP
            else:
                parent[key] = rng.choice(ADVERSARIAL)
            continue
        containers = _containers(obj)
        target = rng.choice(containers) if containers else obj
        text = rng.choice(ADVERSARIAL)
        where = rng.choice(["arg", "flag", "env", "gpu", "selector", "image", "workload", "containers", "annotations"])
        meta = obj.setdefault("metadata", {}) if isinstance(obj.get("metadata", {}), dict) else {}
        if where == "arg" and isinstance(target.get("args"), list):
            target["args"].insert(rng.randint(0, len(target["args"])), text)
        elif where == "flag" and isinstance(target.get("args"), list):
            target["args"] += [
                rng.choice(["--model", "--max-model-len", "--kv-cache-dtype", "--gpu-memory-utilization"]),
                text,
            ]
        elif where == "env":
            levels = rng.randint(10, 30)
            env = [{"name": "V0", "value": "x" * 1_000}]
            env += [{"name": f"V{i}", "value": f"$(V{i - 1})$(V{i - 1})"} for i in range(1, levels)]
            target["env"] = env
            if isinstance(target.get("args"), list):
                target["args"].append(f"--served-model-name=$(V{levels - 1})")
        elif where == "gpu" and isinstance(meta, dict):
            meta["annotations"] = {"kv-planner.io/gpu": text}
        elif where == "selector":
            outer = obj.get("spec")
            template = outer.get("template") if isinstance(outer, dict) else None
            spec = template.get("spec") if isinstance(template, dict) else None  # (KAITO: a template list)
            if isinstance(spec, dict):
                spec["nodeSelector"] = {"nvidia.com/gpu.product": text}
        elif where == "image":
            target["image"] = "vllm/vllm-openai:" + text
        elif where == "workload" and isinstance(meta, dict):
            meta["annotations"] = {"kv-planner.io/workload": rng.choice([text, "{prompt_tokens: " * 200, "[1, 2"])}
        elif where == "containers" and containers:
            parent = next((v for v in _walk_dicts(obj) if isinstance(v.get("containers"), list)), None)
            if parent is not None:
                parent["containers"] = [copy.deepcopy(containers[0]) for _ in range(rng.choice([65, 500, 2_000]))]
        elif where == "annotations" and isinstance(meta, dict):
            meta["annotations"] = rng.choice(["a string", ["a", "list"], 7, None])


def _walk_dicts(value: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            out.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def encode(review: dict[str, Any], rng: random.Random) -> bytes:
    text = json.dumps(review)
    if DEEP in text:
        depth = rng.choice([100, 2_000, 100_000])
        text = text.replace(json.dumps(DEEP), "[" * depth + "]" * depth)
    return text.encode()


class Connection:
    """A keep-alive HTTP/1.1 client over TLS returning (status, headers, body)."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.port, self.context = port, context
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
        for attempt in (0, 1):
            try:
                if self.writer is None:
                    self.reader, self.writer = await asyncio.open_connection(
                        "127.0.0.1", self.port, ssl=self.context, server_hostname="127.0.0.1", limit=2**24
                    )
                assert self.reader is not None
                head = (
                    f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(body)}\r\n\r\n"
                )
                self.writer.write(head.encode() + body)
                raw = await self.reader.readuntil(b"\r\n\r\n")
                lines = raw.decode("latin-1").split("\r\n")
                headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                content = await self.reader.readexactly(int(headers.get("content-length", "0")))
                if headers.get("connection", "").lower() == "close":
                    await self.close()
                return int(lines[0].split()[1]), headers, content
            except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
                await self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class Tally:
    def __init__(self) -> None:
        self.counts = {
            "requests": 0,
            "5xx": 0,
            "4xx": 0,
            "invalid": 0,
            "non-applying": 0,
            "non-idempotent": 0,
            "closed": 0,  # the server closed the connection without an answer (twice in a row)
        }
        self.decisions: dict[str, int] = {}
        self.client_ms: list[float] = []
        self.server_ms: list[float] = []
        self.examples: dict[str, str] = {}

    def note(self, what: str, example: str) -> None:
        self.counts[what] += 1
        self.examples.setdefault(what, example[:300])


def _check(
    tally: Tally, status: int, headers: dict[str, str], content: bytes, review: dict[str, Any], uid: str
) -> list[Any] | None:
    """Count the answer; the decoded patch when one applies."""
    if status >= 500:
        tally.note("5xx", f"{status} {content[:200]!r}")
        return None
    if status != 200:
        tally.counts["4xx"] += 1
        return None
    try:
        body = json.loads(content)
        response = body["response"]
        assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
        assert response["uid"] == uid and isinstance(response["allowed"], bool)
        assert ("patch" in response) == (response.get("patchType") == "JSONPatch")
        if not response["allowed"]:
            assert response["status"]["code"] == 403
    except (ValueError, KeyError, TypeError, AssertionError) as error:
        tally.note("invalid", f"{error!r}: {content[:200]!r}")
        return None
    codes = (response.get("auditAnnotations") or {}).get("decision", "skip")
    tally.decisions[codes] = tally.decisions.get(codes, 0) + 1
    if "patch" not in response:
        return None
    try:
        patch = json.loads(base64.b64decode(response["patch"]))
        jsonpatch.apply_patch(review["request"]["object"], patch)
    except Exception as error:  # any failure to apply is what the API server would reject
        tally.note("non-applying", f"{error!r}")
        return None
    return list(patch)


async def fuzz(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    base = seeds()
    tally = Tally()
    health_ms: list[float] = []
    victim_ms: list[float] = []
    victim_wrong: list[str] = []
    rss: list[tuple[int, int]] = []
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        policy = tmp / "policy.yaml"
        # The victim's namespace fills but does not clamp: its review must come back denied (KVP002).
        policy.write_text("validationAction: Enforce\nmutation: clamp\nnamespaces:\n  victim: {mutation: fill}\n")
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_HOME"] = str(tmp / "hf")
        process, port, ca = start_server(tmp, args.cpu, extra=["--policy-file", str(policy)])
        context = ssl.create_default_context(cafile=str(ca))
        # /healthz and RSS are sampled from another process, so this one's CPU (mutating and encoding
        # reviews) does not show up as the server's latency.
        stop = multiprocessing.Event()
        results: multiprocessing.Queue[Any] = multiprocessing.Queue()
        monitor = multiprocessing.Process(target=watch, args=(port, str(ca), process.pid, stop, results))
        monitor.start()

        counter = iter(range(args.requests))

        async def worker() -> None:
            connection = Connection(port, context)
            for i in counter:
                review = copy.deepcopy(rng.choice(base))
                mutate(review["request"]["object"], rng)
                uid = f"fuzz-{i}"
                review["request"]["uid"] = uid
                body = encode(review, rng)
                started = time.perf_counter()
                try:
                    status, headers, content = await connection.request("POST", "/mutate?timeout=2s", body)
                except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError) as error:
                    tally.note("closed", f"{error!r} on a {len(body)}-byte review")
                    dump(args, f"closed-{i}", review)
                    continue
                tally.client_ms.append((time.perf_counter() - started) * 1000)
                tally.counts["requests"] += 1
                if "server-timing" in headers:
                    tally.server_ms.append(float(headers["server-timing"].split("dur=")[1].split(",")[0]))
                patch = _check(tally, status, headers, content, review, uid)
                if patch:
                    again = copy.deepcopy(review)
                    again["request"]["object"] = jsonpatch.apply_patch(review["request"]["object"], patch)
                    again["request"]["uid"] = uid + "-again"
                    try:
                        status, headers, content = await connection.request(
                            "POST", "/mutate?timeout=2s", encode(again, rng)
                        )
                    except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError) as error:
                        tally.note("closed", f"{error!r} on a patched review")
                        continue
                    second = _check(tally, status, headers, content, again, uid + "-again")
                    if second:
                        tally.note("non-idempotent", json.dumps(second)[:300])
                        dump(args, f"non-idempotent-{i}", review)
                server = float(headers.get("server-timing", "dur=0").split("dur=")[1].split(",")[0])
                if server > 500:
                    dump(args, f"slow-{i}-{server:.0f}ms", review)
            await connection.close()

        started = time.perf_counter()
        try:
            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
            stop.set()
            health_ms, rss, victim_ms, victim_wrong = results.get(timeout=60)
            monitor.join(timeout=10)
        finally:
            process.terminate()
            process.wait(timeout=20)
        elapsed = time.perf_counter() - started
        cache = sum(p.stat().st_size for p in (tmp / "hf").rglob("*") if p.is_file()) if (tmp / "hf").exists() else 0
    return {
        **tally.counts,
        "seconds": elapsed,
        "seeds": len(base),
        "decisions": tally.decisions,
        "client_p50_ms": pct(tally.client_ms, 0.5),
        "client_p99_ms": pct(tally.client_ms, 0.99),
        "server_p50_ms": pct(tally.server_ms, 0.5),
        "server_p99_ms": pct(tally.server_ms, 0.99),
        "server_max_ms": max(tally.server_ms or [0.0]),
        "healthz_p99_ms": pct(health_ms, 0.99),
        "healthz_max_ms": max(health_ms or [0.0]),
        "victims": len(victim_ms),
        "victims_wrong": len(victim_wrong),
        "victim_wrong_examples": victim_wrong[:3],
        "victim_p99_ms": pct(victim_ms, 0.99),
        "victim_max_ms": max(victim_ms or [0.0]),
        "rss_max_mib": max((r for r, _ in rss), default=0) / 2**20,
        "pss_max_mib": max((p for _, p in rss), default=0) / 2**20,
        "rss_median_mib": (statistics.median(r for r, _ in rss) if rss else 0) / 2**20,
        "cache_bytes": cache,
        "examples": tally.examples,
    }


VICTIM = ROOT / "tests" / "webhook" / "golden" / "deployment-context-too-long-enforce.in.json"


def watch(port: int, ca: str, pid: int, stop: Any, results: Any) -> None:
    """Every 50 ms: GET /healthz on its own connection (milliseconds) and the server tree's RSS; every
    0.5 s a victim review from another namespace that Enforce must deny (KVP002), timed and checked."""
    health_ms: list[float] = []
    victim_ms: list[float] = []
    victim_wrong: list[str] = []
    rss: list[tuple[int, int]] = []
    context = ssl.create_default_context(cafile=ca)
    victim = json.loads(VICTIM.read_text())["review"]
    victim["request"]["namespace"] = victim["request"]["object"]["metadata"]["namespace"] = "victim"
    with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=context, timeout=30) as client:
        ticks = 0
        while not stop.is_set():
            started = time.perf_counter()
            status = client.get("/healthz").status_code
            health_ms.append((time.perf_counter() - started) * 1000 if status == 200 else float("inf"))
            rss.append(tree_rss(pid))
            ticks += 1
            if ticks % 10 == 0:
                victim["request"]["uid"] = f"victim-{ticks}"
                started = time.perf_counter()
                answer = client.post("/mutate?timeout=2s", json=victim)
                victim_ms.append((time.perf_counter() - started) * 1000)
                response = answer.json().get("response", {}) if answer.status_code == 200 else {}
                message = str(response.get("status", {}).get("message", ""))
                if response.get("allowed") is not False or not message.startswith("kv-planner: KVP002"):
                    victim_wrong.append(f"{answer.status_code} {answer.text[:200]}")
            time.sleep(0.05)
    results.put((health_ms, rss, victim_ms, victim_wrong))


def dump(args: argparse.Namespace, name: str, review: dict[str, Any]) -> None:
    """Keep a review for a closer look (``--keep DIR``)."""
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        (Path(args.keep) / f"{name}.json").write_text(json.dumps(review)[:5_000_000])


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def tree_rss(root: int) -> tuple[int, int]:
    """(RSS, PSS) bytes of ``root`` and all its descendants (Linux /proc). RSS counts a page shared by the
    forked workers once per process; PSS divides it among them, so summed PSS is what the pod's memory
    cgroup is charged (the figure the 512 MiB limit applies to)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    rss = pss = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
        except OSError:
            continue
    return rss, pss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000, help="mutated reviews to send")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent connections")
    parser.add_argument("--seed", type=int, default=11, help="random seed (the campaign is reproducible)")
    parser.add_argument("--cpu", type=int, default=-1, help="CPU to pin the server to (-1: none)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--keep", default=None, help="directory to keep slow or failing reviews in")
    args = parser.parse_args()
    args.cpu = None if args.cpu < 0 else args.cpu
    result = asyncio.run(fuzz(args))
    if args.markdown:
        print(
            "| requests | 5xx | invalid | non-applying | non-idempotent | 4xx | server p50 / p99 / max (ms) "
            "| client p50 / p99 (ms) | /healthz p99 / max (ms) | victim reviews: wrong / max (ms) "
            "| memory max, PSS / RSS (MiB) | closed without answer |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        r = result
        print(
            f"| {r['requests']} | {r['5xx']} | {r['invalid']} | {r['non-applying']} | {r['non-idempotent']} | "
            f"{r['4xx']} | {r['server_p50_ms']:.1f} / {r['server_p99_ms']:.1f} / {r['server_max_ms']:.0f} | "
            f"{r['client_p50_ms']:.1f} / {r['client_p99_ms']:.1f} | {r['healthz_p99_ms']:.1f} / "
            f"{r['healthz_max_ms']:.1f} | {r['victims_wrong']} of {r['victims']} / {r['victim_max_ms']:.0f} | "
            f"{r['pss_max_mib']:.0f} / {r['rss_max_mib']:.0f} | {r['closed']} |"
        )
        print(f"\ndecisions: {json.dumps(r['decisions'], sort_keys=True)}; {r['seeds']} seeds; {r['seconds']:.0f} s")
        if r["examples"]:
            print(f"examples: {json.dumps(r['examples'], indent=1)}")
    else:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
