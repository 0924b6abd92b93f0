"""Misbehaving HTTP servers on 127.0.0.1 for exporter tests and benchmarks."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType


class RawServer:
    """Accepts connections on a free port and answers each with ``reply`` (None = never answer), after
    ``delay`` seconds."""

    def __init__(self, reply: bytes | None, *, delay: float = 0.0) -> None:
        self.reply = reply
        self.delay = delay
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            if self.reply is None:
                self._held.append(conn)  # hang: read nothing, answer nothing
                continue
            threading.Thread(target=self._answer, args=(conn, self.reply), daemon=True).start()

    def _answer(self, conn: socket.socket, reply: bytes) -> None:
        try:
            conn.settimeout(5)
            conn.recv(65536)
            if self.delay:
                time.sleep(self.delay)
            conn.sendall(reply)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._sock.close()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def hanging_server() -> RawServer:
    return RawServer(None)


def error_server(status: int = 500) -> RawServer:
    body = b"internal server error\n"
    head = f"HTTP/1.1 {status} Error\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
    return RawServer(head + body)


def page_server(body: bytes, *, delay: float = 0.0) -> RawServer:
    """Answers every request with ``body`` as a 200 text page, after ``delay`` seconds."""
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return RawServer(head.encode() + body, delay=delay)
