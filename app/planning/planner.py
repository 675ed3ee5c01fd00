"""Which prefill:decode split (or colocated) gives the most goodput per accelerator.

For each candidate topology with ``accelerators`` engines in all (every P:D split with at
least one of each, and all of them colocated), the simulator replays the workload at a
Poisson rate, and the goodput search (:func:`app.planning.goodput.find_goodput`: sweep
the rate up, then bisect) finds the highest rate at which at least 90% of requests meet
both the TTFT and the TPOT SLO. Candidates rank by goodput per accelerator.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planning.engine_profile import EngineProfile
from app.planning.frontend import FrontEndCost
from app.planning.goodput import SLO, attainment, find_goodput, requests_at
from app.planning.simulator import Topology, poisson_arrivals, simulate


@dataclass(frozen=True)
class Plan:
    topology: Topology
    goodput: float  # req/s
    tried: tuple[tuple[float, float], ...]  # (rate, attainment)

    @property
    def per_accelerator(self) -> float:
        return self.goodput / self.topology.accelerators


def goodput(
    profile: EngineProfile,
    topology: Topology,
    lengths: list[tuple[int, int]],
    ttft_s: float,
    tpot_s: float,
    target: float = 0.9,
    start_rate: float = 1.0,
    seeds: int = 3,
    bisections: int = 6,
    duration_s: float = 60.0,
) -> Plan:
    """Goodput of ``topology`` on the workload ``lengths`` (prompt, output) per request.

    Each rate simulates at least ``duration_s`` of arrivals (``lengths`` repeated as
    needed): a short burst drains within the SLO at any rate.
    """

    slo = SLO(ttft_s, tpot_s)

    def share(rate: float) -> float:
        count = requests_at(rate, duration_s, len(lengths))
        workload = [lengths[i % len(lengths)] for i in range(count)]
        shares = [
            attainment(simulate(poisson_arrivals(rate, workload, seed), profile, topology), slo)
            for seed in range(seeds)
        ]
        return sum(shares) / len(shares)

    search = find_goodput(share, start_rate, target=target, max_rate=1e5, bisections=bisections)
    return Plan(topology, search.goodput, tuple(search.tried))


def candidates(
    accelerators: int,
    kv_bytes_per_token: int = 0,
    link_gbps: float = 0.0,
    frontend: FrontEndCost | None = None,
    cores: int = 0,
    local_prefill: tuple[int, ...] = (0,),
) -> list[Topology]:
    """Every P:D split of ``accelerators`` engines, each with every ``local_prefill``
    threshold (prompts shorter are prefilled on decode, as splitserve's
    ``router.local_prefill_below_tokens``; 0: every prompt remote), and all of them
    colocated (with the front end's CPU on ``cores`` shared cores, when given)."""
    splits = [
        Topology(
            p,
            accelerators - p,
            kv_bytes_per_token,
            link_gbps,
            local_prefill_below_tokens=below,
            frontend=frontend,
            cores=cores,
        )
        for p in range(1, accelerators)
        for below in dict.fromkeys(local_prefill)
    ]
    return [*splits, Topology(0, accelerators, frontend=frontend, cores=cores)]


def plan(
    profile: EngineProfile,
    accelerators: int,
    lengths: list[tuple[int, int]],
    ttft_s: float,
    tpot_s: float,
    kv_bytes_per_token: int = 0,
    link_gbps: float = 0.0,
    duration_s: float = 60.0,
    target: float = 0.9,
    frontend: FrontEndCost | None = None,
    cores: int = 0,
    local_prefill: tuple[int, ...] = (0,),
) -> list[Plan]:
    """Candidates ranked by goodput per accelerator (the highest rate at which a
    ``target`` share of requests meets both targets), best first."""
    plans = [
        goodput(profile, topology, lengths, ttft_s, tpot_s, target, duration_s=duration_s)
        for topology in candidates(
            accelerators, kv_bytes_per_token, link_gbps, frontend, cores, local_prefill
        )
    ]
    return sorted(plans, key=lambda p: -p.per_accelerator)
