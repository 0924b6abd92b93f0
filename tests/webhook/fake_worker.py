"""A decision worker that does what its job says instead of deciding (the pool tests' stand-in, importable
by the pool's worker processes): the job's payload is a command (``sleep:S``, ``burn:S``, ``exit``,
``garbage:S``, ``recycle:S``, ``twice``, anything else: echo), so each of the pool's paths can be driven
on purpose."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from admission.webhook import frames
from admission.webhook.worker import Reply


def reply_to(command: str, recycle: bool = False) -> Reply:
    return Reply(body=f"{command[:40]}|pid={os.getpid()}".encode(), decision="allow", codes=(), recycle=recycle)


def serve(sock: socket.socket, factory: Callable[[], Any], max_rss: int, log_level: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    frames.send(sock, "ready")
    while True:
        try:
            serial, job = frames.receive(sock)
        except (EOFError, OSError):
            return
        command = job.payload.decode()
        op, _, arg = command.partition(":")
        if op in ("sleep", "garbage", "recycle"):
            time.sleep(float(arg or 0))  # (a starved review: slow, without using CPU)
        elif op == "burn":  # (a runaway review: it burns the CPU it is given)
            end = time.monotonic() + float(arg)
            while time.monotonic() < end:
                pass
        elif op == "exit":  # (a crash mid-review)
            os._exit(3)
        if op == "garbage":  # (a reply that does not unpickle)
            sock.sendall(frames._HEADER.pack(5) + b"\xff\xff\xff\xff\xff")
            continue
        if op == "twice":  # (a broken worker: two replies to one job)
            frames.send(sock, (serial, reply_to("first")))
        frames.send(sock, (serial, reply_to(command, recycle=op == "recycle")))
        if op == "recycle":
            return
