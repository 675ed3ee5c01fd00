"""The front door's demand as the ingress reports it (app.scaling.demand)."""

from __future__ import annotations

from app.scaling.demand import Demand, DemandMeter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_arrivals_count_every_request_and_the_mix_comes_from_completed_ones():
    clock = Clock()
    meter = DemandMeter(window_s=10, clock=clock)
    for _ in range(30):  # 30 arrivals in the window: some will be refused, all count
        meter.arrived()
    meter.completed(prompt_tokens=1500, output_tokens=16, remote=True)
    meter.completed(prompt_tokens=100, output_tokens=120, remote=False)
    meter.completed(prompt_tokens=140, output_tokens=140, remote=False)
    meter.completed(prompt_tokens=1600, output_tokens=20, remote=True)
    figures = meter.figures()
    assert figures["arrivals_per_s"] == 3.0
    assert figures["remote_completed_per_s"] == figures["local_completed_per_s"] == 0.2
    demand = Demand.from_figures(figures)
    assert demand is not None and demand.requests_per_s == 3.0 and demand.remote_share == 0.5
    assert (demand.remote_prompt_tokens, demand.remote_output_tokens) == (1550, 18)
    assert (demand.local_prompt_tokens, demand.local_output_tokens) == (120, 130)
    # Serve averages each figure over its look-back: with a window that had no local
    # completion yet (all zero), the means stay right, only the rates halve.
    empty = {**figures, **{k: 0.0 for k in figures if k.startswith("local_")}}
    averaged = Demand.from_figures({k: (figures[k] + empty[k]) / 2 for k in figures})
    assert averaged is not None
    assert (averaged.local_prompt_tokens, averaged.local_output_tokens) == (120, 130)


def test_the_window_forgets_what_is_older_than_it():
    clock = Clock()
    meter = DemandMeter(window_s=10, clock=clock)
    meter.arrived()
    meter.completed(1000, 10, remote=True)
    clock.now += 5
    meter.arrived()
    meter.completed(100, 50, remote=False)
    clock.now += 6  # the first pair is 11 s old now
    demand = Demand.from_figures(meter.figures())
    assert demand is not None and demand.requests_per_s == 0.1
    assert demand.remote_share == 0.0 and demand.local_prompt_tokens == 100
    clock.now += 10
    assert Demand.from_figures(meter.figures()) is None  # nothing completed: no mix
