"""Admission control: the hard cap, the budget against measured capacity, tickets."""

import pytest

from app.admission import Admission, Overloaded


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _admission(clock, **kw):
    fields = {"ttft_budget_s": 2.0, "max_waiting": 100, "min_samples": 4, "clock": clock}
    return Admission(**{**fields, **kw})


def test_the_hard_cap_refuses_at_once_with_retry_after():
    admission = _admission(Clock(), max_waiting=2, retry_after_s=3)
    admission.admit()
    admission.admit()
    with pytest.raises(Overloaded, match="2 requests already wait") as refused:
        admission.admit()
    assert refused.value.retry_after_s == 3 and admission.shed == 1


def test_without_enough_samples_only_the_cap_applies():
    admission = _admission(Clock())
    tickets = [admission.admit() for _ in range(50)]
    assert admission.waiting == 50 and admission.capacity() is None
    for ticket in tickets:
        ticket.done()
    assert admission.waiting == 0


def _serve(admission, clock, requests, service_s):
    """Requests one after another, each getting its first token ``service_s`` later."""
    for _ in range(requests):
        ticket = admission.admit()
        clock.now += service_s
        ticket.first_token()
        ticket.done()  # after the first token: changes nothing


def test_capacity_is_first_tokens_per_busy_second():
    clock = Clock()
    admission = _admission(clock)
    _serve(admission, clock, 10, 0.25)
    clock.now += 100  # idle time is not busy time: capacity stays 4/s (decayed alike)
    assert admission.capacity() == pytest.approx(4.0)


def test_a_queue_longer_than_the_budget_allows_is_shed():
    clock = Clock()
    admission = _admission(clock, ttft_budget_s=2.0)
    _serve(admission, clock, 10, 0.25)  # 4 first tokens per second
    held = [admission.admit() for _ in range(8)]  # the 8th: (7 + 1) / 4 = 2.0 s, admitted
    assert len(held) == 8
    with pytest.raises(Overloaded, match=r"about 2\.2 s"):
        admission.admit()
    held[0].first_token()  # the queue moves: room for one more
    admission.admit()


def test_a_light_load_short_queue_is_admitted():
    clock = Clock()
    admission = _admission(clock, ttft_budget_s=1.0)
    _serve(admission, clock, 10, 0.1)  # lightly loaded: one request per 100 ms TTFT
    assert len([admission.admit() for _ in range(9)]) == 9


def test_a_request_that_fails_before_its_first_token_leaves_no_sample():
    clock = Clock()
    admission = _admission(clock)
    ticket = admission.admit()
    clock.now += 1
    ticket.done()
    ticket.first_token()  # too late: already left
    assert admission.waiting == 0 and admission._samples == 0
