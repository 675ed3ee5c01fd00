"""Fitting the front end's CPU costs from workloads that differ in requests, remote
prefills and chunks."""

import pytest

from app.advice.frontend import FrontEndCost
from load_tests.frontend_fit import fit, fit_client


def _row(requests, remote, chunks, costs=(0.004, 0.006, 0.0005), noise=0.0):
    cpu = requests * costs[0] + remote * costs[1] + chunks * costs[2] + noise
    return {"requests": requests, "remote": remote, "chunks": chunks, "cpu_s_total": cpu}


def test_the_three_costs_are_recovered_and_the_fourth_workload_checks_them():
    rows = [_row(200, 0, 400), _row(200, 0, 6000), _row(200, 200, 400), _row(200, 200, 6000)]
    costs, residuals = fit(rows)
    assert costs == pytest.approx([0.004, 0.006, 0.0005])
    assert residuals == pytest.approx([0.0] * 4, abs=1e-9)
    # A workload the three costs do not explain shows in the residuals.
    costs, residuals = fit([*rows[:3], _row(200, 200, 6000, noise=0.8)])
    assert max(abs(r) for r in residuals) > 0.1


def test_costs_are_never_negative():
    rows = [_row(100, 0, 100, costs=(0.01, 0.0, 0.0), noise=-0.5), _row(100, 100, 100)]
    costs, _ = fit(rows)
    assert min(costs) >= 0


def test_the_load_generators_costs_are_fitted_and_added_only_on_request():
    rows = [
        {"requests": r, "chunks": c, "client_cpu_s": r * 0.002 + c * 0.0003}
        for r, c in ((200, 400), (200, 6000), (100, 300))
    ]
    assert fit_client(rows) == pytest.approx([0.002, 0.0003])
    cost = FrontEndCost(0.004, 0.006, 0.0005, client_request_s=0.002, client_chunk_s=0.0003)
    both = cost.with_client()
    assert (both.request_s, both.remote_request_s, both.chunk_s) == pytest.approx(
        (0.006, 0.006, 0.0008)
    )
    assert (both.client_request_s, both.client_chunk_s) == (0.0, 0.0)
    with pytest.raises(ValueError):
        FrontEndCost(0.0, 0.0, 0.0, client_chunk_s=-1.0)
