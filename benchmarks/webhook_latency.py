#!/usr/bin/env python3
"""Benchmark the admission webhook over TLS on 127.0.0.1 with realistic 30-60 KB AdmissionReviews.

Starts ``python -m admission webhook --no-cluster`` (pinned to one CPU core with ``taskset``), then drives
it with httpx clients over TLS from this process:

* closed loop with 1, 10 and 50 concurrent clients (throughput and latency);
* open loop at a fixed 50 requests/s (the target: server-side p99 under 25 ms on one core).

Reviews are Deployments the way the API server sends them: managedFields, a kubectl
last-applied-configuration annotation holding the whole object, dozens of env vars, volumes, probes and
sidecars, padded to 30-60 KB. ``--distinct`` workloads are cycled (the planner keeps a memo of plans, as
it would for the updates, dry-runs and reinvocations of a real cluster); ``--cold`` gives every request
a workload never seen before (a unique model context), the worst case; ``--known`` (with ``--cold``) also
measures the same load of ``--distinct`` workloads planned before, on a fresh server in the same run (the
issue's budget for never-seen workloads is what known ones cost). ``--target`` runs all three: never-seen,
known, and a FastAPI echo app (the machine's state). Each paced row also splits the CPU per review: the
server's own process (the event loop) and this load generator, which shares the server's cores when the
server is pinned to all of them (the two-core target).

Server-side latency comes from each response's ``Server-Timing`` header; client-side latency includes
TLS and HTTP. Not run by the test suite. Example::

    python3 benchmarks/webhook_latency.py --requests 1000 --markdown
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import trustme

MODELS = [
    "Qwen/Qwen2.5-7B-Instruct",
    "meta-llama/Llama-3.1-8B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "Qwen/Qwen3-8B",
    "google/gemma-3-12b-it",
    "meta-llama/Llama-3.3-70B-Instruct",
]
GPUS = ["NVIDIA-L4", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S"]
PROFILE = "{prompt_tokens: {p50: 800, p99: 12000}, output_tokens: {p50: 200, p99: 2000}}"


@dataclass(frozen=True)
class Target:
    """One of issue 17's webhook targets: the load that defines it and the bounds it sets."""

    summary: str
    rate: float
    cpu: str  # the cores the server is pinned to
    profiles: bool
    profile_every: int
    server_p99_ms: float
    max_errors: int | None = None


TARGETS = {
    "50-never-seen": Target("one core, 50 reviews/s, never-seen workloads", 50, "0", False, 1, 5.0),
    "50-profiled": Target("one core, 50 reviews/s, never-seen workloads, each with a profile", 50, "0", True, 1, 25.0),
    "200-never-seen": Target("two cores, 200 reviews/s, never-seen workloads", 200, "0,1", False, 1, 50.0, 0),
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def realistic_deployment(
    index: int, rng: random.Random, context: int | None = None, *, profiles: bool = True, profile_every: int = 3
) -> dict[str, Any]:
    """A vLLM Deployment shaped like production manifests (sizes vary with the number of env vars)."""
    model = MODELS[index % len(MODELS)]
    gpu = GPUS[(index // len(MODELS)) % len(GPUS)]
    gpus = 4 if "70B" in model else 1
    args = [model, "--port", "8000", "--tensor-parallel-size", str(gpus), "--enable-prefix-caching"]
    if context is not None:
        args += ["--max-model-len", str(context)]
    env = [
        {"name": f"APP_SETTING_{i:03d}", "value": f"value-{index}-{i}-" + "x" * rng.randint(10, 60)}
        for i in range(rng.randint(90, 200))
    ]
    env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}})
    labels = {f"example.com/label-{i}": f"v{i}" for i in range(12)} | {"app": f"llm-{index}"}
    vllm = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.19.0",
        "args": args,
        "env": env,
        "ports": [{"name": "http", "containerPort": 8000}],
        "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "64Gi"}, "requests": {"cpu": "8"}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 10},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8000}, "initialDelaySeconds": 300},
        "volumeMounts": [
            {"name": "cache", "mountPath": "/root/.cache/huggingface"},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    sidecar = {
        "name": "otel",
        "image": "otel/opentelemetry-collector-contrib:0.110.0",
        "args": ["--config=/conf/otel.yaml"],
        "env": env[:20],
    }
    spec = {
        "replicas": 2,
        "selector": {"matchLabels": {"app": f"llm-{index}"}},
        "template": {
            "metadata": {"labels": labels, "annotations": {"prometheus.io/scrape": "true"}},
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.product": gpu},
                "containers": [vllm, sidecar],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "volumes": [
                    {"name": "cache", "persistentVolumeClaim": {"claimName": "hf-cache"}},
                    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                ],
            },
        },
    }
    obj: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": f"llm-{index}",
            "namespace": "ml",
            "labels": labels,
            "annotations": {"kv-planner.io/workload": PROFILE} if profiles and index % profile_every == 0 else {},
        },
        "spec": spec,
    }
    last_applied = json.dumps(obj, separators=(",", ":"))
    obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = last_applied
    obj["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": "apps/v1",
            "time": "2026-01-05T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:spec": {
                    "f:template": {
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"vllm"}': {
                                    "f:env": {
                                        f'k:{{"name":"{e["name"]}"}}': {".": {}, "f:name": {}, "f:value": {}}
                                        for e in env
                                    }
                                }
                            }
                        }
                    }
                }
            },
        }
    ]
    return obj


def review_body(obj: dict[str, Any], uid: str) -> bytes:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": obj["metadata"]["name"],
            "namespace": "ml",
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin"},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
        },
    }
    return json.dumps(review).encode()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class _Connection:
    """A minimal keep-alive HTTP/1.1 client over TLS (asyncio streams).

    httpx costs several milliseconds of client CPU per 50 KB request; with two cores that would make the
    client, not the webhook, the bottleneck. This one sends prebuilt requests and reads the status,
    the Server-Timing header and the body. Like any keep-alive client it drops a connection that sat
    idle longer than the server keeps it (``IDLE``; the webhook's and uvicorn's keep-alive is 5 s), and
    a reused connection the server closed meanwhile is retried once on a new one (that race is the
    client's, not an answer of the server).
    """

    IDLE: ClassVar[float] = 2.0

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.port, self.context = port, context
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.last_used = time.monotonic()

    errors: ClassVar[list[str]] = []  # (class-wide) answers that were not a decision: HTTP errors, KVP049/051
    decide_ms: ClassVar[list[float]] = []  # (class-wide) Server-Timing "decide": the decision worker's share

    async def post(self, request: bytes) -> float:
        if self.writer is not None and time.monotonic() - self.last_used > self.IDLE:
            await self.close()
        reused = self.writer is not None
        try:
            return await self._post(request)
        except (ConnectionError, asyncio.IncompleteReadError) as error:
            await self.close()
            if reused:
                return await self.post(request)
            _Connection.errors.append(f"connection: {type(error).__name__}")
            return float("nan")
        finally:
            self.last_used = time.monotonic()

    async def _post(self, request: bytes) -> float:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                "127.0.0.1", self.port, ssl=self.context, server_hostname="127.0.0.1"
            )
        assert self.reader is not None
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if status != 200:
            _Connection.errors.append(f"HTTP {status}")
            return float("nan")
        if b"KVP049" in body or b"KVP051" in body:
            _Connection.errors.append(body.decode(errors="replace")[:200])
        metrics = dict(_timing(part) for part in headers["server-timing"].split(","))
        if "decide" in metrics:
            _Connection.decide_ms.append(metrics["decide"])
        return metrics["review"]

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def _timing(part: str) -> tuple[str, float]:
    """``review;dur=1.234`` -> ("review", 1.234)."""
    name, _, duration = part.strip().partition(";dur=")
    return name, float(duration)


def http_request(body: bytes) -> bytes:
    head = (
        f"POST /mutate?timeout=10s HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _closed_loop(
    port: int, context: ssl.SSLContext, requests: list[bytes], concurrency: int, total: int
) -> tuple[list[float], list[float], float]:
    client_ms: list[float] = []
    server_ms: list[float] = []
    counter = iter(range(total))

    async def worker() -> None:
        connection = _Connection(port, context)
        try:
            for i in counter:
                started = time.perf_counter()
                server_ms.append(await connection.post(requests[i % len(requests)]))
                client_ms.append((time.perf_counter() - started) * 1000)
        finally:
            await connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return client_ms, server_ms, time.perf_counter() - started


async def _open_loop(
    port: int, context: ssl.SSLContext, requests: list[bytes], rate: float, total: int
) -> tuple[list[float], list[float], float]:
    """Requests start at a fixed rate whatever the latency (a pool of connections, one request each)."""
    client_ms: list[float] = []
    server_ms: list[float] = []
    idle: list[_Connection] = []

    async def one(i: int) -> None:
        connection = idle.pop() if idle else _Connection(port, context)
        started = time.perf_counter()
        server_ms.append(await connection.post(requests[i % len(requests)]))
        client_ms.append((time.perf_counter() - started) * 1000)
        idle.append(connection)

    warm = [_Connection(port, context) for _ in range(8)]
    for connection in warm:
        await connection.post(requests[0])
    idle.extend(warm)
    tasks = []
    begin = time.perf_counter()
    for i in range(total):
        delay = begin + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - begin
    for connection in idle:
        await connection.close()
    return client_ms, server_ms, elapsed


def _row(label: str, client_ms: list[float], server_ms: list[float], elapsed: float) -> dict[str, Any]:
    server_ms = [m for m in server_ms if not math.isnan(m)] or [float("nan")]  # (NaN: an HTTP error, counted apart)
    return {
        "load": label,
        "requests": len(client_ms),
        "throughput_rps": len(client_ms) / elapsed,
        "client_p50_ms": _percentile(client_ms, 0.5),
        "client_p99_ms": _percentile(client_ms, 0.99),
        "server_p50_ms": _percentile(server_ms, 0.5),
        "server_p99_ms": _percentile(server_ms, 0.99),
        "server_max_ms": max(server_ms),
        "server_mean_ms": statistics.fmean(server_ms),
    }


def start_server(
    tmp: Path, cpu: int | str | None, extra: list[str] | None = None, *, baseline: bool = False
) -> tuple[subprocess.Popen[bytes], int, Path]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp / "tls.key"))
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    port, metrics = _free_port(), _free_port()
    command = [
        sys.executable,
        "-m",
        "admission",
        "webhook",
        "--no-cluster",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--metrics-port",
        str(metrics),
        "--tls-cert-file",
        str(tmp / "tls.crt"),
        "--tls-key-file",
        str(tmp / "tls.key"),
        "--log-level",
        "warning",
        *(extra or []),
    ]
    cwd = Path(__file__).resolve().parents[1]
    if baseline:
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "echo_app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--ssl-certfile",
            str(tmp / "tls.crt"),
            "--ssl-keyfile",
            str(tmp / "tls.key"),
            "--log-level",
            "warning",
            "--no-access-log",
            "--http",
            "h11",
        ]
        cwd = Path(__file__).resolve().parent
    if cpu is not None and shutil.which("taskset"):
        command = ["taskset", "-c", str(cpu), *command]
    process = subprocess.Popen(command, cwd=cwd)
    context = ssl.create_default_context(cafile=str(tmp / "ca.pem"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"https://127.0.0.1:{port}/readyz", verify=context, timeout=1).status_code == 200:
                return process, port, tmp / "ca.pem"
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise SystemExit("the webhook exited during start-up")
        time.sleep(0.2)
    process.terminate()
    raise SystemExit("the webhook did not become ready in 60 s")


def tree_cpu_seconds(root: int, *, descendants: bool = True) -> float:
    """User + system CPU seconds of ``root`` and (unless ``descendants`` is False) its living descendants
    (Linux /proc): what the server spent, whatever else the machine is running (latency on a shared
    machine is not)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry.name)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    ticks, stack = 0, [root]
    while stack:
        pid = stack.pop()
        if descendants:
            stack.extend(children.get(pid, []))
        if pid in stats:
            ticks += int(stats[pid][11]) + int(stats[pid][12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent running anything (user, nice, system, irq, softirq: not idle,
    I/O wait or time the hypervisor gave to other guests) since boot, from /proc/stat: over a run, how many
    of the cores the server, this client and any other job kept busy."""
    user, nice, system, _idle, _iowait, irq, softirq = (
        int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]
    )
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _known_context(args: argparse.Namespace, index: int) -> int | None:
    """A known workload's ``--max-model-len``: none (the model's default, up to 131,072 tokens) or, with
    ``--known-contexts cold``, spread evenly over the never-seen reviews' contexts, so that the known
    workloads cost what the never-seen ones would on a second review."""
    if args.known_contexts == "model":
        return None
    return 1024 + 16 * (index * args.requests // max(1, args.distinct))


def _bodies(args: argparse.Namespace, count: int) -> list[bytes]:
    rng = random.Random(7)
    out = []
    for i in range(count):
        index = i if args.cold else i % args.distinct
        context = 1024 + 16 * i if args.cold else _known_context(args, index)
        obj = realistic_deployment(
            index, rng, context=context, profiles=args.profiles, profile_every=args.profile_every
        )
        namespace = f"team-{i % args.namespaces}"
        obj["metadata"]["namespace"] = namespace
        body = json.loads(review_body(obj, f"uid-{i}"))
        body["request"]["namespace"] = namespace
        out.append(json.dumps(body).encode())
    return out


async def _measure(args: argparse.Namespace, baseline: bool) -> list[dict[str, Any]]:
    extra = ["--workers", str(args.workers)] if args.workers else []
    with tempfile.TemporaryDirectory() as directory:
        process, port, ca = start_server(Path(directory), args.cpu, extra, baseline=baseline)
        try:
            total = args.requests * (1 if args.paced_only else 4) + 100
            bodies = _bodies(args, total if args.cold else max(args.distinct, 50))
            sizes = [len(b) for b in bodies]
            print(
                f"review sizes: min {min(sizes) / 1024:.1f} KB, median {statistics.median(sizes) / 1024:.1f} KB, "
                f"max {max(sizes) / 1024:.1f} KB",
                file=sys.stderr,
            )
            context = ssl.create_default_context(cafile=str(ca))
            requests = [http_request(b) for b in bodies]
            rows = []
            # Connections and the first plans; cold runs warm up on reviews that are not measured.
            warm = requests[-50:] if args.cold else requests[:50]
            await _closed_loop(port, context, warm, 4, len(warm))
            _Connection.errors.clear()
            offset = 0
            label = "echo baseline" if baseline else "kv-planner" if args.cold else "kv-planner, known workloads"
            if not args.paced_only:
                for concurrency in (1, 10, 50):
                    chunk = requests[offset:] if args.cold else requests
                    result = await _closed_loop(port, context, chunk, concurrency, args.requests)
                    rows.append(_row(f"{label}: {concurrency} concurrent", *result))
                    offset += args.requests if args.cold else 0
            chunk = requests[offset:] if args.cold else requests
            cpu_before = tree_cpu_seconds(process.pid)
            loop_before = tree_cpu_seconds(process.pid, descendants=False)
            client_before = time.process_time()
            machine_before, paced_start = machine_busy_seconds(), time.monotonic()
            _Connection.decide_ms.clear()
            result = await _open_loop(port, context, chunk, args.rate, args.requests)
            rows.append(_row(f"{label}: {args.rate:g} req/s paced", *result))
            decide = _Connection.decide_ms or [math.nan]
            rows[-1]["decide_p50_ms"] = _percentile(decide, 0.5)
            rows[-1]["decide_p99_ms"] = _percentile(decide, 0.99)
            rows[-1]["cpu_ms_per_review"] = (tree_cpu_seconds(process.pid) - cpu_before) * 1000 / args.requests
            # Where it went: the server's own process (the event loop: TLS, HTTP, decoding, the hand-over),
            # and this load generator, which shares the server's cores when it is pinned to all of them.
            loop_cpu = tree_cpu_seconds(process.pid, descendants=False) - loop_before
            rows[-1]["event_loop_cpu_ms_per_review"] = loop_cpu * 1000 / args.requests
            rows[-1]["client_cpu_ms_per_review"] = (time.process_time() - client_before) * 1000 / args.requests
            # Whether the machine had a core to spare (then a queue is a serial stage's, not a lack of CPU).
            busy = machine_busy_seconds() - machine_before
            rows[-1]["machine_busy_cores"] = busy / max(1e-9, time.monotonic() - paced_start)
            rows[-1]["errors"] = len(_Connection.errors)
            rows[-1]["error_examples"] = _Connection.errors[:3]
            return rows
        finally:
            process.terminate()
            process.wait(timeout=20)


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = await _measure(args, baseline=False)
    if args.known:
        # The same server and load with workloads it has planned before (the issue's budget for never-seen
        # ones), measured in the same run: what any review costs this machine today, plans aside.
        known = await _measure(argparse.Namespace(**{**vars(args), "cold": False}), baseline=False)
        rows[-1]["ratio_known_server_p99"] = rows[-1]["server_p99_ms"] / known[-1]["server_p99_ms"]
        rows[-1]["ratio_known_cpu"] = rows[-1]["cpu_ms_per_review"] / known[-1]["cpu_ms_per_review"]
        rows += known
    if args.baseline:
        base = await _measure(args, baseline=True)
        for row, reference in zip(rows, base, strict=False):  # (base has one row per load; known rows follow)
            row["ratio_server_p99"] = row["server_p99_ms"] / reference["server_p99_ms"]
            row["ratio_client_p99"] = row["client_p99_ms"] / reference["client_p99_ms"]
        rows += base
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000, help="requests per load level")
    parser.add_argument("--distinct", type=int, default=48, help="distinct workloads cycled (warm runs)")
    parser.add_argument("--cold", action="store_true", help="every request is a workload never seen before")
    parser.add_argument(
        "--no-profiles",
        dest="profiles",
        action="store_false",
        help="no workload-profile annotations (by default every third workload has one)",
    )
    parser.add_argument("--cpu", default="0", help="CPU list the server is pinned to (taskset -c), -1: none")
    parser.add_argument("--rate", type=float, default=50.0, help="requests/s of the paced (open-loop) run")
    parser.add_argument("--paced-only", action="store_true", help="only the paced run")
    parser.add_argument("--workers", type=int, default=0, help="--workers of the webhook (0: its default)")
    parser.add_argument("--namespaces", type=int, default=1, help="namespaces the reviews are spread over")
    parser.add_argument("--baseline", action="store_true", help="also measure a FastAPI echo app the same way")
    parser.add_argument(
        "--profile-every", type=int, default=3, help="every N-th workload has a profile annotation (with profiles)"
    )
    parser.add_argument(
        "--target",
        choices=sorted(TARGETS),
        help="one of issue 17's targets: sets --rate, --cpu, --cold, profiles and --paced-only, measures the echo "
        "baseline too, and prints the target next to each figure",
    )
    parser.add_argument(
        "--known",
        action="store_true",
        help="with --cold: also measure the same load of --distinct workloads planned before (set by --target)",
    )
    parser.add_argument(
        "--known-contexts",
        choices=["model", "cold"],
        default="model",
        help="the known workloads' --max-model-len: the model's default (as before), or spread over the never-seen "
        "reviews' contexts (the same plans' sizes: with profiles, a 131,072-token default costs a first review "
        "several times a never-seen 1,024-13,808-token one)",
    )
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args()
    target = TARGETS.get(args.target or "")
    if target is not None:
        args.rate, args.cpu, args.cold, args.paced_only, args.baseline = target.rate, target.cpu, True, True, True
        args.known = True
        args.profiles, args.profile_every = target.profiles, target.profile_every
    if args.profile_every < 1:
        parser.error("--profile-every must be at least 1")
    if args.known and not args.cold:
        parser.error("--known compares never-seen workloads (--cold) with known ones")
    load_before = os.getloadavg()
    args.cpu = None if args.cpu == "-1" else args.cpu
    pinned = {int(c) for c in args.cpu.split(",")} if args.cpu is not None else set()
    if pinned and hasattr(os, "sched_setaffinity") and len(pinned) < (os.cpu_count() or 1):
        # Keep the clients off the server's cores, so the figures are the server's alone.
        os.sched_setaffinity(0, {c for c in range(os.cpu_count() or 1) if c not in pinned})
    rows = asyncio.run(run(args))
    load = f"load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} CPUs"
    if args.markdown:
        print(
            "| load | requests | throughput (req/s) | client p50 / p99 (ms) | server p50 / p99 / max (ms) "
            "| of which the worker p50 / p99 (ms) | errors | server CPU per review (ms) |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            ratio = f" (x{r['ratio_server_p99']:.1f} baseline)" if "ratio_server_p99" in r else ""
            print(
                f"| {r['load']} | {r['requests']} | {r['throughput_rps']:.0f} | "
                f"{r['client_p50_ms']:.1f} / {r['client_p99_ms']:.1f} | "
                f"{r['server_p50_ms']:.1f} / {r['server_p99_ms']:.1f}{ratio} / {r['server_max_ms']:.1f} | "
                f"{r.get('decide_p50_ms', math.nan):.1f} / {r.get('decide_p99_ms', math.nan):.1f} | "
                f"{r.get('errors', '')} | {r.get('cpu_ms_per_review', math.nan):.2f} |"
            )
        print(f"\n{load}")
    else:
        print(json.dumps({"rows": rows, "load": load}, indent=2))
    if target is not None:
        known = next(r for r in rows if r["load"].startswith("kv-planner, known"))
        print(verdict(target, rows[0], rows[-1], known))


def verdict(target: Target, row: dict[str, Any], echo: dict[str, Any], known: dict[str, Any]) -> str:
    """The measured figures next to the target's bounds, the same load of known workloads' (the issue's
    budget for never-seen ones) and the echo app's (the machine's state)."""
    p99 = row["server_p99_ms"]
    lines = [
        f"target ({target.summary}): server p99 <= {target.server_p99_ms:g} ms: measured {p99:.1f} ms "
        f"({'met' if p99 <= target.server_p99_ms else 'NOT met'}; echo app {echo['server_p99_ms']:.1f} ms)",
        f"  throughput {row['throughput_rps']:.0f} of {target.rate:g} reviews/s, server CPU per review "
        f"{row['cpu_ms_per_review']:.2f} ms (echo app {echo['cpu_ms_per_review']:.2f} ms), of which the event loop "
        f"{row['event_loop_cpu_ms_per_review']:.2f} ms (echo app: all of it); the load generator "
        f"{row['client_cpu_ms_per_review']:.2f} ms (with the echo app {echo['client_cpu_ms_per_review']:.2f} ms); "
        f"the machine busy {row['machine_busy_cores']:.2f} of {os.cpu_count()} cores",
    ]
    lines.append(
        f"  the same load of known workloads: server p99 {known['server_p99_ms']:.1f} ms, CPU per review "
        f"{known['cpu_ms_per_review']:.2f} ms, {known['errors']} errors, the machine busy "
        f"{known['machine_busy_cores']:.2f} cores; never-seen / known: p99 "
        f"{row['ratio_known_server_p99']:.2f}x, CPU {row['ratio_known_cpu']:.2f}x"
    )
    if target.max_errors is not None:
        met = "met" if row["errors"] <= target.max_errors else "NOT met"
        lines.append(f"  errors <= {target.max_errors}: measured {row['errors']} ({met})")
    else:
        lines.append(f"  errors (KVP049/KVP051/HTTP): {row['errors']}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
