"""Why a decode engine reads no KV: its prefill replica is gone (fenced), or the engine's
load of it failed or came too late. :class:`app.engine.server.EngineServer` asks these
before and after a remote request's first step."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from app.kv import peer_fence, read_deadline
from app.kv.failure import FailureKind, TransferFailure
from app.kv.link_meter import LinkMeter
from app.pool.records import GenerateRequest

logger = logging.getLogger("splitserve.engine")


async def fenced(
    engine: Any,
    request: GenerateRequest,
    peer_alive: Callable[[str], Awaitable[bool]] | None,
    links: LinkMeter | None,
) -> TransferFailure | None:
    """Refuse NIXL KV whose prefill replica is gone, at once: its blocks died with it
    (a read would wait for NIXL to time out). The engine forgets that peer now."""
    kv = request.kv_transfer_params
    if kv is None or not request.kv_source or peer_alive is None:
        return None
    try:
        alive = await peer_alive(request.kv_source)
    except Exception as exc:  # a lookup that failed (GCS busy): fall back, unread
        logger.warning(
            "could not tell whether prefill replica %s lives: %r", request.kv_source, exc
        )
        return TransferFailure(
            FailureKind.KV_FENCED,
            f"could not tell whether prefill replica {request.kv_source}, which held "
            "the KV, still lives",
        )
    if alive:
        return None
    if links is not None:
        links.forget(request.kv_source)
    engine_id = str(kv.get("remote_engine_id") or "")
    try:
        await engine.collective_rpc(peer_fence.METHOD, args=([engine_id],))
    except Exception:  # forgetting is housekeeping; the refusal stands
        logger.warning("could not make the engine forget NIXL peer %s", engine_id)
    return TransferFailure(
        FailureKind.KV_FENCED,
        f"prefill replica {request.kv_source} (engine {engine_id}), which held the KV, is gone",
    )


async def load_failure(engine: Any, request: GenerateRequest) -> TransferFailure:
    """Why the engine could not load a request's KV: its read refused as too late
    (:mod:`app.kv.read_deadline`), or the load itself failed."""
    if request.kv_transfer_params is not None and request.kv_expires_at is not None:
        try:
            answers = await engine.collective_rpc(
                read_deadline.METHOD, args=([request.request_id],)
            )
        except Exception:  # an engine without the extension: a plain load failure
            answers = [[]]
        if request.request_id in answers[0]:
            late = time.time() - request.kv_expires_at
            return TransferFailure(
                FailureKind.KV_EXPIRED,
                f"the decode engine refused to read the KV {late:.1f} s after its "
                "deadline (prefill's lease may have freed the blocks)",
            )
    return TransferFailure(FailureKind.KV_LOAD, "the decode engine could not load the KV")
