"""PNG plots of a side-by-side comparison: latency CDFs and SLO attainment vs request rate.

    .venv/bin/python -m load_tests.plots [--result load_tests/results/compare.json] \
        [--out-dir docs/img]

Reads the JSON ``load_tests.compare`` writes (it keeps every request's samples) and draws,
one line per system: the CDF of TTFT at concurrency 1, of the short requests' TTFT and
inter-token latency under the mixed load, and the SLO attainment at each rate the
goodput search tried (with the 90% line). Needs matplotlib (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# (file name, title, x label, where the samples are in a row)
CDFS = (
    (
        "c1_ttft_cdf.png",
        "TTFT, concurrency 1 (128 in / 128 out)",
        "TTFT (ms)",
        ("c1", "ttft_samples_ms"),
    ),
    (
        "mixed_ttft_cdf.png",
        "Short-request TTFT under the mixed load",
        "TTFT (ms)",
        ("mixed", "short_ttft_samples_ms"),
    ),
    (
        "mixed_itl_cdf.png",
        "Short-request inter-token gaps under the mixed load",
        "gap between chunks (ms)",
        ("mixed", "short_itl_samples_ms"),
    ),
)


def cdf_points(samples: list[float]) -> tuple[list[float], list[float]]:
    """Sorted samples and their cumulative share (0..1], for a step plot."""
    ordered = sorted(samples)
    n = len(ordered)
    return ordered, [(i + 1) / n for i in range(n)]


def draw(result: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    rows: dict[str, Any] = result["rows"]
    for filename, title, xlabel, (section, key) in CDFS:
        figure, axes = plt.subplots(figsize=(7, 4))
        for system, row in rows.items():
            samples = row.get(section, {}).get(key)
            if samples:
                x, y = cdf_points(samples)
                axes.step(x, y, where="post", label=system)
        axes.set_xscale("log")
        axes.set(title=title, xlabel=xlabel + ", log scale", ylabel="share of requests")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
        figure.tight_layout()
        figure.savefig(out_dir / filename, dpi=110)
        plt.close(figure)
        written.append(out_dir / filename)
    if any(row.get("goodput_tried") for row in rows.values()):
        figure, axes = plt.subplots(figsize=(7, 4))
        for system, row in rows.items():
            tried = sorted(row.get("goodput_tried") or [])
            if tried:
                axes.plot([r for r, _ in tried], [a * 100 for _, a in tried], "o-", label=system)
        axes.axhline(90, color="grey", linestyle="--", label="90% target")
        conditions = result.get("conditions", {})
        axes.set(
            title=f"SLO attainment (TTFT <= {conditions.get('slo_ttft_ms')} ms, "
            f"TPOT <= {conditions.get('slo_tpot_ms')} ms), mixed load",
            xlabel="request rate (req/s)",
            ylabel="requests within SLO (%)",
        )
        axes.grid(True, alpha=0.3)
        axes.legend()
        figure.tight_layout()
        figure.savefig(out_dir / "slo_attainment.png", dpi=110)
        plt.close(figure)
        written.append(out_dir / "slo_attainment.png")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--result", default="load_tests/results/compare.json")
    parser.add_argument("--out-dir", default="docs/img")
    args = parser.parse_args()
    for path in draw(json.loads(Path(args.result).read_text()), Path(args.out_dir)):
        print(path)


if __name__ == "__main__":
    main()
