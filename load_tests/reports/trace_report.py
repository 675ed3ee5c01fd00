"""What a trace benchmark (:mod:`load_tests.serving.trace_bench`) concludes from its passes: each
system's goodput per profile over the repeats, each profile's measured winner and its
ties beside the advised one, the failures below goodput, and the table."""

from __future__ import annotations

import statistics
from typing import Any

from app.replay.profiles import SloProfile, goodput_scale


def goodput_by_profile(
    passes: list[dict[str, Any]], profiles: list[SloProfile], repeats: int
) -> dict[str, dict[str, Any]]:
    """Each profile's goodput (rate scale) in every repeat, and their median and spread."""
    found = {}
    for profile in profiles:
        each = []
        for repeat in range(repeats):
            points = [
                (p["rate_scale"], p["profiles"][profile.name]["margin"])
                for p in passes
                if p["repeat"] == repeat
            ]
            each.append(goodput_scale(points))
        found[profile.name] = {
            "median": round(statistics.median(each), 4),
            "min": min(each),
            "max": max(each),
            "repeats": each,
        }
    return found


TIE = 0.05  # goodputs this close to the best (relative) are a tie, beside overlapping spreads


def verdicts(
    rows: dict[str, dict[str, Any]],
    layout_of: dict[str, str],
    advice: dict[str, Any],
    advice_calibrated: dict[str, Any],
    profiles: list[SloProfile],
) -> dict[str, Any]:
    """Each profile: every system's goodput, the measured winner (its layout) and the
    advised one, and whether they agree (as layouts: vLLM's server is a colocated
    engine). ``tied`` are the systems the winner does not beat beyond the noise: their
    spread of repeats reaches the winner's, or their median is within ``TIE`` of it;
    ``agrees`` holds where the advised layout is among them, ``agrees_strictly`` only
    where it is the winner's."""
    found = {}
    for profile in profiles:
        goodput = {name: row["goodput_scale"][profile.name] for name, row in rows.items()}
        winner = max(goodput, key=lambda n: goodput[n]["median"])
        best = goodput[winner]
        tied = [
            name
            for name, g in goodput.items()
            if g["max"] >= best["min"] or g["median"] >= best["median"] * (1 - TIE)
        ]
        advised = advice["advised_winner"][profile.name]
        found[profile.name] = {
            "profile": profile.stated(),
            "goodput_scale": goodput,
            "measured_winner": winner,
            "measured_winner_layout": layout_of[winner],
            "tied": tied,
            "advised_winner": advised,
            "agrees_strictly": layout_of[winner] == advised,
            "agrees": advised in {layout_of[name] for name in tied},
            "advised_winner_calibrated": advice_calibrated["advised_winner"][profile.name],
            "agrees_calibrated": advice_calibrated["advised_winner"][profile.name]
            in {layout_of[name] for name in tied},
            "advised_goodput_scale": {
                name: row["goodput_scale"][profile.name] for name, row in advice["layouts"].items()
            },
        }
    return found


def failed_below_goodput(rows: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Failed requests of each system in the passes below its lowest goodput."""
    found = {}
    for name, row in rows.items():
        floor = min(g["min"] for g in row["goodput_scale"].values())
        found[name] = sum(p["failed"] for p in row["passes"] if p["rate_scale"] < floor)
    return found


def print_table(result: dict[str, Any]) -> None:
    conditions = result["conditions"]
    print(
        f"\n{conditions['machine']['cpu']}, {conditions['machine']['cpus']} cores; speed "
        f"factors {conditions['speed_factors']}; passes of {conditions['pass_s']} s, "
        f"{conditions['window_at_rate_1']}"
    )
    print("| profile | system | goodput (rate scale) median [min, max] | advised (sim) |")
    print("|---|---|---|---:|")
    for name, verdict in result["profiles"].items():
        for system, g in verdict["goodput_scale"].items():
            layout = result["systems"][system]["layout"]
            print(
                f"| {name} | {system} | {g['median']} [{g['min']}, {g['max']}] "
                f"| {verdict['advised_goodput_scale'][layout]} |"
            )
        print(
            f"| {name} | **measured winner** {verdict['measured_winner']} (tied: "
            f"{', '.join(verdict['tied'])}) | **advised** {verdict['advised_winner']} "
            f"(calibrated: {verdict['advised_winner_calibrated']}) "
            f"| agrees: {verdict['agrees']} (strictly: {verdict['agrees_strictly']}) |"
        )
