"""The discrete-event simulator against closed-form queues, before it meets real profiles."""

import math
import statistics
from collections.abc import Callable

import pytest

from app.planning.engine_profile import EngineProfile, interpolate, spread_from_quantiles
from app.planning.frontend import FrontEndCost
from app.planning.planner import candidates, goodput, plan
from app.planning.sim_core import SimRequest
from app.planning.simulator import Topology, poisson_arrivals, simulate

S = 0.010  # seconds per prefill, whatever the length
TINY = 1e-9


def flat(prefill_s=S, step_s=TINY, overhead_s=0.0, disaggregated_overhead_s=0.0):
    return EngineProfile(
        prefill=[(1, prefill_s), (100_000, prefill_s)],
        decode=[(1, step_s), (1_000, step_s)],
        overhead_s=overhead_s,
        disaggregated_overhead_s=disaggregated_overhead_s,
    )


def test_interpolation_is_linear_and_extends():
    points = [(0.0, 0.0), (10.0, 1.0), (20.0, 3.0)]
    assert interpolate(points, 5) == 0.5
    assert interpolate(points, 15) == 2.0
    assert interpolate(points, 30) == 5.0  # extended from the last segment


def test_md1_queue_mean_wait():
    """One prefill replica, deterministic service S, Poisson arrivals: M/D/1.

    Mean time in system = S + rho * S / (2 (1 - rho)). Prompts fill the batch budget so
    each prefill step serves exactly one request.
    """
    rho = 0.6
    rate = rho / S
    requests = poisson_arrivals(rate, [(2048, 1)] * 40_000, seed=1)
    outcomes = simulate(requests, flat(), Topology(1, 1, max_batch_tokens=2048))
    expected = S + rho * S / (2 * (1 - rho))
    assert statistics.fmean(o.ttft for o in outcomes) == pytest.approx(expected, rel=0.05)


def test_no_queueing_when_arrivals_are_spaced():
    requests = [SimRequest(t * 1.0, 500, 1) for t in range(5)]
    topology = Topology(1, 1, kv_bytes_per_token=1000, link_gbps=8.0)
    # prefill S, then 500 kB at 8 Gb/s = 0.5 ms, then one decode step of 2 ms
    outcomes = simulate(requests, flat(step_s=0.002, overhead_s=0.003), topology)
    for o in outcomes:
        assert o.ttft == pytest.approx(S + 0.0005 + 0.002 + 0.003)
        assert math.isnan(o.tpot)


def test_a_spread_overhead_keeps_the_c1_median_and_p95_it_was_fitted_from():
    p50, p95 = 0.033, 0.057  # a measured c=1 TTFT, seconds
    shift, mean = spread_from_quantiles(p50, p95)
    assert mean == pytest.approx(0.024 / math.log(10))
    profile = flat(prefill_s=shift, step_s=TINY)
    profile.overhead_spread_s = mean
    requests = [SimRequest(t * 1.0, 128, 1) for t in range(4000)]  # spaced: no queueing
    ttfts = sorted(o.ttft for o in simulate(requests, profile, Topology(0, 1)))
    assert ttfts[2000] == pytest.approx(p50, rel=0.03)
    assert ttfts[3800] == pytest.approx(p95, rel=0.03)
    assert min(ttfts) >= shift
    # No spread: every request costs the same.
    profile.overhead_spread_s = 0.0
    assert len({round(o.ttft, 12) for o in simulate(requests, profile, Topology(0, 1))}) == 1


def test_decode_batch_tpot_is_the_step_time():
    """Colocated, free prefill, constant step c: every request's TPOT is exactly c."""
    c = 0.004
    requests = [SimRequest(0.0, 100, 20) for _ in range(8)]
    outcomes = simulate(requests, flat(prefill_s=0.0, step_s=c), Topology(0, 1))
    assert all(o.tpot == pytest.approx(c) for o in outcomes)
    # The first arrival starts a step on its own; the others join the next one.
    assert all(o.ttft <= c + 1e-12 for o in outcomes)


def test_colocated_long_prompt_stalls_running_streams():
    """A 1,500-token prompt joining a running stream lengthens that stream's steps."""
    step = 0.002
    profile = EngineProfile(prefill=[(0, 0.0), (1500, 0.3)], decode=[(1, step), (64, step)])
    requests = [SimRequest(0.0, 10, 50), SimRequest(0.02, 1500, 2)]
    colocated = simulate(requests, profile, Topology(0, 1, max_batch_tokens=512))
    split = simulate(requests, profile, Topology(1, 1, max_batch_tokens=512))
    assert colocated[0].tpot > 2 * step  # the stream waited behind prefill chunks
    assert split[0].tpot == pytest.approx(step, rel=0.1)  # isolated from the long prompt


def test_goodput_is_below_capacity_and_scales_with_replicas():
    profile = flat(prefill_s=0.0, step_s=0.0)
    profile.prefill = [(0.0, 0.0), (1000.0, S)]  # 10 ms per 1000-token prompt
    lengths = [(1000, 1)] * 300
    one = goodput(profile, Topology(0, 1), lengths, 0.05, 1.0, seeds=2, duration_s=5)
    two = goodput(profile, Topology(0, 2), lengths, 0.05, 1.0, seeds=2, duration_s=5)
    assert 40 < one.goodput < 1 / S  # below capacity (100 req/s), not far below
    assert two.goodput == pytest.approx(2 * one.goodput, rel=0.3)


def test_plan_ranks_every_split_and_colocated():
    topologies = candidates(3)
    assert [t.name for t in topologies] == ["1P:2D", "2P:1D", "colocated x3"]
    workload = [(256, 8)] * 100

    def ranked(profile):
        plans = plan(profile, 2, workload, ttft_s=0.1, tpot_s=0.01, duration_s=5)
        assert {p.topology.name for p in plans} == {"1P:1D", "colocated x2"}
        return {p.topology.name: p.per_accelerator for p in plans}, plans[0].topology.name

    # A 50 ms prefill stalls every stream on a colocated engine past the 10 ms TPOT
    # target; a prefill pool keeps decode steps clear: splitting must win, by far.
    scores, best = ranked(flat(prefill_s=0.05, step_s=0.001))
    assert best == "1P:1D" and scores["1P:1D"] > 3 * scores["colocated x2"]
    # A hand-off that costs 0.2 s alone misses the 0.1 s TTFT target: colocated wins.
    scores, best = ranked(flat(step_s=0.001, disaggregated_overhead_s=0.2))
    assert best == "colocated x2" and scores["1P:1D"] == 0


def test_topology_is_validated():
    with pytest.raises(ValueError):
        Topology(1, 0)


def test_short_prompts_skip_the_prefill_pool_below_the_threshold():
    profile = flat(step_s=0.002, disaggregated_overhead_s=0.05)
    requests = [SimRequest(0.0, 100, 2), SimRequest(1.0, 1000, 2)]
    outcomes = simulate(requests, profile, Topology(1, 1, local_prefill_below_tokens=512))
    # The short prompt is prefilled on decode (no pool, no overhead); the long one is remote.
    assert outcomes[0].ttft == pytest.approx(S)  # the prefill step samples the first token
    assert outcomes[1].ttft == pytest.approx(S + 0.002 + 0.05)  # + a decode step, the hops
    assert "(< 512 local)" in Topology(1, 1, local_prefill_below_tokens=512).name


def test_the_front_end_is_a_server_each_request_and_chunk_visits():
    # Spaced requests, no contention: TTFT = request CPU + remote hop + prefill + first
    # step + first chunk; the last chunk ends the stream.
    cost = FrontEndCost(request_s=0.002, remote_request_s=0.003, chunk_s=0.001, messages_per_s=0)
    step = 0.004
    topology = Topology(1, 1, frontend=cost)
    requests = [SimRequest(i * 10.0, 100, 5) for i in range(3)]
    for outcome in simulate(requests, flat(step_s=step), topology):
        assert outcome.ttft == pytest.approx(0.002 + 0.003 + S + step + 0.001)
        # 4 more steps; each token's chunk (interval 0) is through before the next step
        # ends, and the last chunk is the stream's end.
        assert outcome.tpot == pytest.approx(step)
    # A prompt prefilled on decode skips the prefill hop.
    local = Topology(1, 1, local_prefill_below_tokens=1000, frontend=cost)
    (outcome,) = simulate([SimRequest(0.0, 100, 1)], flat(step_s=step), local)
    assert outcome.ttft == pytest.approx(0.002 + S + 0.001)


def test_each_engine_step_takes_the_front_ends_time():
    """The replica processes each step's outputs: a first token's chunk waits behind its
    step's processing (colocated: the prefill step; remote: both pools' steps)."""
    cost = FrontEndCost(0.0, 0.0, chunk_s=0.001, messages_per_s=0, step_s=0.002)
    (local,) = simulate([SimRequest(0.0, 100, 1)], flat(), Topology(0, 1, frontend=cost))
    assert local.ttft == pytest.approx(S + 0.002 + 0.001)
    step = 0.004
    (remote,) = simulate(
        [SimRequest(0.0, 100, 1)], flat(step_s=step), Topology(1, 1, frontend=cost)
    )
    # The prefill step's processing runs while decode steps; decode's waits behind it.
    assert remote.ttft == pytest.approx(S + step + 0.002 + 0.001)


def test_on_shared_cores_the_front_end_slows_the_engines():
    """Colocated, one engine, one core: while the front end works, each gets half."""
    cost = FrontEndCost(request_s=0.0, remote_request_s=0.0, chunk_s=0.002, messages_per_s=0)
    step = 0.002
    request = [SimRequest(0.0, 100, 50)]
    alone = simulate(request, flat(step_s=step), Topology(0, 1, frontend=cost))[0]
    shared = simulate(request, flat(step_s=step), Topology(0, 1, frontend=cost, cores=1))[0]
    assert alone.tpot == pytest.approx(step, rel=0.01)
    # Every step overlaps the previous token's chunk: both run at half speed.
    assert 1.5 * step < shared.tpot <= 2 * step + 1e-9
    # Two cores for one engine and the front end: no contention.
    roomy = simulate(request, flat(step_s=step), Topology(0, 1, frontend=cost, cores=2))[0]
    assert roomy.tpot == pytest.approx(alone.tpot)


def test_tokens_are_batched_into_chunks_as_the_replica_streams_them():
    cost = FrontEndCost(0.0, 0.0, 0.001, messages_per_s=200, max_interval_s=0.05)
    assert cost.chunk_interval_s(1) == pytest.approx(0.005)
    assert cost.chunk_interval_s(40) == pytest.approx(0.05)  # capped
    assert FrontEndCost(0.0, 0.0, 0.001, messages_per_s=0).chunk_interval_s(40) == 0.0
    with pytest.raises(ValueError):
        FrontEndCost(-1.0, 0.0, 0.0)


def _shared(cores, starts):
    """Run jobs of (start time, CPU seconds) on ``cores``; each one's end time."""
    from app.planning.frontend import SharedCores
    from app.planning.sim_core import Clock

    clock = Clock()
    cpu = SharedCores(clock, cores)
    ends: dict[int, float] = {}

    def start(n: int, work: float) -> Callable[[], None]:
        def end() -> None:
            ends[n] = clock.now

        def go() -> None:
            cpu.run(work, end)

        return go

    for n, (at, work) in enumerate(starts):
        clock.at(at, start(n, work))
    clock.run()
    return [ends[n] for n in range(len(starts))]


def test_shared_cores_are_redivided_whenever_a_job_starts_or_ends():
    # Two 1 s jobs together on one core: each at half speed, both through at 2 s.
    assert _shared(1, [(0.0, 1.0), (0.0, 1.0)]) == pytest.approx([2.0, 2.0])
    # One joins halfway: the first has 0.5 s left, done at half speed by 1.5 s; the
    # second did 0.5 s by then and ends alone at 2 s. (A share fixed when a job starts
    # would end the first at 1 s and the second at 2.5 s.)
    assert _shared(1, [(0.0, 1.0), (0.5, 1.0)]) == pytest.approx([1.5, 2.0])
    # As many cores as jobs, or no sharing (0): full speed.
    assert _shared(2, [(0.0, 1.0), (0.0, 1.0)]) == pytest.approx([1.0, 1.0])
    assert _shared(0, [(0.0, 1.0), (0.0, 1.0), (0.0, 1.0)]) == pytest.approx([1.0] * 3)
    # Three jobs on two cores: each at 2/3 speed.
    assert _shared(2, [(0.0, 1.0)] * 3) == pytest.approx([1.5] * 3)


def test_a_step_that_decodes_and_prefills_pays_the_fixed_cost_once():
    profile = EngineProfile(prefill=[(16, 0.004), (1024, 0.020)], decode=[(1, 0.002), (32, 0.004)])
    assert profile.step_s(0, 512) == pytest.approx(profile.prefill_s(512))
    assert profile.step_s(8, 0) == pytest.approx(profile.decode_step_s(8))
    # Both: the sum less one one-sequence step (the weights are read once).
    both = profile.decode_step_s(8) + profile.prefill_s(512) - 0.002
    assert profile.step_s(8, 512) == pytest.approx(both)
    # A prefill cheaper than a one-sequence step hides within it.
    tiny = EngineProfile(prefill=[(1, 0.001), (100, 0.001)], decode=[(1, 0.002), (32, 0.004)])
    assert tiny.step_s(8, 50) == pytest.approx(tiny.decode_step_s(8))


def test_colocated_a_prompt_joining_a_stream_costs_the_stream_only_its_prefill():
    """A stream decoding at 2 ms a step; a 512-token prompt arrives mid-stream and is
    prefilled in one mixed step: that step takes decode + prefill - one decode step."""
    profile = EngineProfile(prefill=[(16, 0.004), (1024, 0.020)], decode=[(1, 0.002), (32, 0.002)])
    requests = [SimRequest(0.0, 16, 40), SimRequest(0.0301, 512, 1)]
    stream, prompt = simulate(requests, profile, Topology(0, 1, max_batch_tokens=2048))
    first = profile.prefill_s(16)
    steps_before = math.ceil((0.0301 - first) / 0.002)
    arrival_step_end = first + steps_before * 0.002
    assert prompt.ttft == pytest.approx(arrival_step_end - 0.0301 + profile.prefill_s(512))
    # The stream's 39 gaps: 38 plain steps and the one mixed step.
    expected = (38 * 0.002 + profile.prefill_s(512)) / 39
    assert stream.tpot == pytest.approx(expected)


def test_a_long_prompts_chunks_cost_what_the_whole_prompt_does():
    """Colocated, a step budget of 1,024 tokens: a 3,072-token prompt is prefilled in
    three chunks, and the curve (measured on whole prompts, attention growing with their
    length) says the whole prompt takes 0.12 s, not three 1,024-token prompts' 0.06 s."""
    profile = EngineProfile(
        prefill=[(16, 0.001), (1024, 0.02), (2048, 0.05), (3072, 0.12)],
        decode=[(1, 0.002)],
    )
    assert profile.chunk_attention_s(0, 1024) == 0.0  # a prompt's first chunk: the curve
    assert profile.chunk_attention_s(1024, 1024) == pytest.approx(0.05 - 0.02 - 0.02)
    assert profile.chunk_attention_s(2048, 1024) == pytest.approx(0.12 - 0.05 - 0.02)
    (alone,) = simulate([SimRequest(0.0, 3072, 1)], profile, Topology(0, 1, max_batch_tokens=1024))
    assert alone.ttft == pytest.approx(0.12)
    # Prefilled whole (a budget that holds it), the same prompt costs the same.
    (whole,) = simulate([SimRequest(0.0, 3072, 1)], profile, Topology(0, 1, max_batch_tokens=4096))
    assert whole.ttft == pytest.approx(0.12)


def test_context_beyond_the_curves_lengthens_a_decode_step_by_its_cost_per_token():
    profile = EngineProfile(
        prefill=[(16, 0.004), (1024, 0.020)],
        decode=[(1, 0.002), (32, 0.004)],
        decode_context=128,
        decode_context_token_s=1e-6,
    )
    assert profile.decode_step_s(4) == pytest.approx(profile.decode_step_s(4, 4 * 128))
    # 4 sequences of 1,128 tokens: 4,000 tokens beyond the curve's context.
    assert profile.decode_step_s(4, 4 * 1128) == pytest.approx(profile.decode_step_s(4) + 0.004)
    # Shorter contexts than the curve's save nothing (the curve is the floor).
    assert profile.decode_step_s(4, 40) == pytest.approx(profile.decode_step_s(4))
    assert profile.step_s(4, 512, 4 * 1128) == pytest.approx(profile.step_s(4, 512) + 0.004)


def test_a_streams_steps_lengthen_as_its_context_grows():
    """One stream, prompt 1,000 tokens, 11 tokens out, free prefill: the k-th decode step
    (k = 1..10) runs at a context of 1,000 + k tokens, 900 + k beyond the curve's 100."""
    per_token = 1e-6
    profile = EngineProfile(
        prefill=[(1, 0.0), (100_000, 0.0)],
        decode=[(1, 0.002), (64, 0.002)],
        decode_context=100,
        decode_context_token_s=per_token,
    )
    (outcome,) = simulate([SimRequest(0.0, 1000, 11)], profile, Topology(0, 1))
    expected = statistics.mean(0.002 + (900 + k) * per_token for k in range(1, 11))
    assert outcome.tpot == pytest.approx(expected)
    # Split, the first token takes a decode step at the prompt's context, the rest the same.
    (split,) = simulate([SimRequest(0.0, 1000, 11)], profile, Topology(1, 1))
    assert split.tpot == pytest.approx(expected)
    assert split.ttft == pytest.approx(0.002 + 900 * per_token)


def test_the_context_cost_is_fitted_through_the_short_curve():
    from app.planning.profiler import context_token_cost

    short = [(4.0, 0.003), (16.0, 0.004)]
    # 2,000 tokens more per sequence: 4 x 2,000 and 16 x 2,000 extra tokens.
    exact = [(4.0, 0.003 + 8_000 * 2e-7), (16.0, 0.004 + 32_000 * 2e-7)]
    assert context_token_cost(short, exact, 2_000) == pytest.approx(2e-7)
    # Noisy points: the slope through the origin that fits them best.
    noisy = [(4.0, 0.003 + 0.002), (16.0, 0.004 + 0.006)]
    slope = (8_000 * 0.002 + 32_000 * 0.006) / (8_000**2 + 32_000**2)
    assert context_token_cost(short, noisy, 2_000) == pytest.approx(slope)
    # A long context measured faster (noise) costs nothing, never less.
    assert context_token_cost(short, [(4.0, 0.002)], 2_000) == 0.0
    assert context_token_cost(short, [], 2_000) == 0.0


def test_the_context_cost_round_trips_through_the_profile_file(tmp_path):
    profile = EngineProfile(
        prefill=[(16, 0.004)], decode=[(1, 0.002)], decode_context=128, decode_context_token_s=2e-7
    )
    profile.save(tmp_path / "p.json")
    assert EngineProfile.load(tmp_path / "p.json").decode_context_token_s == 2e-7
