"""What the prefix router expected a request's replica to hold, by request id.

The prefix-affinity router (in the ingress's process) notes, as it routes a request, how
many of its prompt's tokens it took the chosen replica's cache to hold; the orchestrator
takes the note for the request's report (``splitserve.routed_cached_tokens``), beside
what the engine found (``usage.prompt_tokens_details.cached_tokens``). A request routed
for blocks its replica no longer held is a wrong guess (load_tests.routing.prefix_index_bench).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

MAX_NOTES = 4096  # about the requests in flight

_NOTES: OrderedDict[str, int] = OrderedDict()
_LOCK = threading.Lock()


def note(request_id: str, tokens: int) -> None:
    with _LOCK:
        _NOTES[request_id] = tokens
        _NOTES.move_to_end(request_id)
        while len(_NOTES) > MAX_NOTES:
            _NOTES.popitem(last=False)


def take(request_id: str) -> int | None:
    """The note for ``request_id`` (None: none), which is dropped."""
    with _LOCK:
        return _NOTES.pop(request_id, None)
