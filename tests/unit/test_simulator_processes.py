"""The simulator's serving path as processes of their own, the first token from prefill,
the router's prefill backlog rule, and tokens as the client gets them."""

import pytest

from app.planning.frontend import FrontEndCost
from app.planning.sim_core import SimRequest
from app.planning.simulator import Topology, simulate
from tests.unit.test_simulator import S, flat


def test_each_process_of_the_serving_path_is_a_server_of_its_own():
    """A request passes the client, the ingress and its engine's replica on the way in;
    a chunk goes the other way, from the replica through the ingress to the client."""
    cost = FrontEndCost(
        request_s=0.003,
        remote_request_s=0.0,
        chunk_s=0.003,
        messages_per_s=0,
        replica_request_s=0.001,
        replica_chunk_s=0.001,
        client_request_s=0.0005,
        client_chunk_s=0.0002,
    )
    assert cost.ingress.costs == pytest.approx((0.002, 0.0, 0.002, 0.0))
    assert cost.replica.costs == pytest.approx((0.001, 0.0, 0.001, 0.0))
    (served,) = simulate([SimRequest(0.0, 100, 1)], flat(), Topology(0, 1, frontend=cost))
    assert served.ttft == pytest.approx(0.002 + 0.001 + S + 0.001 + 0.002)  # no client here
    on_host = cost.with_client()
    (measured,) = simulate([SimRequest(0.0, 100, 1)], flat(), Topology(0, 1, frontend=on_host))
    assert measured.ttft == pytest.approx(served.ttft + 0.0005 + 0.0002)
    with pytest.raises(ValueError):
        FrontEndCost(0.001, 0.0, 0.0, replica_request_s=0.002)


def test_two_replicas_process_their_steps_side_by_side():
    """Each engine's replica processes its own steps: two engines' first tokens do not
    queue behind one another's output processing (one process for both would)."""
    cost = FrontEndCost(0.0, 0.0, 0.0, messages_per_s=0, step_s=0.005)
    both = simulate(
        [SimRequest(0.0, 100, 1), SimRequest(0.0, 100, 1)], flat(), Topology(0, 2, frontend=cost)
    )
    assert [o.ttft for o in both] == pytest.approx([S + 0.005, S + 0.005])


def test_the_first_token_comes_from_the_prefill_engine():
    """With ``first_token_on_prefill`` a remote request's first token is out when its
    prefill ends; decode's first step repeats it (dropped), its second makes token 2."""
    from app.planning.simulator import simulate_states

    step = 0.004
    request = [SimRequest(0.0, 100, 5)]
    (plain,) = simulate_states(request, flat(step_s=step), Topology(1, 1))
    (early,) = simulate_states(
        request, flat(step_s=step), Topology(1, 1, first_token_on_prefill=True)
    )
    assert plain.token_times == pytest.approx([S + step * k for k in range(1, 6)])
    assert early.token_times == pytest.approx([S] + [S + step * k for k in range(2, 6)])
    assert early.first_token == pytest.approx(S)
    # A one-token answer never reaches decode.
    (one,) = simulate_states(
        [SimRequest(0.0, 100, 1)], flat(step_s=step), Topology(1, 1, first_token_on_prefill=True)
    )
    assert one.token_times == pytest.approx([S]) and one.finished == pytest.approx(S)


def test_past_the_prefill_backlog_prompts_are_prefilled_on_decode():
    """As splitserve's router does: with ``max_prefill_backlog`` prefills in flight, a
    new long prompt is prefilled on decode; once they are through, remote again."""
    from app.planning.simulator import simulate_states

    burst = [SimRequest(0.0, 100, 2) for _ in range(4)] + [SimRequest(1.0, 100, 2)]
    states = simulate_states(burst, flat(), Topology(1, 1, max_prefill_backlog=2))
    assert [s.remote for s in states] == [True, True, False, False, True]
    unlimited = simulate_states(burst, flat(), Topology(1, 1))
    assert all(s.remote for s in unlimited)
    # A one-token answer ends on prefill (first token from prefill) and frees its place.
    ones = [SimRequest(0.0, 100, 1), SimRequest(0.5, 100, 1)]
    topology = Topology(1, 1, max_prefill_backlog=1, first_token_on_prefill=True)
    assert [s.remote for s in simulate_states(ones, flat(), topology)] == [True, True]


def test_a_client_gets_each_token_when_its_chunk_is_through():
    """Tokens batched into chunks (one every 10 ms here) reach the client together, each
    after the engine made it."""
    from app.planning.simulator import simulate_states

    cost = FrontEndCost(0.0, 0.0, chunk_s=0.001, messages_per_s=100, max_interval_s=0.05)
    (state,) = simulate_states(
        [SimRequest(0.0, 100, 20)], flat(step_s=0.002), Topology(0, 1, frontend=cost)
    )
    assert len(state.delivered) == len(state.token_times) == 20
    assert all(d >= t for d, t in zip(state.delivered, state.token_times, strict=True))
    assert state.delivered == sorted(state.delivered)
    assert len(set(state.delivered)) < 10  # a chunk carries several tokens
