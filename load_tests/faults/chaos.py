"""The chaos soak's faults (:mod:`load_tests.reliability.chaos_soak`), injected in turn:
``ray.kill`` the prefill replica, ``ray.kill`` the busiest decode replica, SIGKILL a
decode replica's engine process, roll a redeploy (a changed config: Serve replaces every
replica)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from typing import Any

import psutil
import ray

from deployments.replicas import replica_actor_names
from load_tests.reliability.migration_bench import kill_busiest_decode
from load_tests.systems.local_app import LocalApp, config_args, merge

FAULTS = ("kill_prefill_replica", "kill_decode_replica", "sigkill_decode_engine", "redeploy")


class Faults:
    """Injects the faults in turn; records when, which, and what it hit."""

    def __init__(self, app: LocalApp, args: argparse.Namespace, overrides: dict[str, Any]):
        self.app = app
        self.args = args
        self.overrides = overrides
        self.log: list[dict[str, Any]] = []
        self.rolls = 0
        self.rolling: threading.Thread | None = None

    def inject(self, number: int, at_s: float) -> None:
        kind = FAULTS[number % len(FAULTS)]
        when: dict[str, Any] = {"at_s": round(at_s, 1), "fault": kind}
        try:  # the fault's own dict is logged, so that a rolling redeploy adds how it ended
            entry: dict[str, Any] = getattr(self, kind)()
            entry.update(when)
        except Exception as exc:  # a fault that could not be injected is reported
            entry = when | {"error": f"{type(exc).__name__}: {exc}"[:300]}
        self.log.append(entry)
        print(json.dumps(entry), flush=True)

    def kill_prefill_replica(self) -> dict[str, Any]:
        names = replica_actor_names(self.app.name, "Prefill")
        ray.kill(ray.get_actor(names[0], namespace="serve"), no_restart=True)
        return {"replicas": len(names)}

    def kill_decode_replica(self) -> dict[str, Any]:
        return {"ongoing": kill_busiest_decode(self.app.name)}

    def sigkill_decode_engine(self) -> dict[str, Any]:
        handle = self.app.handle("Decode")
        info = handle.process_info.remote().result(timeout_s=30)
        engines = [pid for pid in info["children"] if _is_engine_core(pid)]
        for pid in engines:
            os.kill(pid, signal.SIGKILL)
        return {"pids": engines}

    def redeploy(self) -> dict[str, Any]:
        """A changed config (the decode stream interval) rolls every replica; Serve's
        rollout runs on while the next faults come."""
        if self.rolling is not None and self.rolling.is_alive():
            return {"skipped": "the previous redeploy is still rolling"}
        from ray import serve

        from deployments.builder import build_app

        self.rolls += 1
        interval = {"decode": {"stream_interval_ms": 40 + self.rolls % 2}}
        args = merge(merge(config_args(self.args.config), self.overrides), interval)
        entry: dict[str, Any] = {"version": self.rolls}
        started = time.monotonic()

        def roll() -> None:
            try:
                serve.run(build_app(args), name=self.app.name, route_prefix="/")
                entry["rolled_in_s"] = round(time.monotonic() - started, 1)
            except Exception as exc:  # reported in the result, not lost in a thread
                entry["roll_error"] = f"{type(exc).__name__}: {exc}"[:600]
                print(json.dumps({"redeploy_failed": entry}), flush=True)
                # Serve calls an update failed when a replica of the new version dies
                # during it (the next fault), and rolls on towards it: how long until the
                # app runs whole again, looked for until shortly before the next redeploy.
                deadline = started + 3.5 * self.args.fault_every_s
                while time.monotonic() < deadline:
                    status = serve.status().applications.get(self.app.name)
                    if status is not None and status.status == "RUNNING":
                        entry["running_again_s"] = round(time.monotonic() - started, 1)
                        break
                    time.sleep(2)

        self.rolling = threading.Thread(target=roll, daemon=True)
        self.rolling.start()
        return entry


def _is_engine_core(pid: int) -> bool:
    try:
        process = psutil.Process(pid)
        return "EngineCore" in process.name() + " ".join(process.cmdline())
    except psutil.Error:
        return False
