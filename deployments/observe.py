"""Prometheus beside a running app: ``python -m deployments.observe [options]`` (``make observe``).

Writes a Prometheus config with two scrape jobs and runs Debian's ``prometheus`` on it:

- ``ray``: every node's Ray metrics agent, through the service discovery file Ray's
  dashboard writes (``<ray temp dir>/prom_metrics_service_discovery.json``). Series are
  named as Ray exports them: ``ray_splitserve_*``, ``ray_vllm_*`` (with ``pool`` and
  ``ReplicaId`` labels). The Grafana dashboard in ``observability/grafana/`` reads these.
- ``splitserve``: ``GET /metrics`` on the app's API port, as vLLM-layout tools see it
  (``vllm:*`` and ``splitserve_*``, with ``pool`` and ``replica`` labels).

The same numbers reach both jobs; they differ only in names. The alerting rules of
``observability/alerts.yml`` are loaded (Prometheus's Alerts page shows them; route them
to Alertmanager in your own Prometheus). Prometheus listens on
127.0.0.1 and keeps its data under ``.observe/`` (removed by nothing: delete it to forget).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

RAY_SD_FILE = "/tmp/ray/prom_metrics_service_discovery.json"
ALERT_RULES = Path(__file__).resolve().parents[1] / "observability" / "alerts.yml"


def prometheus_config(sd_file: str, api_target: str, scrape_interval_s: float) -> dict[str, Any]:
    """A Prometheus config scraping Ray's metrics agents (file_sd) and the app's ``/metrics``,
    with splitserve's alerting rules."""
    interval = f"{scrape_interval_s:g}s"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(ALERT_RULES)],
        "scrape_configs": [
            {"job_name": "ray", "file_sd_configs": [{"files": [sd_file]}]},
            {
                "job_name": "splitserve",
                "metrics_path": "/metrics",
                "static_configs": [{"targets": [api_target]}],
            },
        ],
    }


def prometheus_command(config_file: Path, data_dir: Path, listen: str) -> list[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise FileNotFoundError(
            "no `prometheus` binary on PATH: install it (Debian: apt-get install prometheus)"
        )
    return [
        binary,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address={listen}",
    ]


def write_config(directory: Path, sd_file: str, api_target: str, interval_s: float) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(prometheus_config(sd_file, api_target, interval_s)))
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sd-file", default=RAY_SD_FILE, help="Ray's service discovery file")
    parser.add_argument("--api", default="127.0.0.1:8100", help="the app's API host:port")
    parser.add_argument("--listen", default="127.0.0.1:9090", help="Prometheus's address")
    parser.add_argument("--interval", type=float, default=5.0, help="scrape interval, seconds")
    parser.add_argument("--dir", type=Path, default=Path(".observe"), help="config and data")
    args = parser.parse_args(argv)
    config = write_config(args.dir, args.sd_file, args.api, args.interval)
    try:
        command = prometheus_command(config, args.dir / "data", args.listen)
    except FileNotFoundError as exc:
        print(f"splitserve observe: {exc}", file=sys.stderr)
        return 1
    if not Path(args.sd_file).exists():
        print(
            f"splitserve observe: {args.sd_file} does not exist yet; Ray's dashboard writes "
            "it once the app runs (`make run`). Prometheus rereads it when it appears.",
            file=sys.stderr,
        )
    print(
        f"splitserve observe: Prometheus on http://{args.listen}, scraping Ray's metrics "
        f"agents ({args.sd_file}) and http://{args.api}/metrics. Grafana: import "
        "observability/grafana/splitserve.json.",
        file=sys.stderr,
    )
    os.execv(command[0], command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
