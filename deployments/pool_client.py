"""A :class:`PoolClient` that reaches an engine pool through a Ray Serve handle."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from typing import Any

from app.flow.migration import LostCause, ReplicaLost
from app.kv.failure import describe_failure
from app.kv.fallback import Transport
from app.pool.chunk_receiver import ChunkReceiver
from app.pool.client import PoolBusy, PoolClient
from app.pool.records import GenerateRequest, KvRelease, PrefillResult, Started, TokenChunk

logger = logging.getLogger("splitserve.pool_client")

_RELEASE_TIMEOUT_S = 10.0


class ServePoolClient(PoolClient):
    """Calls `LLMServer` replicas; Serve's router picks the replica.

    With ``grpc``, calls go by value over Serve's gRPC channel, except those whose
    request or result holds a Ray object reference (object-store KV): those stay Ray
    actor calls, so Ray keeps the referenced KV alive while it is in flight. With a
    ``receiver``, a replica on this host pushes a stream's chunks to it instead
    (:mod:`app.pool.chunk_receiver`).
    """

    def __init__(
        self,
        handle: Any,
        grpc: bool = False,
        on_release: Callable[[str], None] | None = None,
        receiver: ChunkReceiver | None = None,
    ) -> None:
        self.handle = handle
        self.on_release = on_release  # each early free's outcome (metrics)
        self.receiver = receiver
        self._stream_handle = handle.options(stream=True)
        self._fast = handle.options(_by_reference=False) if grpc else handle
        self._fast_stream = self._fast.options(stream=True)

    def prefill(
        self, request: GenerateRequest, transport: Transport
    ) -> AsyncIterator[Started | PrefillResult]:
        handle = self._stream_handle if transport is Transport.OBJECT_STORE else self._fast_stream
        return _relay(handle.prefill.remote(request, transport))

    def generate(self, request: GenerateRequest) -> AsyncIterator[Started | TokenChunk]:
        handle = self._stream_handle if request.kv_object is not None else self._fast_stream
        if self.receiver is None:
            return _relay(handle.generate.remote(request))
        return self.receiver.stream(
            lambda target: _relay(handle.generate.remote(replace(request, stream_to=target)))
        )

    async def release(self, result: PrefillResult) -> None:
        if not result.replica or result.kv_transfer_params is None:
            return
        release = KvRelease(result.replica, result.kv_transfer_params)
        try:
            async with asyncio.timeout(_RELEASE_TIMEOUT_S):
                outcome = str(await self._fast.release_kv.remote(release))
        except Exception as exc:  # the lease frees the blocks anyway
            outcome = "failed"
            logger.warning(
                "could not free KV blocks on prefill replica %s (its lease will): %s",
                result.replica,
                exc,
            )
        if self.on_release is not None:
            self.on_release(outcome)


async def _relay(stream: Any) -> AsyncIterator[Any]:
    """Re-yield a Serve streaming response; stopping early cancels the call, which
    aborts the request inside the replica's engine. A full queue is :class:`PoolBusy`; a
    replica or engine that died is :class:`ReplicaLost`."""
    from ray.serve.exceptions import BackPressureError

    finished = False
    try:
        async for item in stream:
            yield item
        finished = True
    except BackPressureError as exc:
        finished = True  # never queued: nothing to cancel
        raise PoolBusy(str(exc)) from exc
    except Exception as exc:
        cause = lost_cause(exc)
        if cause is None:
            raise
        raise ReplicaLost(cause, describe_failure(exc), certain=not unreachable(exc)) from exc
    finally:
        if not finished:
            stream.cancel()


def _replica_gone() -> tuple[type[BaseException], ...]:
    from ray import exceptions

    return (
        exceptions.RayActorError,
        exceptions.ActorUnavailableError,
        exceptions.WorkerCrashedError,
    )


def lost_cause(exc: BaseException) -> LostCause | None:
    """Whether ``exc`` says the replica serving a call died (or only its engine), else None."""
    for error in _chain(exc):
        if isinstance(error, _replica_gone()):
            return LostCause.REPLICA_DIED
        if type(error).__name__ == "EngineDeadError":  # vllm.v1.engine.exceptions
            return LostCause.ENGINE_DIED
    return None


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says only that the replica cannot be reached for now (Ray's
    ``ActorUnavailableError``), not that it died: what it was doing may go on."""
    from ray.exceptions import ActorUnavailableError

    return any(isinstance(error, ActorUnavailableError) for error in _chain(exc))


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it wraps (Ray's ``cause``, ``__cause__``, ``__context__``)."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        yield error
        pending += [getattr(error, "cause", None), error.__cause__, error.__context__]
