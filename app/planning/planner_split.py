"""The planner's discrete-event model as the SLO policy's :class:`SplitModel`.

:class:`PlannerSplitModel` answers with the planner's discrete-event model
(:mod:`app.planning.simulator`, the same engine profile, front end and link as
``splitserve plan``): the demand replayed as Poisson arrivals, the remote and local
prompts at their observed means, each candidate split simulated. Answers are cached by
the demand rounded to ``resolution`` (5%), so a steady load costs one search.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from app.planning.engine_profile import EngineProfile
from app.planning.frontend import FrontEndCost
from app.planning.goodput import SLO, attainment
from app.planning.sim_core import SimRequest
from app.planning.simulator import Topology, poisson_arrivals, simulate
from app.scaling.demand import Demand
from app.scaling.split_model import Split, SplitModel


@dataclass(frozen=True)
class ServingShape:
    """What the planner's model needs besides the engine profile: the KV link, the
    router's local-prefill threshold, the front end's CPU and the cores it shares."""

    kv_bytes_per_token: int = 0
    link_gbps: float = 0.0
    local_prefill_below_tokens: int = 0
    frontend: FrontEndCost | None = None
    cores: int = 0

    def topology(self, prefill: int, decode: int) -> Topology:
        return Topology(
            prefill,
            decode,
            self.kv_bytes_per_token,
            self.link_gbps,
            local_prefill_below_tokens=self.local_prefill_below_tokens,
            frontend=self.frontend,
            cores=self.cores,
        )


CACHE_ENTRIES = 256
TOLERANCE = 0.01  # of attainment: where no split meets, what counts as serving as many


class PlannerSplitModel(SplitModel):
    """The planner's simulator as a :class:`SplitModel`."""

    def __init__(
        self,
        profile: EngineProfile,
        slo: SLO,
        target: float,
        shape: ServingShape | None = None,
        duration_s: float = 60.0,
        resolution: float = 0.05,
        seed: int = 0,
    ) -> None:
        self.profile = profile
        self.slo = slo
        self.target = target
        self.shape = shape or ServingShape()
        self.duration_s = duration_s
        self.resolution = resolution
        self.seed = seed
        self._cache: dict[tuple[float, ...], list[Split]] = {}

    def split(self, demand: Demand, most: int, current: tuple[int, int] | None = None) -> Split:
        if most < 2:
            raise ValueError(f"a split needs at least 2 replicas, not {most}")
        if demand.requests_per_s <= 0:
            return Split(1, 1, 1.0, True)
        rounded = self._rounded(demand)
        key = (
            rounded.requests_per_s,
            rounded.remote_share,
            rounded.remote_prompt_tokens,
            rounded.remote_output_tokens,
            rounded.local_prompt_tokens,
            rounded.local_output_tokens,
            float(most),
        )
        if key not in self._cache:
            if len(self._cache) >= CACHE_ENTRIES:
                self._cache.pop(next(iter(self._cache)))  # the oldest
            self._cache[key] = self._search(rounded, most)
        candidates = self._cache[key]
        if candidates[0].meets and current is not None:
            chosen = min(
                (c for c in candidates if c.meets),
                key=lambda c: (
                    abs(c.prefill - current[0]) + abs(c.decode - current[1]),
                    -c.attainment,
                ),
            )
        else:
            chosen = max(candidates, key=lambda c: (c.attainment, c.decode))
        return replace(chosen, requests_per_s=demand.requests_per_s)

    def _search(self, demand: Demand, most: int) -> list[Split]:
        """Every split of the fewest replicas in all where one meets the target; where
        none within ``most`` does, of the fewest where one serves within ``TOLERANCE``
        of the best (a target no size meets must not fill the cluster). A binary search
        over the total: one more replica in either pool never predicts less."""
        requests = self._requests(demand)
        found: dict[int, list[Split]] = {}

        def splits(total: int) -> list[Split]:
            if total not in found:
                found[total] = [self._predict(requests, p, total - p) for p in range(1, total)]
            return found[total]

        def best(total: int) -> float:
            return max(s.attainment for s in splits(total))

        enough = self.target
        if not any(s.meets for s in splits(most)):
            enough = best(most) - TOLERANCE
        low, high = 2, most  # high is enough
        while low < high:
            middle = (low + high) // 2
            if best(middle) >= enough:
                high = middle
            else:
                low = middle + 1
        return sorted(splits(high), key=lambda s: not s.meets)

    def _predict(self, requests: list[SimRequest], prefill: int, decode: int) -> Split:
        topology = self.shape.topology(prefill, decode)
        share = attainment(simulate(requests, self.profile, topology), self.slo)
        return Split(prefill, decode, share, share >= self.target)

    def _requests(self, demand: Demand) -> list[SimRequest]:
        """``duration_s`` of Poisson arrivals: remote and local prompts at their means,
        each class with its own mean output, in the observed shares."""
        count = max(20, math.ceil(demand.requests_per_s * self.duration_s))
        threshold = self.shape.local_prefill_below_tokens
        remote_prompt = max(round(demand.remote_prompt_tokens), threshold, 1)
        local_prompt = max(round(demand.local_prompt_tokens), 1)
        if threshold:
            local_prompt = min(local_prompt, threshold - 1)
        remote_output = max(round(demand.remote_output_tokens), 1)
        local_output = max(round(demand.local_output_tokens), 1)
        # Each request remote with the observed probability: the prefill pool's
        # arrivals stay Poisson (an even interleave would smooth its queue away).
        rng = random.Random(self.seed)
        lengths = [
            (remote_prompt, remote_output)
            if rng.random() < demand.remote_share
            else (local_prompt, local_output)
            for _ in range(count)
        ]
        return poisson_arrivals(demand.requests_per_s, lengths, self.seed)

    def _rounded(self, demand: Demand) -> Demand:
        def log_round(x: float) -> float:
            if x <= 0:
                return 0.0
            step = math.log1p(self.resolution)
            return math.exp(round(math.log(x) / step) * step)

        return Demand(
            requests_per_s=log_round(demand.requests_per_s),
            remote_share=round(demand.remote_share / self.resolution) * self.resolution,
            remote_prompt_tokens=log_round(demand.remote_prompt_tokens),
            remote_output_tokens=log_round(demand.remote_output_tokens),
            local_prompt_tokens=log_round(demand.local_prompt_tokens),
            local_output_tokens=log_round(demand.local_output_tokens),
        )
