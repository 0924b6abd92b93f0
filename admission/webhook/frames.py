"""The wire between the webhook server and its decision workers: length-prefixed pickles on a socket pair.

The server reads and writes its end on the event loop (asyncio streams): a review's job is written and its
reply read in the loop's own turns. Before, a thread did each exchange with multiprocessing's blocking
``Connection``; every review then paid a hand-over to that thread and back, and the thread waited for the
GIL while the loop decoded other reviews (the loop's switch interval, 5 ms, at worst), which held the
worker longer than its decision. The worker, which does one thing at a time, uses plain blocking calls.

Both ends are kv-planner's own processes (the worker is the server's child), so pickle is safe here: no
manifest bytes are unpickled (a review travels inside a :class:`~admission.webhook.worker.Job` as the
marshal or JSON bytes the server produced). A frame longer than :data:`MAX_FRAME` is a broken peer.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
from typing import Any

_HEADER = struct.Struct("!Q")  # the pickle's length in bytes
MAX_FRAME = 1 << 30  # (a job carries at most one request body and the node inventory; replies are small)


class FrameError(EOFError):
    """The peer sent what is not a frame (an impossible length): treated like a closed pipe."""


def encode(value: Any) -> bytes:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def _length(header: bytes | bytearray, limit: int = MAX_FRAME) -> int:
    (length,) = _HEADER.unpack(header)
    if length > limit:
        raise FrameError(f"frame of {length} bytes (at most {limit})")
    return int(length)


# -- the worker's end: blocking ---------------------------------------------------------------------------


def send(sock: socket.socket, value: Any) -> None:
    sock.sendall(encode(value))


def receive(sock: socket.socket) -> Any:
    """The next value (raises EOFError when the peer closed, TimeoutError past the socket's timeout)."""
    return pickle.loads(_exactly(sock, _length(_exactly(sock, _HEADER.size))))


def _exactly(sock: socket.socket, count: int) -> bytearray:
    buffer = bytearray(count)
    view, got = memoryview(buffer), 0
    while got < count:
        read = sock.recv_into(view[got:])
        if read == 0:
            raise EOFError("the peer closed the socket")
        got += read
    return buffer


# -- the server's end: the event loop ---------------------------------------------------------------------


async def write(writer: asyncio.StreamWriter, value: Any) -> None:
    writer.write(encode(value))
    await writer.drain()  # (returns at once unless the worker stopped reading: the socket buffer is full)


async def read(reader: asyncio.StreamReader, limit: int = MAX_FRAME) -> Any:
    """The next value (raises asyncio.IncompleteReadError, an EOFError, when the peer closed, and
    FrameError for a frame longer than ``limit`` bytes, before reading it)."""
    return pickle.loads(await reader.readexactly(_length(await reader.readexactly(_HEADER.size), limit)))
