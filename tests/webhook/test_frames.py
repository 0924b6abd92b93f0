"""The wire between the server and its workers (frames.py): what one end writes the other reads, frame by
frame, on the worker's blocking socket and on the server's event loop; a closed peer or an impossible
length is an EOFError (the pool's "worker failed"), never a hang or a huge allocation."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from admission.webhook import frames
from admission.webhook.worker import Reply

pytestmark = pytest.mark.timeout(60)

VALUES = ["ready", Reply(body=b"{}" * 10, decision="allow", codes=("KVP002",), seconds=0.5), b"x" * 3_000_000, None]


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    with a, b:
        yield a, b


def test_blocking_ends_read_what_was_written_frame_by_frame(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    # (a frame larger than the socket's buffer: the writer blocks until the reader drains it)
    writer = threading.Thread(target=lambda: [frames.send(a, value) for value in VALUES])
    writer.start()
    assert [frames.receive(b) for _ in VALUES] == VALUES
    writer.join()


def test_the_event_loop_end_speaks_to_the_blocking_end(pair: tuple[socket.socket, socket.socket]) -> None:
    server, worker = pair

    def echo() -> None:  # the worker: every frame it reads goes back
        for _ in VALUES:
            frames.send(worker, frames.receive(worker))

    async def run() -> list[object]:
        server.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=server)
        got = []
        for value in VALUES:
            await frames.write(writer, value)
            got.append(await frames.read(reader))
        writer.transport.abort()
        return got

    thread = threading.Thread(target=echo)
    thread.start()
    assert asyncio.run(run()) == VALUES
    thread.join()


def test_a_peer_that_closes_mid_frame_is_an_eof(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    whole = frames.encode(VALUES[1])
    a.sendall(whole[: len(whole) // 2])
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(EOFError):
        frames.receive(b)

    async def run() -> None:
        c, d = socket.socketpair()
        with c:
            c.sendall(whole[:5])  # (not even a whole header)
            c.shutdown(socket.SHUT_WR)
            d.setblocking(False)
            reader, writer = await asyncio.open_connection(sock=d)
            with pytest.raises(EOFError):
                await frames.read(reader)
            writer.transport.abort()

    asyncio.run(run())


def test_an_impossible_length_is_refused_before_anything_is_allocated(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    a.sendall(struct.pack("!Q", frames.MAX_FRAME + 1))
    with pytest.raises(frames.FrameError):
        frames.receive(b)
    assert issubclass(frames.FrameError, EOFError)  # (the pool's "the worker ended")


def test_the_event_loop_end_refuses_a_frame_over_its_limit(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair

    async def run() -> None:
        b.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=b)
        a.sendall(frames.encode(b"x" * 2_000))
        with pytest.raises(frames.FrameError):
            await frames.read(reader, limit=1_000)
        writer.transport.abort()

    asyncio.run(run())


def test_a_silent_peer_times_out_on_a_socket_with_a_timeout(pair: tuple[socket.socket, socket.socket]) -> None:
    _, b = pair
    b.settimeout(0.05)
    with pytest.raises(OSError):  # (socket.timeout: the pool's start-up check)
        frames.receive(b)
