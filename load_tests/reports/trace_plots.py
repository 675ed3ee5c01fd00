"""PNG plots of a trace benchmark (:mod:`load_tests.serving.trace_bench`): each profile's measure
against the rate scale per system (DistServe's attainment figure, the target as a line),
and the CDFs of TTFT and of the gaps between token arrivals at the lowest rate.

    .venv/bin/python -m load_tests.reports.trace_plots --result load_tests/results/trace_bench.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from load_tests.reports.plots import STYLES, _finish, cdf_points


def _conditions(result: dict[str, Any]) -> dict[str, Any]:
    machine = result["conditions"]["machine"]
    return {**machine, "date": result["conditions"]["date"]}


def draw(result: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    conditions = _conditions(result)
    for stated in result["conditions"]["profiles"]:
        name, measure = stated["name"], stated["measure"]
        key = "fluidity" if measure == "fluidity" else "attainment"
        figure, axes = plt.subplots(figsize=(6.4, 4.8))
        for (system, row), (line, marker) in zip(
            result["systems"].items(), STYLES * 2, strict=False
        ):
            passes = [p for p in row["passes"] if p["repeat"] == 0]
            xs = [p["rate_scale"] for p in passes]
            ys = [p["profiles"][name][key] for p in passes]
            axes.plot(xs, ys, linestyle=line, marker=marker, label=system)
        axes.axhline(stated["target"], color="grey", linewidth=0.8, label="target")
        axes.set_xscale("log")
        plain = matplotlib.ticker.FormatStrFormatter("%g")
        axes.xaxis.set_major_formatter(plain)
        axes.xaxis.set_minor_formatter(plain)
        axes.set_xlabel("rate scale (x the trace's arrival rate)")
        axes.set_ylabel(key)
        axes.set_title(
            f"{name}: TTFT {stated['ttft_ms']:g} ms, "
            f"{'token deadline' if key == 'fluidity' else 'TPOT'} {stated['tpot_ms']:g} ms"
        )
        path = out_dir / f"{name}_{key}.png"
        _finish(figure, axes, conditions, path)
        plt.close(figure)
        written.append(path)
    for sample, label, file in (
        ("ttft_samples_ms", "TTFT (ms)", "ttft_cdf.png"),
        ("gap_samples_ms", "gap between token arrivals (ms)", "token_gap_cdf.png"),
    ):
        figure, axes = plt.subplots(figsize=(6.4, 4.8))
        for (system, row), (line, _) in zip(result["systems"].items(), STYLES * 2, strict=False):
            first = row["passes"][0]
            if first[sample]:
                xs, ys = cdf_points(first[sample])
                axes.step(xs, ys, where="post", linestyle=line, label=system)
        axes.set_xscale("log")
        axes.set_xlabel(label)
        axes.set_ylabel("share of samples")
        rate = result["conditions"]["rate_scales"][0]
        axes.set_title(f"{label.split(' (')[0]}, rate scale x{rate:g} (first pass)")
        path = out_dir / file
        _finish(figure, axes, conditions, path)
        plt.close(figure)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--result", default="load_tests/results/trace_bench.json")
    parser.add_argument("--out-dir", help="default: beside the result, <stem>_plots/")
    args = parser.parse_args()
    result_path = Path(args.result)
    out_dir = Path(args.out_dir or result_path.parent / f"{result_path.stem}_plots")
    for path in draw(json.loads(result_path.read_text()), out_dir):
        print(path)


if __name__ == "__main__":
    main()
