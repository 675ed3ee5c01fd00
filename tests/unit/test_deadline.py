"""One timer per stream: expiry while waiting, expiry while busy, and others' cancels."""

import asyncio

import pytest

from app.flow.deadline import Deadline


async def _slow(delay: float):
    yield "first"
    await asyncio.sleep(delay)
    yield "second"


def test_items_within_the_deadline_pass_through():
    async def run():
        deadline = Deadline(5)
        items = _slow(0)
        got = [await deadline.next(items), await deadline.next(items)]
        with pytest.raises(StopAsyncIteration):
            await deadline.next(items)
        deadline.cancel()
        return got

    assert asyncio.run(run()) == ["first", "second"]


def test_expiry_while_waiting_is_a_timeout_and_leaves_the_task_uncancelled():
    async def run():
        deadline = Deadline(0.05)
        items = _slow(10)
        assert await deadline.next(items) == "first"
        with pytest.raises(TimeoutError):
            await deadline.next(items)
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        await asyncio.sleep(0)  # no cancellation left pending on this task

    asyncio.run(run())


def test_expiry_while_busy_elsewhere_is_seen_at_the_next_item():
    async def run():
        deadline = Deadline(0.02)
        items = _slow(0)
        assert await deadline.next(items) == "first"
        await asyncio.sleep(0.05)  # e.g. writing to a slow client
        with pytest.raises(TimeoutError):
            await deadline.next(items)

    asyncio.run(run())


def test_a_cancel_from_elsewhere_stays_a_cancel():
    async def run():
        deadline = Deadline(10)
        items = _slow(10)
        await deadline.next(items)
        waiter = asyncio.ensure_future(deadline.next(items))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        deadline.cancel()

    asyncio.run(run())
