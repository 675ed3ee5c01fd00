import random

from load_tests.client.workloads import WORKLOADS, fixed, mixed, rate_rng, shared_prefix


def test_workloads_are_seeded():
    for make in WORKLOADS.values():
        assert make(random.Random(1), 20) == make(random.Random(1), 20)


def test_fixed_lengths():
    requests = fixed(random.Random(0), 5, input_len=10, output_len=3)
    assert all(len(p) == 10 and m == 3 for p, m in requests)


def test_mixed_has_long_prompts_among_streams():
    requests = mixed(random.Random(0), 200)
    long = [r for r in requests if len(r[0]) == 1536]
    assert 20 <= len(long) <= 60  # ~20%
    assert all(m == 8 for _, m in long)
    assert all(len(p) + m <= 2048 for p, m in requests)


def test_shared_prefix_reuses_a_few_system_prompts():
    requests = shared_prefix(random.Random(0), 40, systems=4, system_len=64)
    heads = {tuple(p[:64]) for p, _ in requests}
    assert len(heads) == 4


def test_each_rate_of_a_sweep_gets_prompts_of_its_own():
    # A goodput sweep sends a batch per rate; re-sending an earlier rate's prompts would be
    # answered from the engines' prefix caches.
    low = mixed(rate_rng(0, 2.0), 40)
    high = mixed(rate_rng(0, 4.0), 80)
    assert {tuple(p[:64]) for p, _ in low}.isdisjoint({tuple(p[:64]) for p, _ in high})
    assert mixed(rate_rng(0, 4), 80) == high  # repeatable, int or float rate alike
    assert mixed(rate_rng(1, 4.0), 80) != high
