"""Processes of the end-to-end test: simulated vLLM servers, the kv-planner exporter, a real Prometheus,
and a load generator. Everything binds 127.0.0.1 on free ports; every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

PLANNER = [sys.executable, "-c", "from planner.cli import main; main()"]
ADMISSION = [sys.executable, "-m", "admission"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_ok(url: str) -> bool:
    return httpx.get(url, timeout=2.0).status_code == 200


def wait_until(what: str, check: Callable[[], bool], *, timeout: float, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, OSError):
            if check():
                return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@dataclass
class Process:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.terminate()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=10)

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- {self.name} ({self.log}) ---\n" + "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class SimSpec:
    """One simulated vLLM pod, with the labels Kubernetes service discovery would attach."""

    namespace: str
    pod: str
    model: str
    vllm_version: str
    extra: tuple[str, ...] = ()


@dataclass
class Sim:
    spec: SimSpec
    port: int
    process: Process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_sim(spec: SimSpec, tmp: Path, *, seed: int, time_scale: float, cache: Sequence[str]) -> Sim:
    port = free_port()
    argv = [
        *PLANNER, "simulate", "serve",
        "--model", spec.model,
        "--vllm-version", spec.vllm_version,
        "--port", str(port),
        "--time-scale", str(time_scale),
        "--seed", str(seed),
        *cache,
        *spec.extra,
    ]  # fmt: skip
    sim = Sim(spec, port, Process(f"sim {spec.pod}", argv, tmp / f"sim-{spec.pod}.log"))
    sim.process.start()
    return sim


def prometheus_config(
    sims: Sequence[Sim], exporter_port: int, rules_file: Path, exporter_labels: dict[str, str]
) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules_file)],
        "scrape_configs": [
            {
                # As a PodMonitor on vLLM pods would: namespace/pod target labels from discovery.
                "job_name": "vllm",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{sim.port}"],
                        "labels": {"namespace": sim.spec.namespace, "pod": sim.spec.pod},
                    }
                    for sim in sims
                ],
            },
            {
                # The exporter's series carry the vLLM pod's namespace/pod: honor_labels keeps them.
                "job_name": "kv-planner-exporter",
                "honor_labels": True,
                # Each scrape of the exporter scrapes every simulator first: on a loaded 2-core machine
                # that took over the global 1 s timeout, and the exporter's series went stale.
                "scrape_interval": "2s",
                "scrape_timeout": "2s",
                "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"], "labels": exporter_labels}],
            },
        ],
    }


def start_prometheus(binary: str, config: dict[str, Any], tmp: Path) -> tuple[Process, str]:
    port = free_port()
    config_file = tmp / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    argv = [
        binary,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={tmp / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1h",
        "--log.level=warn",
    ]
    process = Process("prometheus", argv, tmp / "prometheus.log")
    process.start()
    return process, f"http://127.0.0.1:{port}"


@dataclass
class Load:
    """Closed-loop load: `concurrency` clients per simulator, each sending the next request as soon as
    the previous one finishes, with prompts that share prefixes (prefix-cache hits) and lengths that
    overflow the KV cache (preemptions)."""

    urls: Sequence[str]
    models: Sequence[str]
    concurrency: int
    max_seconds: float
    seed: int = 0
    completed: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    async def _client(self, client: httpx.AsyncClient, url: str, model: str, rng: random.Random) -> None:
        deadline = time.monotonic() + self.max_seconds
        while not self._stop.is_set() and time.monotonic() < deadline:
            prompt = list(range(1, 1 + rng.randint(64, 400)))
            body = {"model": model, "prompt": prompt, "max_tokens": rng.randint(32, 320)}
            try:
                response = await client.post(f"{url}/v1/completions", json=body)
            except httpx.HTTPError as exc:
                if not self._stop.is_set():
                    self.errors.append(f"{url}: {type(exc).__name__}: {exc}")
                await asyncio.sleep(0.2)
                continue
            if response.status_code == 200:
                self.completed += 1
            else:
                self.errors.append(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
                await asyncio.sleep(0.2)

    async def _run(self) -> None:
        rng = random.Random(self.seed)
        async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:
            await asyncio.gather(
                *(
                    self._client(client, url, model, random.Random(rng.random()))
                    for url, model in zip(self.urls, self.models, strict=True)
                    for _ in range(self.concurrency)
                )
            )


class PrometheusAPI:
    def __init__(self, base: str) -> None:
        self.base = base
        self.client = httpx.Client(base_url=base, timeout=30.0)

    def get(self, path: str, **params: Any) -> Any:
        response = self.client.get(path, params=params)
        body = response.json()
        if response.status_code != 200 or body.get("status") != "success":
            raise AssertionError(f"{path} {params}: HTTP {response.status_code}: {body}")
        return body["data"]

    def instant(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query_range", query=expr, start=start, end=end, step=step)
        result: list[dict[str, Any]] = data["result"]
        return result

    def label_values(self, label: str, selector: str) -> list[str]:
        values: list[str] = self.get(f"/api/v1/label/{label}/values", **{"match[]": selector})
        return values

    def firing(self, alertname: str) -> list[dict[str, Any]]:
        alerts = self.get("/api/v1/alerts")["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == alertname and a["state"] == "firing"]

    def close(self) -> None:
        self.client.close()


def finite_values(result: list[dict[str, Any]]) -> int:
    """Number of finite samples in an instant or range query result."""
    count = 0
    for series in result:
        samples = series.get("values") or ([series["value"]] if "value" in series else [])
        count += sum(1 for _, v in samples if math.isfinite(float(v)))
    return count
