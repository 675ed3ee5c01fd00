"""Engine busy time from the scheduler's reports after each step."""

import pytest

from app.observability.engine_metrics import BusyClock


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_busy_time_counts_intervals_that_began_with_a_running_request():
    clock = Clock()
    busy = BusyClock(clock)
    assert busy.step(num_running=1) == 0.0  # the first report starts the clock
    clock.now += 0.5
    assert busy.step(num_running=2) == 0.5
    clock.now += 0.25
    assert busy.step(num_running=0) == 0.25  # that step finished the last request
    clock.now += 10.0  # idle: no steps, nothing counted
    assert busy.step(num_running=1) == 0.0
    clock.now += 0.125
    busy.step(num_running=0)
    assert busy.seconds == 0.875


def test_a_request_served_in_one_step_counts_from_its_arrival():
    clock = Clock()
    busy = BusyClock(clock)
    busy.step(num_running=0)  # an earlier report; then the engine idles
    clock.now += 30.0
    busy.submitted()  # a prefill arrives
    clock.now += 0.2
    busy.submitted()  # a second one joins while the first is computed
    clock.now += 0.1
    assert busy.step(num_running=0) == pytest.approx(0.3)
    assert busy.seconds == pytest.approx(0.3)
