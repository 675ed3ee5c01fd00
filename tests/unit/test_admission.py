"""Admission control: the hard cap, the oldest and recent waits against the budget, the
learned queue depth, tickets."""

import pytest

from app.admission import Admission, Overloaded


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _admission(clock, **kw):
    fields = {"ttft_budget_s": 4.0, "max_waiting": 100, "headroom": 0.5, "clock": clock}
    return Admission(**{**fields, **kw})


def test_the_hard_cap_refuses_at_once_with_retry_after():
    admission = _admission(Clock(), max_waiting=2, retry_after_s=3)
    admission.admit()
    admission.admit()
    with pytest.raises(Overloaded, match="2 requests already wait") as refused:
        admission.admit()
    assert refused.value.retry_after_s == 3 and admission.shed == 1


def test_a_burst_is_admitted_whole_while_no_one_has_waited_long():
    admission = _admission(Clock())
    tickets = [admission.admit() for _ in range(50)]
    assert admission.waiting == 50 and admission.shed == 0
    for ticket in tickets:
        ticket.first_token()
    assert admission.waiting == 0


def test_once_the_oldest_waits_past_the_limit_new_requests_are_shed():
    clock = Clock()
    admission = _admission(clock)  # limit: 0.5 x 4 s = 2 s
    first = admission.admit()
    clock.now += 1.0
    second = admission.admit()
    clock.now += 1.5  # the oldest has waited 2.5 s
    with pytest.raises(Overloaded, match=r"wait 2\.5 s .*under 2 s"):
        admission.admit()
    first.done()  # its client left: the oldest (second) has waited 1.5 s
    third = admission.admit()
    assert admission.waiting == 2 and admission.shed == 1
    second.done()
    third.done()


def test_a_request_that_ends_before_its_first_token_leaves_the_queue():
    clock = Clock()
    admission = _admission(clock)
    ticket = admission.admit()
    clock.now += 10
    ticket.done()
    ticket.first_token()  # too late: already left; nothing happens
    assert admission.waiting == 0 and admission.oldest_wait_s() == 0.0
    admission.admit()


def test_slow_recent_first_tokens_shed_even_when_the_oldest_waiter_is_young():
    clock = Clock()
    admission = _admission(clock)  # limit 2 s, window 2 s
    slow = [admission.admit() for _ in range(3)]
    clock.now += 1.9
    young = admission.admit()
    clock.now += 1.1
    for ticket in slow:
        ticket.first_token()  # served after 3 s: over the limit
    # The oldest waiter is 1.1 s old, under the limit, yet the pools are behind.
    with pytest.raises(Overloaded, match=r"after 3\.0 s lately"):
        admission.admit()
    young.first_token()  # the queue drained: served at once again
    admission.admit()


def test_a_queue_deeper_than_the_pools_serve_in_time_is_not_admitted_again():
    clock = Clock()
    admission = _admission(clock)  # limit 2 s
    burst = [admission.admit() for _ in range(8)]  # nobody has waited yet: all admitted
    for ticket in burst:  # served one every 0.5 s: the 5th and later waited over 2 s
        clock.now += 0.5
        ticket.first_token()
    # Behind 4 others a request waited 2.5 s: 4 waiting is what the pools serve in time.
    assert admission.depth == pytest.approx(4.0)
    clock.now += 2.1  # the slow first tokens have left the recent window
    nexts = [admission.admit() for _ in range(4)]
    with pytest.raises(Overloaded, match=r"4 requests already wait .* behind that many"):
        admission.admit()
    for ticket in nexts:  # served in time, from the edge of the depth: it grows back
        clock.now += 0.4
        ticket.first_token()
    assert admission.depth == pytest.approx(6.0)  # one per request served near the edge
    [admission.admit() for _ in range(6)]
    assert admission.waiting == 6


def test_a_lone_slow_request_does_not_lower_the_depth():
    clock = Clock()
    admission = _admission(clock)
    ticket = admission.admit()
    clock.now += 3.0
    ticket.first_token()  # slow engines, no queue: not a depth to learn
    assert admission.depth == 100


def test_the_depth_rule_can_be_turned_off():
    clock = Clock()
    admission = _admission(clock, learn_depth=False)
    burst = [admission.admit() for _ in range(8)]
    for ticket in burst:
        clock.now += 0.5
        ticket.first_token()
    assert admission.depth == 100


def test_served_requests_are_kept_only_as_long_as_the_window():
    # Light load: every request is served before the next arrives, so no admission ever
    # reads the recent waits; they must not pile up for the life of the replica.
    clock = Clock()
    admission = _admission(clock)  # window 2 s
    for _ in range(1000):
        admission.admit().first_token()
        clock.now += 0.1
    assert len(admission._served) <= 21
