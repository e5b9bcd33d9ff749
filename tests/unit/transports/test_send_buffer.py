"""``SendBuffer``: messages go out in order, one write at a time; the bound is audio time
(and a count of events); past it the policy is to close the call (``on_overflow``, once) and
drop what waits; a failed socket stops it; ``flush`` waits, but never past its deadline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from voxpipe.transports.base import MAX_EVENTS, SendBuffer


class Socket:
    """A socket whose sends can be held (``gate``) or made to fail."""

    def __init__(self) -> None:
        self.sent: list[str | bytes] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False

    async def write(self, message: str | bytes) -> None:
        await self.gate.wait()
        if self.fail:
            raise ConnectionResetError("gone")
        self.sent.append(message)


class Ages:
    def __init__(self) -> None:
        self.seen: list[float] = []

    def observe(self, amount: float) -> None:
        self.seen.append(amount)


class Buffer:
    def __init__(self, max_audio_ms: float = 100.0) -> None:
        self.socket, self.ages, self.overflows = Socket(), Ages(), 0
        self.buffer = SendBuffer(self.socket.write, max_audio_ms, self._overflow, self.ages)
        self.writer: asyncio.Task[None] | None = None

    def _overflow(self) -> None:
        self.overflows += 1

    def start(self) -> None:
        self.writer = asyncio.create_task(self.buffer.run())


@pytest.fixture
async def buf() -> AsyncIterator[Buffer]:
    made = Buffer()
    yield made
    if made.writer is not None:
        made.writer.cancel()
        await asyncio.gather(made.writer, return_exceptions=True)


async def test_messages_go_out_in_order_and_the_audio_held_goes_back_to_zero(
    buf: Buffer,
) -> None:
    buf.start()
    buf.buffer.put('{"type":"a"}', 0.0)
    buf.buffer.put(b"frame-1", 20.0)
    buf.buffer.put(b"frame-2", 20.0)
    buf.buffer.put('{"type":"b"}', 0.0)
    await buf.buffer.flush(1.0)
    assert buf.socket.sent == ['{"type":"a"}', b"frame-1", b"frame-2", '{"type":"b"}']
    assert buf.buffer.audio_ms == 0 and not buf.buffer.overflowed
    assert len(buf.ages.seen) == 2, "the age of audio is observed, not of events"


async def test_the_bound_is_audio_time_and_overflow_closes_once_and_drops_all(
    buf: Buffer,
) -> None:
    buf.socket.gate.clear()  # the client stopped reading
    buf.start()
    for i in range(5):
        buf.buffer.put(f"frame-{i}".encode(), 20.0)  # exactly 100 ms: still within
    await asyncio.sleep(0)
    assert buf.overflows == 0 and buf.buffer.audio_ms == 100
    buf.buffer.put(b"one too many", 20.0)
    assert buf.overflows == 1 and buf.buffer.overflowed and buf.buffer.audio_ms == 0
    buf.buffer.put(b"later", 20.0)
    buf.buffer.put("later event", 0.0)
    assert buf.overflows == 1, "the call is closed once"
    buf.socket.gate.set()
    await buf.buffer.flush(1.0)
    # The write under way when it overflowed completes; nothing queued or later goes out.
    assert buf.socket.sent in ([], [b"frame-0"]), buf.socket.sent


async def test_events_alone_are_bounded_by_count(buf: Buffer) -> None:
    for i in range(MAX_EVENTS):
        buf.buffer.put(str(i), 0.0)
    assert buf.overflows == 0
    buf.buffer.put("one too many", 0.0)
    assert buf.overflows == 1 and buf.buffer.overflowed


async def test_a_failed_socket_breaks_the_buffer_and_the_writer_ends(buf: Buffer) -> None:
    buf.socket.fail = True
    buf.start()
    buf.buffer.put(b"frame", 20.0)
    assert buf.writer is not None
    await asyncio.wait_for(buf.writer, 1.0)
    assert buf.buffer.broken and buf.buffer.audio_ms == 0 and buf.overflows == 0
    buf.buffer.put(b"after", 20.0)
    assert buf.buffer.audio_ms == 0, "nothing is queued for a peer that is gone"
    await asyncio.wait_for(buf.buffer.flush(5.0), 0.5)  # nothing to wait for


async def test_flush_waits_for_the_socket_but_not_past_its_deadline(buf: Buffer) -> None:
    buf.socket.gate.clear()
    buf.start()
    buf.buffer.put(b"frame", 20.0)
    started = asyncio.get_running_loop().time()
    await buf.buffer.flush(0.1)
    assert 0.09 <= asyncio.get_running_loop().time() - started < 1.0
    assert buf.socket.sent == [] and buf.buffer.audio_ms == 20
    buf.socket.gate.set()
    await buf.buffer.flush(1.0)
    assert buf.socket.sent == [b"frame"] and buf.buffer.audio_ms == 0
