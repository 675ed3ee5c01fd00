"""``splitserve advise --trace``: which layout serves a trace best under each SLO profile,
predicted by the simulator from the engines' measured costs.

For every layout a pass of the trace is simulated at a ladder of rate scales (each
x ``step`` the last, from ``lowest`` up until no profile holds); a pass lasts the same
time at every rate (at rate scale r it replays r times as much of the trace), so that
a rate the layout cannot sustain shows as a growing queue, not hidden by a short window.
Each profile's measure (attainment or fluidity-index, :mod:`app.replay.profiles`) is
read off every simulated run as the replay client reads it off a real one, and the
layout's goodput under the profile is the highest rate scale at which it holds. The
advised winner of a profile is the layout of highest goodput.

The layouts are those a two-engine host can run: one colocated engine, two colocated
engines, one prefill and one decode engine with every prompt remote, and the same with
prompts under ``local_prefill_below_tokens`` prefilled on decode (splitserve's default).

The serving path runs as processes of their own on the host's cores (the ingress, each
engine's replica, the replay client; :mod:`app.planning.frontend`), a remote prefill's
first token comes from the prefill engine (as splitserve streams it), and engines that
fill every core run at the profile's crowded speed. What the model cannot see (each said
in the advice's ``blind_to``): the serving path's CPU where no front-end cost is given,
decode steps that grow with context and crowded engines (where the profile did not
measure them), the prefix cache, preemption, and the KV transfer's time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.config.routing import RouterConfig
from app.planning.engine_profile import EngineProfile
from app.planning.frontend import FrontEndCost
from app.planning.sim_core import SimRequest
from app.planning.simulator import Topology, simulate_states
from app.replay.profiles import SloProfile, goodput_scale
from app.replay.trace import TraceRequest

CONTEXT_BLIND = (
    "decode steps that lengthen with the context (the profile's decode curve is at one "
    "context; `splitserve profile` now measures what context adds)"
)
CROWDED_BLIND = (
    "engines slowed where they fill every core (the profile has no crowded measurement: "
    "`splitserve profile` without --alone, on a host with a core to spare, takes it)"
)
BLIND_TO = (
    "the serving path's CPU where no --frontend cost is given (on a host without spare "
    "cores it takes the engines' time); with one, vLLM's own lighter server is charged "
    "as splitserve's",
    "the prefix cache (every replayed prompt is new) and preemption",
    "the KV transfer's time (free in the model; a shared-memory copy on one host)",
)


@dataclass(frozen=True)
class Layout:
    name: str
    topology: Topology
    prefill_speedup: float = 1.0  # the prefill pool's engines this many times faster
    overhead_s: float = 0.0  # the serving path's time per request, beyond the profile's


# How splitserve's router runs a remote prefill (its defaults): the prefill engine's first
# token streamed at once, and long prompts prefilled on decode past the backlog.
AS_ROUTED: dict[str, Any] = {
    "first_token_on_prefill": RouterConfig().first_token_on_prefill,
    "max_prefill_backlog": RouterConfig().max_prefill_backlog,
}


def layouts(
    local_prefill_below_tokens: int,
    max_batch_tokens: int = 2048,
    max_num_seqs: int = 64,
    frontend: FrontEndCost | None = None,
    cores: int = 0,
) -> list[Layout]:
    """The layouts a host of two engines can run, named as the trace benchmark names
    the systems that run them. With ``frontend`` and ``cores``, the serving path's CPU
    shares the host's cores with the engines (:mod:`app.planning.frontend`)."""
    shared: dict[str, Any] = {
        "max_batch_tokens": max_batch_tokens,
        "max_num_seqs": max_num_seqs,
        "frontend": frontend,
        "cores": cores,
        **AS_ROUTED,
    }
    return [
        Layout("colocated", Topology(0, 1, **shared)),
        Layout("colocated_two", Topology(0, 2, **shared)),
        Layout("remote", Topology(1, 1, **shared)),
        Layout(
            "default",
            Topology(1, 1, local_prefill_below_tokens=local_prefill_below_tokens, **shared),
        ),
    ]


def simulated_streams(
    requests: Sequence[TraceRequest], profile: EngineProfile, layout: Layout
) -> list[tuple[list[float], int]]:
    """Each request's token times (seconds from its arrival, the serving path's fixed
    overhead added as the simulator adds it to TTFT) and its token count."""
    sim = [SimRequest(r.at_s, r.prompt_tokens, r.output_tokens) for r in requests]
    if layout.overhead_s:
        profile = replace(profile, overhead_s=profile.overhead_s + layout.overhead_s)
    faster = None
    if layout.prefill_speedup != 1.0:
        speedup = layout.prefill_speedup
        faster = replace(profile, prefill=[(x, y / speedup) for x, y in profile.prefill])
    states = simulate_states(sim, profile, layout.topology, faster)
    streams = []
    for state in states:
        overhead = profile.overhead_s + (profile.disaggregated_overhead_s if state.remote else 0.0)
        start = state.request.arrival - overhead
        # What a client sees: each token when its chunk is through the front end (where
        # it is modelled), else as the engine made it.
        times = state.delivered if layout.topology.frontend else state.token_times
        streams.append(([t - start for t in times], state.request.output_tokens))
    return streams


def ladder(lowest: float, step: float, highest: float) -> list[float]:
    rates, rate = [], lowest
    while rate <= highest * (1 + 1e-9):
        rates.append(round(rate, 4))
        rate *= step
    return rates


def advise_trace(
    requests_at: Callable[[float], Sequence[TraceRequest]],
    profile: EngineProfile,
    slo_profiles: Sequence[SloProfile],
    candidates: Sequence[Layout],
    lowest: float = 0.05,
    step: float = 1.15,
    highest: float = 20.0,
) -> dict[str, Any]:
    """Each layout's simulated goodput (rate scale) under each profile, the measure at
    each rate, and each profile's advised winner. ``requests_at(rate)``: the requests a
    pass at that rate scale sends (arrivals already sped up)."""
    blind = list(BLIND_TO) + ([] if profile.decode_context_token_s else [CONTEXT_BLIND])
    if (profile.crowded_prefill, profile.crowded_decode) == (1.0, 1.0):
        blind.append(CROWDED_BLIND)
    found: dict[str, Any] = {"layouts": {}, "advised_winner": {}, "blind_to": blind}
    for layout in candidates:
        curves: dict[str, list[dict[str, float]]] = {p.name: [] for p in slo_profiles}
        for rate in ladder(lowest, step, highest):
            requests = requests_at(rate)
            if not requests:
                continue  # no request arrives in this pass's window: no evidence either way
            streams = simulated_streams(requests, profile, layout)
            holding = 0
            for p in slo_profiles:
                measures = p.measures(streams)
                margin = p.margin(measures)
                curves[p.name].append({"rate_scale": rate, **measures, "margin": margin})
                holding += margin >= 0
            if not holding:
                break
        found["layouts"][layout.name] = {
            "topology": layout.topology.name,
            "goodput_scale": {
                name: goodput_scale([(c["rate_scale"], c["margin"]) for c in curve])
                for name, curve in curves.items()
            },
            "curves": curves,
        }
    for p in slo_profiles:
        by_layout = {name: row["goodput_scale"][p.name] for name, row in found["layouts"].items()}
        found["advised_winner"][p.name] = max(by_layout, key=lambda n: by_layout[n])
    return found


def calibrated(
    candidates: Sequence[Layout],
    measured_ttft_p50_s: dict[str, float],
    requests: Sequence[TraceRequest],
    profile: EngineProfile,
) -> list[Layout]:
    """``candidates`` with each one's serving-path time per request set from a light
    load: its measured TTFT median on ``requests`` (a pass at a low rate) less the
    simulated one (at least 0). The engine profile cannot hold that time (the hops, the
    KV read of a remote prefill, the HTTP path); a low-rate pass measures it without
    measuring the goodput itself. Layouts without a measurement are kept as they are."""
    found = []
    for layout in candidates:
        measured = measured_ttft_p50_s.get(layout.name)
        if measured is None:
            found.append(layout)
            continue
        firsts = sorted(
            times[0]
            for times, _ in simulated_streams(requests, profile, replace(layout, overhead_s=0.0))
            if times
        )
        simulated = firsts[len(firsts) // 2] if firsts else 0.0
        found.append(replace(layout, overhead_s=max(0.0, measured - simulated)))
    return found


def what_if(
    requests_at: Callable[[float], Sequence[TraceRequest]],
    profile: EngineProfile,
    slo_profiles: Sequence[SloProfile],
    local_prefill_below_tokens: int,
    frontend: FrontEndCost | None,
    highest: float = 20.0,
) -> dict[str, Any]:
    """What would make splitting win, by the same model: the serving path on cores of
    its own; four engines instead of two; a prefill pool of engines twice as fast (a
    compute-rich accelerator for prefill, the rest unchanged). Each scenario's goodput
    per layout and profile, and its advised winners."""
    below = local_prefill_below_tokens
    spare: dict[str, Any] = {"frontend": frontend, "cores": 0}
    two = layouts(below, **spare)
    as_run: dict[str, Any] = {**spare, **AS_ROUTED}
    four = [
        Layout("colocated x4", Topology(0, 4, **as_run)),
        Layout("1P:3D remote", Topology(1, 3, **as_run)),
        Layout("1P:3D default", Topology(1, 3, local_prefill_below_tokens=below, **as_run)),
        Layout("2P:2D remote", Topology(2, 2, **as_run)),
        Layout("2P:2D default", Topology(2, 2, local_prefill_below_tokens=below, **as_run)),
    ]
    fast_prefill = [
        Layout(a.name, a.topology, 2.0 if a.topology.prefill_replicas else 1.0) for a in two
    ]
    scenarios = {
        "serving path on spare cores": two,
        "four engines, serving path on spare cores": four,
        "prefill engines 2x faster, serving path on spare cores": fast_prefill,
    }
    found = {}
    for name, candidates in scenarios.items():
        advice = advise_trace(requests_at, profile, slo_profiles, candidates, highest=highest)
        found[name] = {
            "advised_winner": advice["advised_winner"],
            "goodput_scale": {n: r["goodput_scale"] for n, r in advice["layouts"].items()},
        }
    return found


def table(advice: dict[str, Any]) -> str:
    """The advice as a table: each layout's simulated goodput under each profile."""
    names = list(advice["advised_winner"])
    lines = [
        f"speed factors {advice.get('speed_factors', '?')} (TTFT bounds x prefill, TPOT "
        "bounds x decode)",
        "| layout | " + " | ".join(f"{n} goodput (rate scale)" for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for layout, row in advice["layouts"].items():
        cells = " | ".join(str(row["goodput_scale"][n]) for n in names)
        lines.append(f"| {layout} ({row['topology']}) | {cells} |")
    winners = ", ".join(f"{n}: {w}" for n, w in advice["advised_winner"].items())
    lines.append(f"advised winner: {winners}")
    lines.append("blind to: " + "; ".join(advice["blind_to"]))
    return "\n".join(lines)


def advise_from_files(
    trace: str,
    engine_profile: str,
    window: Any,
    local_prefill_below_tokens: int,
    frontend: str | None = None,
    cores: int = 0,
) -> dict[str, Any]:
    """``splitserve advise --trace``: passes of ``window.duration_s`` seconds each (at
    rate scale r, r times as much of the trace from ``window.start_s``), the profile's
    engine, the SLO profiles scaled by its speed; the advice with its conditions."""
    from dataclasses import replace

    from app.replay.profiles import scaled_profiles, speed_factors
    from app.replay.trace import read_trace, windowed

    profile = EngineProfile.load(engine_profile)
    rows = read_trace(trace)

    def requests_at(rate: float) -> list[TraceRequest]:
        return windowed(rows, replace(window, duration_s=window.duration_s * rate, rate_scale=rate))

    if not requests_at(1.0):
        raise ValueError(f"no request of {trace} arrives in the window {window.stated()}")
    # Past this rate scale a pass would run out of trace and send less than it says.
    fill = ((rows[-1][0] - window.start_s) / window.duration_s) if rows else 0.0
    factors = speed_factors(profile.prefill_s(1024), profile.decode_step_s(1))
    profiles = scaled_profiles(factors)
    cost = FrontEndCost.from_fit(frontend) if frontend else None
    candidates = layouts(local_prefill_below_tokens, frontend=cost, cores=cores)
    advice = advise_trace(requests_at, profile, profiles, candidates, highest=min(20.0, fill))
    return {
        "trace": trace,
        "window": window.stated(),
        "pass_s": window.duration_s,
        "frontend": frontend,
        "cores": cores,
        "speed_factors": factors.stated(),
        "profiles": [p.stated() for p in profiles],
        **advice,
    }
