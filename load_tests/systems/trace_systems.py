"""What the trace benchmark (:mod:`load_tests.serving.trace_bench`) sets on splitserve so
that it refuses and gives up no work vLLM's server would wait for: admission's budget
and the transport's timeouts, from the loosest SLO profile's TTFT."""

from __future__ import annotations

import math

from app.config import AdmissionConfig
from app.config.transport import TransportConfig


def admission_budget(loosest_ttft_s: float) -> float:
    """The admission budget (``ttft_budget_s``) under which splitserve's admission refuses
    no request the loosest profile could still meet: each of its wait rules (the oldest
    wait at ``headroom`` of the budget, the predicted wait at ``predicted_share``) then
    fires only past that profile's TTFT."""
    rules = AdmissionConfig()
    share = min(rules.headroom, rules.predicted_share or rules.headroom)
    return math.ceil(100 * loosest_ttft_s / share) / 100


def transport_timeouts(loosest_ttft_s: float) -> dict[str, float]:
    """The transport's timeouts, each at least the loosest profile's TTFT (the shipped
    value where that is longer), and a KV lease that admits a read as late as the
    transfer may wait: on a slow host a long prompt's prefill can outrun the shipped 10 s,
    and a prefill given up is redone on decode, work vLLM's server (which gives up on
    nothing) never does."""
    shipped = TransportConfig()
    transfer = max(shipped.transfer_timeout_s, loosest_ttft_s)
    # A read is refused past kv_lease_s - (kv_lease_s // 6 + 2) s after the prefill.
    lease = max(shipped.kv_lease_s, math.ceil((transfer + 2) * 6 / 5) + 1)
    return {
        "prefill_queue_timeout_s": max(shipped.prefill_queue_timeout_s, loosest_ttft_s),
        "prefill_timeout_s": max(shipped.prefill_timeout_s, loosest_ttft_s),
        "transfer_timeout_s": transfer,
        "kv_lease_s": lease,
    }
