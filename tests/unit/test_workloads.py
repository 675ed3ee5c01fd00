import random

from load_tests.workloads import WORKLOADS, fixed, mixed, shared_prefix


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
