"""PNG plots of a side-by-side comparison: latency CDFs and SLO attainment vs request rate.

    .venv/bin/python -m load_tests.reports.plots [--result load_tests/results/compare.json] \
        [--out-dir load_tests/results/plots]     (--out-dir docs/img updates the docs')

Reads the JSON ``load_tests.serving.compare`` writes (it keeps every request's samples) and draws,
one line per system: the CDF of TTFT at concurrency 1, of the short requests' TTFT and
inter-token latency under the mixed load, and the SLO attainment at each rate the
goodput search tried (with the target line). Each series has its own line style and
marker and its sample count in the legend, which sits below the axes (off the data);
each figure's caption gives the run's date and machine. Needs matplotlib (the ``bench``
extra).
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


# One per series, in turn, so that series stay apart in print and for colour-blind eyes.
STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"))


def caption(conditions: dict[str, Any]) -> str:
    """The run's date and machine, for a figure's foot."""
    packages = conditions.get("packages") or {}
    stack = ", ".join(f"{name} {version}" for name, version in sorted(packages.items()))
    return (
        f"measured {conditions.get('date', 'on an unrecorded date')} on "
        f"{conditions.get('cpu', 'an unrecorded CPU')} ({conditions.get('cpus', '?')} cores)"
        + (f"; {stack}" if stack else "")
    )


def _finish(figure: Any, axes: Any, conditions: dict[str, Any], path: Path) -> None:
    """Legend below the axes, caption at the foot, saved to ``path``."""
    handles, labels = axes.get_legend_handles_labels()
    figure.legend(
        handles,
        labels,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.03),
        ncol=2,
        fontsize=8,
        frameon=False,
    )
    figure.text(0.01, 0.005, caption(conditions), fontsize=7, color="dimgrey")
    figure.tight_layout(rect=(0, 0.08 + 0.05 * ((len(labels) + 1) // 2), 1, 1))
    figure.savefig(path, dpi=110)


def draw(result: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    rows: dict[str, Any] = result["rows"]
    conditions = result.get("conditions", {})
    for filename, title, xlabel, (section, key) in CDFS:
        figure, axes = plt.subplots(figsize=(7, 5))
        for number, (system, row) in enumerate(rows.items()):
            samples = row.get(section, {}).get(key)
            if samples:
                x, y = cdf_points(samples)
                line, marker = STYLES[number % len(STYLES)]
                axes.step(
                    x,
                    y,
                    where="post",
                    linestyle=line,
                    marker=marker,
                    markevery=max(1, len(x) // 8),
                    label=f"{system} (n={len(samples)})",
                )
        axes.set_xscale("log")
        axes.set(title=title, xlabel=xlabel + ", log scale", ylabel="share of requests")
        axes.grid(True, which="both", alpha=0.3)
        _finish(figure, axes, conditions, out_dir / filename)
        plt.close(figure)
        written.append(out_dir / filename)
    if any(row.get("goodput_tried") for row in rows.values()):
        figure, axes = plt.subplots(figsize=(7, 5))
        for number, (system, row) in enumerate(rows.items()):
            tried = sorted(row.get("goodput_tried") or [])
            if tried:
                line, marker = STYLES[number % len(STYLES)]
                axes.plot(
                    [r for r, _ in tried],
                    [a * 100 for _, a in tried],
                    linestyle=line,
                    marker=marker,
                    label=f"{system} ({len(tried)} rates)",
                )
        target = 100 * float(conditions.get("slo_attainment", 0.9))
        axes.axhline(target, color="grey", linestyle="--", label=f"{target:.0f}% target")
        axes.set(
            title=f"SLO attainment (TTFT <= {conditions.get('slo_ttft_ms')} ms, "
            f"TPOT <= {conditions.get('slo_tpot_ms')} ms), mixed load",
            xlabel="request rate (req/s)",
            ylabel="requests within SLO (%)",
        )
        axes.grid(True, alpha=0.3)
        _finish(figure, axes, conditions, out_dir / "slo_attainment.png")
        plt.close(figure)
        written.append(out_dir / "slo_attainment.png")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--result", default="load_tests/results/compare.json")
    parser.add_argument(
        "--out-dir",
        default="load_tests/results/plots",
        help="where the PNGs go (%(default)s); docs/img replaces the docs' plots",
    )
    args = parser.parse_args()
    for path in draw(json.loads(Path(args.result).read_text()), Path(args.out_dir)):
        print(path)


if __name__ == "__main__":
    main()
