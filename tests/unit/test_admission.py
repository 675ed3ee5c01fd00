"""Admission control: the hard cap, the oldest wait, the wait predicted from the measured
drain rate, Retry-After from the drain time, refusal reasons, tickets."""

import pytest

from app.api.admission import Admission, Overloaded, Reason


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _admission(clock, **kw):
    fields = {
        "ttft_budget_s": 4.0,
        "max_waiting": 100,
        "headroom": 0.5,
        "predicted_share": 0.5,
        "clock": clock,
    }
    return Admission(**{**fields, **kw})


def _admit(admission):
    """Admit, and the body is read at once (the HTTP layer calls ``parsed``)."""
    ticket = admission.admit()
    ticket.parsed()
    return ticket


def _serve(admission, clock, count, every_s, concurrency=1):
    """A closed loop: ``concurrency`` requests wait at a time, one served per ``every_s``."""
    tickets = [_admit(admission) for _ in range(concurrency)]
    for _ in range(count):
        clock.now += every_s
        tickets.pop(0).first_token()
        tickets.append(_admit(admission))
    for ticket in tickets:
        ticket.done()


def test_the_hard_cap_refuses_at_once_with_retry_after_and_a_reason():
    refused: list[Reason] = []
    admission = _admission(Clock(), max_waiting=2, retry_after_s=3, on_refuse=refused.append)
    _admit(admission)
    _admit(admission)
    with pytest.raises(Overloaded, match="2 requests already wait") as error:
        _admit(admission)
    # No drain rate measured yet: the configured Retry-After.
    assert error.value.retry_after_s == 3 and error.value.reason is Reason.MAX_WAITING
    assert admission.shed == 1 and refused == [Reason.MAX_WAITING]


def test_a_burst_is_admitted_whole_while_no_rate_is_known_and_no_one_waited_long():
    admission = _admission(Clock())
    tickets = [_admit(admission) for _ in range(50)]
    assert admission.waiting == 50 and admission.shed == 0
    for ticket in tickets:
        ticket.first_token()
    assert admission.waiting == 0


def test_once_the_oldest_waits_past_the_limit_new_requests_are_shed():
    clock = Clock()
    admission = _admission(clock)  # limit: 0.5 x 4 s = 2 s
    first = _admit(admission)
    clock.now += 1.0
    second = _admit(admission)
    clock.now += 1.5  # the oldest has waited 2.5 s
    with pytest.raises(Overloaded, match=r"wait 2\.5 s .*under 2 s") as error:
        _admit(admission)
    assert error.value.reason is Reason.OLDEST_WAIT
    first.done()  # its client left: the oldest (second) has waited 1.5 s
    third = _admit(admission)
    assert admission.waiting == 2 and admission.shed == 1
    second.done()
    third.done()


def test_a_request_that_ends_before_its_first_token_leaves_the_queue():
    clock = Clock()
    admission = _admission(clock)
    ticket = _admit(admission)
    clock.now += 10
    ticket.done()
    ticket.first_token()  # too late: already left; nothing happens
    assert admission.waiting == 0 and admission.oldest_wait_s() == 0.0
    _admit(admission)


def test_the_drain_rate_counts_busy_time_only():
    clock = Clock()
    admission = _admission(clock, min_samples=4)
    assert admission.drain_rate() is None
    _serve(admission, clock, 8, every_s=0.25)  # 4 a second while busy
    assert admission.drain_rate() == pytest.approx(4.0)
    clock.now += 600  # idle: the rate still holds for the next burst
    assert admission.drain_rate() == pytest.approx(4.0)


def test_a_burst_beyond_what_the_pools_drain_in_time_is_held_to_it():
    clock = Clock()
    admission = _admission(clock)  # limit 2 s
    _serve(admission, clock, 32, every_s=0.125)  # 8 first tokens a second
    admitted = []
    with pytest.raises(Overloaded, match=r"serve 8\.0 a second") as error:
        for _ in range(300):
            admitted.append(_admit(admission))
    # (waiting + 1) / 8 <= 2 s: 16 admitted; the 17th would wait 2.1 s.
    assert len(admitted) == 16 and error.value.reason is Reason.PREDICTED_WAIT
    assert error.value.retry_after_s == 2  # the 20 waiting drain in 2 s


def test_a_steady_load_served_in_time_is_never_refused():
    # 16 clients, each waiting ~0.2 s of a 1 s request: few wait, each briefly.
    clock = Clock()
    admission = _admission(clock)
    _serve(admission, clock, 2000, every_s=1 / 16, concurrency=3)
    assert admission.shed == 0


def test_a_cold_start_is_forgotten_after_a_few_busy_seconds():
    clock = Clock()
    admission = _admission(clock)  # window 4 s
    cold = [_admit(admission) for _ in range(8)]
    clock.now += 16.0  # the engines were not ready: all 8 waited 16 s
    for ticket in cold:
        ticket.first_token()
    clock.now += 1.0
    # Warm now: 16 concurrent requests, one served every 0.05 s.
    _serve(admission, clock, 200, every_s=0.05, concurrency=16)
    assert admission.shed == 0
    assert admission.drain_rate() == pytest.approx(20.0)


def test_one_slow_request_alone_does_not_set_a_rate():
    clock = Clock()
    admission = _admission(clock)
    ticket = _admit(admission)
    clock.now += 30.0
    ticket.first_token()
    assert admission.drain_rate() is None
    [_admit(admission) for _ in range(50)]
    assert admission.shed == 0


def test_the_predicted_wait_rule_can_be_turned_off():
    clock = Clock()
    admission = _admission(clock, predicted_share=0)
    _serve(admission, clock, 40, every_s=0.1)
    [_admit(admission) for _ in range(60)]
    assert admission.shed == 0


def test_refusals_decided_elsewhere_are_counted_with_the_drain_time():
    clock = Clock()
    refused: list[Reason] = []
    admission = _admission(clock, on_refuse=refused.append)
    _serve(admission, clock, 40, every_s=0.1)
    [_admit(admission) for _ in range(15)]
    error = admission.refuse(Reason.POOL_QUEUE_FULL, "full")
    assert error.retry_after_s == 2 and refused == [Reason.POOL_QUEUE_FULL]
    assert admission.refuse(Reason.NOT_READY, "x", retry_after_s=1).retry_after_s == 1


def test_served_requests_are_kept_only_as_long_as_the_window():
    clock = Clock()
    admission = _admission(clock)  # window 4 s of busy time
    for _ in range(1000):
        ticket = _admit(admission)
        clock.now += 0.01
        ticket.first_token()
        clock.now += 0.1
    assert len(admission._served) <= 401


def test_a_client_slow_to_send_its_body_does_not_make_others_wait_long():
    # Admitted at arrival, before its body is read: it counts as waiting, but its wait
    # starts only once the body is in, so a slow sender cannot shed everyone else.
    clock = Clock()
    admission = _admission(clock)  # limit 2 s
    slow = admission.admit()
    clock.now += 30.0  # still sending its body
    assert admission.oldest_wait_s() == 0.0
    other = admission.admit()
    other.parsed()
    assert admission.waiting == 2
    slow.parsed()
    clock.now += 1.0
    assert admission.oldest_wait_s() == 1.0
    slow.first_token()
    other.first_token()
    assert admission.waiting == 0


def test_a_request_for_many_samples_counts_as_that_many_waiting():
    admission = _admission(Clock(), max_waiting=10)
    wide = admission.admit()
    wide.parsed(samples=8)  # 2 prompts x n=4
    assert admission.waiting == 8
    _admit(admission)
    _admit(admission)
    with pytest.raises(Overloaded, match="10 requests already wait"):
        _admit(admission)
    wide.first_token()
    assert admission.waiting == 2


def test_synchronized_bursts_the_pools_serve_in_time_are_admitted_whole():
    """A closed loop whose clients finish together sends its next requests together: a
    burst of 64 every few seconds, with stragglers between. The pools serve each burst
    well within the limit (the last first token 1.2 s after the burst), so no burst may
    be refused, although the stragglers between bursts leave a drain rate (first tokens
    per busy second over the last 4 s) that alone predicts too long a wait for 64."""
    clock = Clock()
    admission = _admission(clock, ttft_budget_s=5.0, predicted_share=0.35)
    for _ in range(8):
        burst = [_admit(admission) for _ in range(64)]
        for ticket in burst:  # first tokens in batches of 16, every 0.3 s
            if burst.index(ticket) % 16 == 0:
                clock.now += 0.3
            ticket.first_token()
        for _ in range(30):  # 5 s of stragglers, one waiting at a time
            ticket = _admit(admission)
            clock.now += 0.15
            ticket.first_token()
            clock.now += 0.02
    assert admission.shed == 0
