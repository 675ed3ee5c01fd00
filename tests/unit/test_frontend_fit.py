"""Fitting the front end's CPU costs from workloads that differ in requests, remote
prefills, chunks and engine steps."""

import numpy as np
import pytest

from app.planning.frontend import FrontEndCost
from load_tests.planning.frontend_fit import fit, fit_client

COSTS = (0.004, 0.006, 0.0005, 0.0007)  # request, remote, chunk, step


REPLICA_COSTS = (0.001, 0.002, 0.0002, 0.0007)  # the engines' replicas' share of COSTS


def _row(requests, remote, chunks, steps, costs=COSTS, noise=0.0, replica=REPLICA_COSTS):
    counts = (requests, remote, chunks, steps)
    cpu = sum(n * c for n, c in zip(counts, costs, strict=True)) + noise
    # The replicas' share, split between the two pools as the work goes.
    prefill = remote * replica[1]
    decode = requests * replica[0] + chunks * replica[2] + steps * replica[3]
    return {
        "requests": requests,
        "remote": remote,
        "chunks": chunks,
        "steps": steps,
        "cpu_s": {
            "Serve proxy": 0.01 * requests * costs[0],
            "Ingress replica": cpu - prefill - decode - 0.01 * requests * costs[0],
            "Prefill replica": prefill,
            "Decode replica": decode,
        },
        "cpu_s_total": cpu,
    }


# As the five workloads go: twice the clients, about as many chunks in half the steps.
ROWS = [
    _row(200, 0, 350, 150),
    _row(200, 0, 2500, 3800),
    _row(200, 200, 320, 320),
    _row(200, 200, 3700, 4000),
    _row(200, 0, 2300, 1900),
]


def test_the_four_costs_are_recovered_and_the_fifth_workload_checks_them():
    costs, residuals = fit(ROWS)
    assert costs == pytest.approx(COSTS)
    assert residuals == pytest.approx([0.0] * 5, abs=1e-9)
    # A workload the four costs do not explain shows in the residuals.
    costs, residuals = fit([*ROWS[:4], _row(200, 0, 2300, 1900, noise=0.8)])
    assert max(abs(r) for r in residuals) > 0.1


def test_the_replicas_share_is_fitted_apart_and_never_exceeds_the_whole(tmp_path):
    import json

    from load_tests.planning.frontend_fit import REPLICAS, named

    replica, _ = fit(ROWS, REPLICAS)
    assert replica == pytest.approx(REPLICA_COSTS)
    found = named(fit(ROWS)[0], fit_client([{**r, "client_cpu_s": 0.0} for r in ROWS]), replica)
    assert found["replica_chunk_s"] == pytest.approx(REPLICA_COSTS[2])
    (tmp_path / "fit.json").write_text(json.dumps(found))
    cost = FrontEndCost.from_fit(tmp_path / "fit.json")
    assert cost.ingress.chunk_s == pytest.approx(COSTS[2] - REPLICA_COSTS[2])
    assert cost.replica.step_s == pytest.approx(COSTS[3])  # the step is the replica's
    # A replica share fitted above the whole (noise) is cut to the whole.
    over = np.array([0.01, 0.0, 0.0, 0.0])
    assert named(fit(ROWS)[0], np.zeros(2), over)["replica_request_s"] == pytest.approx(COSTS[0])


def test_a_per_step_cost_is_not_taken_for_a_per_chunk_one():
    """A replica whose CPU goes by steps: with half the steps for as many chunks, the
    fit puts it on steps, not chunks."""
    steps_only = (0.004, 0.006, 0.0, 0.001)
    rows = [
        _row(r["requests"], r["remote"], r["chunks"], r["steps"], costs=steps_only) for r in ROWS
    ]
    costs, _ = fit(rows)
    assert costs == pytest.approx(steps_only, abs=1e-9)


def test_costs_are_never_negative():
    rows = [_row(100, 0, 100, 100, costs=(0.01, 0.0, 0.0, 0.0), noise=-0.5), ROWS[2]]
    costs, _ = fit(rows)
    assert min(costs) >= 0


def test_the_load_generators_costs_are_fitted_and_added_only_on_request():
    rows = [
        {"requests": r, "chunks": c, "client_cpu_s": r * 0.002 + c * 0.0003}
        for r, c in ((200, 400), (200, 6000), (100, 300))
    ]
    assert fit_client(rows) == pytest.approx([0.002, 0.0003])
    cost = FrontEndCost(0.004, 0.006, 0.0005, client_request_s=0.002, client_chunk_s=0.0003)
    assert cost.client.costs == (0.0, 0.0, 0.0, 0.0)  # a user's clients run elsewhere
    both = cost.with_client()
    assert both.client.costs == pytest.approx((0.002, 0.0, 0.0003, 0.0))
    assert both.total().costs == pytest.approx((0.006, 0.006, 0.0008, 0.0))
    with pytest.raises(ValueError):
        FrontEndCost(0.0, 0.0, 0.0, client_chunk_s=-1.0)


def test_rounds_are_fitted_together_and_each_on_its_own():
    from load_tests.planning.frontend_fit import by_round, named

    slower = tuple(c * 1.2 for c in COSTS)
    rows = [{**r, "round": 0} for r in ROWS]
    rows += [
        {**_row(r["requests"], r["remote"], r["chunks"], r["steps"], costs=slower), "round": 1}
        for r in ROWS
    ]
    for row in rows:
        row["client_cpu_s"] = 0.001 * row["requests"] + 0.0001 * row["chunks"]
    together, _ = fit(rows)
    assert together == pytest.approx([c * 1.1 for c in COSTS], rel=0.05)
    first, second = by_round(rows)
    assert first["chunk_s"] == pytest.approx(COSTS[2], rel=1e-6)
    assert second["step_s"] == pytest.approx(slower[3], rel=1e-6)
    assert named(together, fit_client(rows))["client_request_s"] == pytest.approx(0.001)
