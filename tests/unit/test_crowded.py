"""An engine where every core runs an engine: the profile's crowded factors, the cores a
neighbour engine takes while they are measured, and where the simulator applies them."""

import pytest

from app.planning.engine_profile import EngineProfile
from app.planning.neighbour import other_cores
from app.planning.sim_core import SimRequest
from app.planning.simulator import Topology, simulate


def _profile(crowded_prefill: float = 1.0, crowded_decode: float = 1.0) -> EngineProfile:
    return EngineProfile(
        prefill=[(1, 0.010), (1000, 0.010)],
        decode=[(1, 0.002), (100, 0.002)],
        decode_context_token_s=1e-6,
        crowded_prefill=crowded_prefill,
        crowded_decode=crowded_decode,
    )


def test_a_neighbour_takes_the_cores_the_engine_is_not_bound_to():
    assert other_cores("0", 2) == "1"
    assert other_cores("0-1", 4) == "2,3"
    assert other_cores("1,3", 4) == "0,2"
    assert other_cores("0", 1) is None  # no core left
    assert other_cores("0-1", 2) is None
    assert other_cores(None, 8) is None  # where the engine runs is not known


def test_the_crowded_profile_scales_each_curve_by_its_factor(tmp_path):
    profile = _profile(crowded_prefill=1.5, crowded_decode=1.2)
    crowded = profile.crowded()
    assert crowded.prefill_s(500) == pytest.approx(0.015)
    assert crowded.decode_step_s(1) == pytest.approx(0.0024)
    assert crowded.decode_context_token_s == pytest.approx(1.2e-6)
    assert crowded.crowded().prefill_s(500) == pytest.approx(0.015)  # once, not twice
    profile.save(tmp_path / "p.json")
    loaded = EngineProfile.load(tmp_path / "p.json")
    assert (loaded.crowded_prefill, loaded.crowded_decode) == (1.5, 1.2)
    # A profile written before the crowded measurement runs as measured alone.
    assert _profile().crowded().prefill_s(500) == pytest.approx(0.010)


def test_engines_run_crowded_only_where_they_fill_every_core():
    profile = _profile(crowded_prefill=2.0, crowded_decode=2.0)
    one = [SimRequest(0.0, 100, 1)]
    assert not Topology(0, 1, cores=2).crowded
    assert Topology(0, 2, cores=2).crowded and Topology(1, 1, cores=2).crowded
    assert not Topology(0, 2).crowded  # cores = 0: each engine has a core of its own
    (spare,) = simulate(one, profile, Topology(0, 1, cores=2))
    (full,) = simulate(one, profile, Topology(0, 2, cores=2))
    assert spare.ttft == pytest.approx(0.010)
    assert full.ttft == pytest.approx(0.020)
