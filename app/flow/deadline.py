"""A request's deadline as one timer for its whole stream, not one per streamed item.

``asyncio.timeout`` around each ``await anext(stream)`` arms and cancels a timer per
item (about 10 µs each, per chunk of every stream). :class:`Deadline` arms one timer per
request: when it passes, the task waiting for the stream's next item is cancelled and
sees :class:`TimeoutError`; a task busy elsewhere (writing to its client) sees it at
its next :meth:`Deadline.next`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")


class Deadline:
    """Fires once, ``seconds`` after it is made (make it inside the running loop)."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._waiter: asyncio.Task[object] | None = None
        self._cancelled: asyncio.Task[object] | None = None
        self._handle = asyncio.get_running_loop().call_later(max(seconds, 0.0), self._expire)

    def _expire(self) -> None:
        self.expired = True
        if self._waiter is not None:
            self._cancelled = self._waiter
            self._waiter.cancel()

    async def next(self, items: AsyncIterator[T]) -> T:
        """``items``' next item; :class:`TimeoutError` once the deadline has passed.

        Raises :class:`StopAsyncIteration` at the end of ``items``, like ``anext``.
        """
        if self.expired:
            raise TimeoutError
        task = asyncio.current_task()
        self._waiter = task
        try:
            return await anext(items)
        except asyncio.CancelledError:
            # Ours if we cancelled this task and no one else also did.
            if task is not None and self._cancelled is task and task.uncancel() == 0:
                raise TimeoutError from None
            raise
        finally:
            self._waiter = None

    def cancel(self) -> None:
        """Disarm the timer (the stream ended)."""
        self._handle.cancel()
