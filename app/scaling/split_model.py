"""What split of prefill and decode replicas a load needs: the SLO policy's check.

:class:`SplitModel` is the extension point. The SLO policy (:mod:`app.scaling.slo_policy`) asks
it, every tick it has the front door's :class:`app.scaling.demand.Demand`, for the split that
load needs, and uses the answer as a floor under its own (reactive) decisions: a pool
grows to the model's count at once when the arrivals call for it, never shrinks below
it, and keeps it when the cluster's cap makes the pools share.

Contract of :meth:`SplitModel.split`, called by the policy on Serve's controller loop:

- it returns a :class:`Split` with ``prefill >= 1``, ``decode >= 1`` and
  ``prefill + decode <= most``;
- ``meets`` True: the fewest replicas in all that the model predicts meet the SLO at the
  demand's rate (of those, the nearest ``current``, then the higher attainment: a
  noisy demand must not swap replicas between the pools);
- ``meets`` False: no split within ``most`` does, and the split of the fewest
  replicas that the model predicts serve as many requests within the SLO as any
  (within a point of attainment): more replicas where no size helps are waste;
- it has no side effects but its own cache, and must return within a fraction of a
  second for a demand it has seen (the controller waits on it).

The planner's implementation, :class:`app.planning.planner_split.PlannerSplitModel`,
lives with the simulator it runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from app.scaling.demand import Demand


@dataclass(frozen=True)
class Split:
    prefill: int
    decode: int
    attainment: float  # predicted, at the demand's rate
    meets: bool  # the predicted attainment reaches the target
    requests_per_s: float = 0.0  # the demand's rate it was predicted for

    @property
    def name(self) -> str:
        return f"{self.prefill}P:{self.decode}D"


class SplitModel(ABC):
    """A model of the serving system that says what split a load needs (contract in the
    module docstring)."""

    @abstractmethod
    def split(self, demand: Demand, most: int, current: tuple[int, int] | None = None) -> Split:
        """``current``: the pools' (prefill, decode) now; among splits the model finds
        equally good, the one nearest it (fewest replicas moved)."""
