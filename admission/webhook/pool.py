"""Decisions in worker processes that are killed and replaced when a review overruns its budget.

Why processes: a thread cannot be stopped, so a review that runs past its deadline would keep the
decision thread busy and the *next* review (another tenant's) would time out in its place. A process can
be killed. So each review goes to an idle worker with a budget; past the budget the worker is killed (its
half-done work goes with it), the review is answered "undecided" (handler.undecided: Enforce denies by
default), and a fresh worker is forked from a pre-loaded fork server in the background. No other review is
affected: it is on another worker, or waiting for one.

Waiting reviews are served round-robin by tenant (namespace); one tenant may hold at most ``size - 1``
workers at a time (1 of 2), so there is always a worker another tenant can get within its budget; and
each tenant may have at most ``max_waiting`` reviews waiting: a tenant that floods the webhook fills its
own queue (and gets its own reviews answered "undecided"), not the others'. The event loop only moves
bytes: it never plans.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import multiprocessing
import os
import socket
import time
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from admission.webhook import frames
from admission.webhook.worker import Job, Reply, serve
from planner.policy.planning import PlanningBackend

log = logging.getLogger("kv_planner.webhook.pool")

# A review past its budget is killed only if its worker used at least this share of the budget in CPU
# time: on a starved machine (CPU limits, noisy neighbours) a slow review is not a runaway one, and killing
# it would cost a fresh worker with an empty memo, making the next reviews slower still. A starved
# review is answered "undecided" all the same; its worker finishes and returns to the pool (or is killed
# after _LATE_LIMIT seconds).
_OVERRUN_CPU_SHARE = 0.1  # (a review needs milliseconds of CPU; a runaway one burns what it is given)
_LATE_LIMIT = 30.0
_READ_LIMIT = 1 << 20  # the stream's buffer before it stops reading the socket (replies are a few KB)
# A reply is a response body (the patch, warnings: kilobytes); a worker that sends more is broken, and the
# server does not hold it.
_MAX_REPLY = 64 << 20

# Modules the fork server imports (and warms) once; every worker is forked from it with them loaded, so a
# replacement is ready in milliseconds instead of paying the imports and catalog loading again.
_PRELOAD = ["admission.webhook.preload"]


def cpu_limit() -> float:
    """The CPUs this process may use: the cgroup's quota (a container's CPU limit) when there is one, else
    the cores it may run on."""
    cores = float(len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else float(os.cpu_count() or 1)
    sources = (("/sys/fs/cgroup/cpu.max", _cgroup2_quota), ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", _cgroup1_quota))
    for path, parse in sources:
        try:
            with open(path, encoding="ascii") as handle:
                quota = parse(handle.read())
        except (OSError, ValueError):
            continue
        if quota is not None and quota > 0:
            return min(cores, quota)
    return cores


def _cgroup2_quota(text: str) -> float | None:
    """``cpu.max``: ``<quota> <period>`` in microseconds, or ``max`` (no limit)."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    return int(parts[0]) / (int(parts[1]) if len(parts) > 1 else 100_000)


def _cgroup1_quota(text: str) -> float | None:
    quota = int(text.strip())
    if quota <= 0:
        return None
    with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us", encoding="ascii") as handle:
        return quota / int(handle.read().strip())


def workers_for(cpus: float) -> int:
    """Decision workers for ``cpus`` CPUs: one per CPU plus one, so that one namespace (which holds at most
    ``workers - 1``) can keep every CPU busy and another namespace still finds a worker; at least 3."""
    return max(3, math.ceil(cpus) + 1)


class Undecided(Exception):
    """The review could not be decided in time (``reason`` says why: timeout, queue full)."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


class WorkerFailed(Exception):
    """The worker died while deciding (an internal error: answered allowed-unchecked)."""


@dataclass(eq=False)  # identity semantics: workers are kept in a set
class _Worker:
    process: Any
    sock: socket.socket  # the server's end (frames.py); read and written on the event loop once streams exist
    slot: int  # its place in the pool (a replacement takes it over): where reviews with the same key go
    inventory_version: int = -1
    reader: asyncio.StreamReader | None = None  # (made on the event loop at the worker's first review)
    writer: asyncio.StreamWriter | None = None

    async def streams(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(sock=self.sock, limit=_READ_LIMIT)
        return self.reader, self.writer

    def close_streams(self) -> None:
        """Drop the socket from the event loop (call on the loop; the process is killed elsewhere)."""
        if self.writer is not None:
            self.writer.transport.abort()

    def usable(self) -> bool:
        """Its process runs and has not closed its end (a worker may end while idle: the OOM killer)."""
        return self.process.is_alive() and not (self.reader is not None and self.reader.at_eof())


class DecisionPool:
    """``size`` worker processes behind a per-tenant fair queue."""

    def __init__(
        self,
        size: int,
        backend_factory: Callable[[], PlanningBackend],
        *,
        max_waiting: int = 16,
        max_rss: int = 0,
        log_level: str = "warning",
        start_timeout: float = 120.0,
        on_restart: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self.size = size
        self._factory = backend_factory
        self._max_waiting = max_waiting
        self._max_rss = max_rss
        self._log_level = log_level
        self._start_timeout = start_timeout
        self._on_restart = on_restart
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(_PRELOAD)
        self._idle: list[_Worker] = []
        self._waiting: OrderedDict[str, deque[asyncio.Future[_Worker]]] = OrderedDict()
        self._all: set[_Worker] = set()
        self._active: dict[str, int] = {}  # workers held, by tenant
        self._per_tenant = max(1, size - 1)
        # Process starts and kills (blocking) run here, never on the event loop; the exchanges with the
        # workers run on the loop itself (frames.py).
        self._threads = ThreadPoolExecutor(max_workers=size + 1, thread_name_prefix="kv-planner-pool")
        self._closed = False
        self._serial = 0  # of the jobs sent (frames carry it both ways)

    # -- life cycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start every worker and wait until each has warmed up (blocking; call off the event loop)."""
        workers = list(self._threads.map(self._spawn, range(self.size)))
        self._idle.extend(workers)

    def _spawn(self, slot: int) -> _Worker:
        """Start one worker and wait for its "ready" (blocking: runs on a pool thread)."""
        parent, child = socket.socketpair()
        process = self._ctx.Process(
            target=serve,
            args=(child, self._factory, self._max_rss, self._log_level),
            name="kv-planner-decide",
            daemon=True,
        )
        try:
            process.start()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        parent.settimeout(self._start_timeout)
        try:
            started = frames.receive(parent) == "ready"
        except Exception:  # (closed, timed out (an OSError), or not a frame of ours)
            started = False
        if not started:
            process.kill()
            parent.close()
            raise RuntimeError("a decision worker did not start")
        parent.setblocking(False)  # (from now on the event loop reads and writes it)
        worker = _Worker(process=process, sock=parent, slot=slot)
        self._all.add(worker)
        return worker

    def _kill(self, worker: _Worker) -> None:
        """End the process (blocking: runs on a pool thread, after close_streams on the loop)."""
        self._all.discard(worker)
        with contextlib.suppress(Exception):
            worker.process.kill()
            worker.process.join(5)
        with contextlib.suppress(Exception):
            worker.sock.close()

    def close(self) -> None:
        self._closed = True
        for worker in list(self._all):
            worker.close_streams()
            self._kill(worker)
        self._threads.shutdown(wait=False, cancel_futures=True)

    def alive(self) -> int:
        # (a copy: pool threads add and remove workers while this runs on the loop)
        return sum(1 for w in list(self._all) if w.process.is_alive())

    # -- fair queue -----------------------------------------------------------------------------------

    def _hold(self, tenant: str) -> None:
        self._active[tenant] = self._active.get(tenant, 0) + 1

    def _unhold(self, tenant: str) -> None:
        left = self._active.get(tenant, 0) - 1
        if left > 0:
            self._active[tenant] = left
        else:
            self._active.pop(tenant, None)

    def _release(self, worker: _Worker) -> None:
        """Hand a free worker to the next waiting tenant (round-robin) under its share, else keep it idle."""
        for tenant in list(self._waiting):
            if self._active.get(tenant, 0) >= self._per_tenant:
                continue
            queue = self._waiting[tenant]
            while queue:
                future = queue.popleft()
                if not future.done():
                    if queue:
                        self._waiting.move_to_end(tenant)
                    else:
                        del self._waiting[tenant]
                    self._hold(tenant)
                    future.set_result(worker)
                    return
            del self._waiting[tenant]
        self._idle.append(worker)

    def _give_back(self, tenant: str, worker: _Worker | None) -> None:
        """A review of ``tenant`` is done with its worker (None: the worker is being replaced)."""
        self._unhold(tenant)
        if worker is not None:
            self._release(worker)
        elif self._idle and self._waiting:
            self._release(self._idle.pop())  # the tenant's share freed up: a waiting review may go now

    def _slot_of(self, key: str) -> int:
        return zlib.crc32(key.encode()) % self.size

    async def _acquire(self, tenant: str, timeout: float, key: str) -> _Worker:
        if self._idle and tenant not in self._waiting and self._active.get(tenant, 0) < self._per_tenant:
            self._hold(tenant)
            # The worker that had this key's reviews before, if it is free: its memo holds their plans.
            # Only a choice among free workers, so the fair queue is the same either way.
            slot = self._slot_of(key)
            index = next((i for i, w in enumerate(self._idle) if w.slot == slot), len(self._idle) - 1)
            return self._idle.pop(index)
        queue = self._waiting.setdefault(tenant, deque())
        if len(queue) >= self._max_waiting:
            if not queue:
                del self._waiting[tenant]
            raise Undecided(f"{len(queue)} reviews of this namespace already waiting", "queue-full")
        future: asyncio.Future[_Worker] = asyncio.get_running_loop().create_future()
        queue.append(future)
        await asyncio.wait({future}, timeout=max(0.0, timeout))
        if future.done():  # (not "in done": a worker may have been handed over since the wait ended)
            return future.result()  # (_release counted it for the tenant)
        future.cancel()
        with contextlib.suppress(ValueError):
            queue.remove(future)
        if not queue and self._waiting.get(tenant) is queue:
            del self._waiting[tenant]
        raise Undecided(f"no decision worker free within {timeout:.2f}s", "queue-timeout")

    # -- one review -----------------------------------------------------------------------------------

    async def decide(self, make_job: Callable[[int], Job], tenant: str, budget: float, key: str = "") -> Reply:
        """Run one review within ``budget`` seconds, on the worker of ``key`` when it is free (reviews of
        one workload: the same key). Raises Undecided or WorkerFailed."""
        deadline = time.monotonic() + budget
        worker = await self._acquire(tenant, budget, key)
        while not worker.usable():  # (it ended while idle: the OOM killer, a crash; no review is lost to it)
            self._give_back(tenant, None)
            self._replace(worker, "failed")
            worker = await self._acquire(tenant, max(0.0, deadline - time.monotonic()), key)
        job = make_job(worker.inventory_version)
        cpu_before = _cpu_seconds(worker.process.pid)
        self._serial += 1
        exchange = asyncio.ensure_future(_exchange(worker, self._serial, job))
        try:
            await asyncio.wait({exchange}, timeout=max(0.0, deadline - time.monotonic()))
            reply = exchange.result() if exchange.done() else None
        except BaseException:  # (the worker failed, or this review was cancelled: its worker is not reused)
            self._give_back(tenant, None)
            self._replace(worker, "failed", exchange)
            raise
        if reply is None:
            self._give_back(tenant, None)
            cpu_after = _cpu_seconds(worker.process.pid)
            used = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
            if used is None or used >= _OVERRUN_CPU_SHARE * budget:
                self._replace(worker, "overrun", exchange)
                raise Undecided(f"review took longer than {budget:.2f}s", "overrun")
            self._finish_late(worker, exchange, job.inventory_version)
            raise Undecided(f"review not decided within {budget:.2f}s (CPU-starved)", "starved")
        worker.inventory_version = job.inventory_version
        if reply.recycle:
            self._give_back(tenant, None)
            self._replace(worker, "memory")
        else:
            self._give_back(tenant, worker)
        return reply

    def _finish_late(self, worker: _Worker, exchange: asyncio.Future[Reply], version: int) -> None:
        """Let a starved worker finish its review (the answer is dropped), then return it to the pool, or
        replace it when it did not answer within _LATE_LIMIT or outgrew its memory bound meanwhile."""

        async def wait() -> Reply | None:
            try:
                return await asyncio.wait_for(exchange, _LATE_LIMIT)  # (cancels the exchange past the limit)
            except Exception:  # (asyncio.TimeoutError; WorkerFailed)
                return None

        def done(future: asyncio.Future[Reply | None]) -> None:
            if self._closed:
                worker.close_streams()
                return
            reply = None if future.cancelled() else future.result()
            if reply is None:
                self._replace(worker, "overrun", exchange)
            elif reply.recycle:
                self._replace(worker, "memory")
            else:
                worker.inventory_version = version
                self._release(worker)

        asyncio.ensure_future(wait()).add_done_callback(done)

    def _replace(self, worker: _Worker, reason: str, exchange: asyncio.Future[Reply] | None = None) -> None:
        """Kill ``worker`` and start its replacement in the background (the review is answered already).

        Its exchange, if one may still run, is cancelled and has unwound before the streams are closed on
        the loop, and only then is the socket closed on a pool thread: no read of the old socket is left
        registered when a new worker's socket may get the same descriptor number."""
        if self._closed:  # (shutting down: close() ends every process; nothing is replaced)
            if exchange is not None:
                exchange.cancel()
            worker.close_streams()
            return
        self._on_restart(reason)
        loop = asyncio.get_running_loop()

        def replace() -> _Worker | None:
            self._kill(worker)
            if self._closed:
                return None
            try:
                fresh = self._spawn(worker.slot)
            except Exception as error:
                log.error("could not restart a decision worker: %s", error)
                return None
            if self._closed:  # (close() ran while it started: it did not see this one)
                self._kill(fresh)
                return None
            return fresh

        async def retire() -> _Worker | None:
            if exchange is not None:
                exchange.cancel()
                await asyncio.wait({exchange})
                if not exchange.cancelled():
                    exchange.exception()  # (seen: its failure is the reason for the replacement)
            worker.close_streams()
            return await loop.run_in_executor(self._threads, replace)

        def done(future: asyncio.Future[_Worker | None]) -> None:
            fresh = future.result() if not future.cancelled() and future.exception() is None else None
            if fresh is not None and not self._closed:
                self._release(fresh)

        asyncio.ensure_future(retire()).add_done_callback(done)


def _process_cpu_clock(pid: int) -> int:
    """The clock id of process ``pid``'s CPU time on Linux (the kernel's ``MAKE_PROCESS_CPUCLOCK(pid,
    CPUCLOCK_SCHED)``; what ``clock_getcpuclockid(3)`` returns, which Python does not expose)."""
    return (~pid << 3) | 2  # (a pid past 2^28 overflows clock_gettime's int: the /proc fallback reads it)


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process, or None where that cannot be read.

    One ``clock_gettime`` on the process's CPU clock (~1 us, nanosecond resolution) rather than reading
    ``/proc/<pid>/stat`` (~40 us of the event loop's time on every review, in 10 ms ticks); the file where
    the clock is refused."""
    if pid <= 0:  # (0 and -1 would name the calling process's own clock)
        return None
    try:
        return time.clock_gettime(_process_cpu_clock(pid))
    except (AttributeError, OSError, OverflowError):  # (no such clock here, or no such process)
        pass
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


async def _exchange(worker: _Worker, serial: int, job: Job) -> Reply:
    """Send ``job`` and read the reply, on the event loop (the caller bounds the time). Each job goes with
    a serial number the reply must carry back: a worker that answered anything but this job (two replies
    to one job, a bug) fails this review instead of answering another tenant's with it."""
    try:
        reader, writer = await worker.streams()
        await frames.write(writer, (serial, job))
        answer = await frames.read(reader, _MAX_REPLY)
    except (EOFError, OSError) as error:  # (asyncio.IncompleteReadError and FrameError are EOFErrors)
        raise WorkerFailed(f"decision worker ended ({type(error).__name__})") from None
    except Exception as error:  # (a reply that does not unpickle)
        raise WorkerFailed(f"unreadable reply ({type(error).__name__})") from None
    reply = answer[1] if isinstance(answer, tuple) and len(answer) == 2 and answer[0] == serial else None
    if not isinstance(reply, Reply) or not reply.body:
        raise WorkerFailed(reply.error if isinstance(reply, Reply) and reply.error else "not this job's reply")
    return reply
