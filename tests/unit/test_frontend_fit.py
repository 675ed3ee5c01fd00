"""Fitting the front end's CPU costs from workloads that differ in requests, remote
prefills and chunks."""

import pytest

from load_tests.frontend_fit import fit


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
