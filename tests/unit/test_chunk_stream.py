"""The direct token stream's two ends (app.pool.chunk_receiver, app.pool.chunk_sender),
over a real ZeroMQ IPC socket; Serve's side of the call is a plain async generator."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.pool import chunk_receiver, chunk_sender
from app.pool.chunk_receiver import ChunkReceiver, ChunksLost
from app.pool.chunk_sender import ChunkSender, ChunksUndelivered
from app.pool.records import DirectEnd, Started, StreamTo, TokenChunk

NODE = "node-1"


def chunk(i: int) -> TokenChunk:
    return TokenChunk(f"t{i}", [i], finish_reason="length" if i == 3 else None)


async def collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in stream]


receiver_dirs: list[str] = []


async def until(condition: Any) -> None:
    for _ in range(1000):  # 10 s
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


def run(scenario: Any) -> None:
    async def wrapped() -> None:
        receiver = ChunkReceiver(NODE)
        receiver_dirs.append(receiver.directory)
        sender = ChunkSender(NODE)
        try:
            await scenario(receiver, sender)
        finally:
            sender.close()
            receiver.close()

    asyncio.run(wrapped())
    assert not os.path.exists(receiver_dirs.pop())


def test_a_replica_on_another_host_yields_every_chunk_through_serve():
    async def scenario(receiver: ChunkReceiver, _: ChunkSender) -> None:
        other = ChunkSender("node-2")

        async def call(target: StreamTo) -> AsyncIterator[Any]:
            assert not other.reaches(target)
            yield Started("e")
            for i in range(1, 4):
                yield chunk(i)

        assert await collect(receiver.stream(call)) == [Started("e")] + [
            chunk(i) for i in range(1, 4)
        ]

    run(scenario)


def test_pushed_chunks_follow_the_start_even_when_they_overtake_it():
    async def scenario(receiver: ChunkReceiver, sender: ChunkSender) -> None:
        async def call(target: StreamTo) -> AsyncIterator[Any]:
            assert sender.reaches(target)
            for i in range(1, 4):
                sender.send(target, chunk(i))
            # Serve's Started comes after the pushed chunks have arrived.
            await until(lambda: receiver.received >= 3)
            yield Started("e")
            yield DirectEnd(3)

        assert await collect(receiver.stream(call)) == [Started("e")] + [
            chunk(i) for i in range(1, 4)
        ]
        assert receiver._queues == {}

    run(scenario)


def test_the_stream_waits_for_chunks_the_replica_pushed_before_its_call_ended():
    async def scenario(receiver: ChunkReceiver, sender: ChunkSender) -> None:
        async def call(target: StreamTo) -> AsyncIterator[Any]:
            yield Started("e")
            yield DirectEnd(3)  # Serve's end overtakes the chunks

            async def later() -> None:
                await asyncio.sleep(0.2)
                for i in range(1, 4):
                    sender.send(target, chunk(i))

            pending.append(asyncio.ensure_future(later()))

        pending: list[asyncio.Future[None]] = []
        items = await collect(receiver.stream(call))
        assert items == [Started("e")] + [chunk(i) for i in range(1, 4)]

    run(scenario)


def test_chunks_that_never_arrive_end_the_stream_with_an_error(monkeypatch):
    monkeypatch.setattr(chunk_receiver, "LATE_S", 0.2)

    async def scenario(receiver: ChunkReceiver, sender: ChunkSender) -> None:
        async def call(target: StreamTo) -> AsyncIterator[Any]:
            yield Started("e")
            sender.send(target, chunk(1))
            yield DirectEnd(2)

        got: list[Any] = []
        with pytest.raises(ChunksLost, match="pushed 2 chunks and 1 arrived"):
            async for item in receiver.stream(call):
                got.append(item)
        assert got == [Started("e"), chunk(1)]

    run(scenario)


def test_an_error_from_serve_ends_the_stream_and_late_chunks_are_dropped():
    async def scenario(receiver: ChunkReceiver, sender: ChunkSender) -> None:
        targets: list[StreamTo] = []

        async def call(target: StreamTo) -> AsyncIterator[Any]:
            targets.append(target)
            yield Started("e")
            raise RuntimeError("replica died")

        with pytest.raises(RuntimeError, match="replica died"):
            await collect(receiver.stream(call))
        sender.send(targets[0], chunk(1))  # the dead stream's straggler
        await until(lambda: receiver.undeliverable == 1)
        assert receiver._queues == {}

    run(scenario)


def test_closing_the_stream_cancels_the_serve_call():
    async def scenario(receiver: ChunkReceiver, sender: ChunkSender) -> None:
        ended: list[str] = []

        async def call(target: StreamTo) -> AsyncIterator[Any]:
            try:
                yield Started("e")
                sender.send(target, chunk(1))
                await asyncio.Event().wait()  # generating, for ever
                yield DirectEnd(1)
            finally:
                ended.append("closed")

        stream = receiver.stream(call)
        assert await anext(stream) == Started("e")
        assert await anext(stream) == chunk(1)
        await stream.aclose()  # type: ignore[attr-defined]
        await until(lambda: ended == ["closed"])
        assert receiver._queues == {}

    run(scenario)


def test_a_replica_reaches_only_a_socket_on_its_own_host():
    async def scenario(receiver: ChunkReceiver, sender: ChunkSender) -> None:
        receiver._start()
        here = StreamTo(NODE, receiver.path, 1)
        assert sender.reaches(here)
        assert not sender.reaches(None)
        assert not sender.reaches(StreamTo("node-2", receiver.path, 1))
        assert not sender.reaches(StreamTo(NODE, receiver.path + ".gone", 1))

    run(scenario)


def test_a_send_the_ingress_does_not_take_fails_instead_of_blocking(monkeypatch, tmp_path):
    monkeypatch.setattr(chunk_sender, "HIGH_WATER", 2)
    sender = ChunkSender(NODE)
    target = StreamTo(NODE, str(tmp_path / "nobody"), 1)  # no ingress reads there
    try:
        with pytest.raises(ChunksUndelivered, match="not reading"):
            for i in range(1, 100):
                sender.send(target, chunk(i))
    finally:
        sender.close()
