"""``serve run`` with clean exits: ``python -m deployments.serve_run CONFIG [serve run options]``.

Ray Serve's ``serve run`` shuts down cleanly on Ctrl-C (KeyboardInterrupt), but on
SIGTERM the handler ``ray.init`` installs raises ``SystemExit(15)`` past Serve's own
shutdown: the process exits 15 with a traceback, and tears the cluster down from
``atexit`` while replicas still run. This wrapper runs the same command and turns both
signals into Serve's shutdown path: the app is deleted, the replicas stop their engines,
Ray's local cluster stops, and the process exits 0. ``make run`` uses it.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType


class _Stop(Exception):
    """A stop signal arrived."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def main(argv: list[str]) -> int:
    from ray.serve.scripts import cli

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        cli.main(["run", *argv], prog_name="serve", standalone_mode=False)
    except (_Stop, KeyboardInterrupt):
        pass
    except SystemExit as exc:
        # ray.init replaced our SIGTERM handler with sys.exit(signum).
        if exc.code not in (signal.SIGTERM, signal.SIGINT, 0, None):
            raise
    return _shutdown()


def _shutdown() -> int:
    # Ignore further signals while stopping: a second Ctrl-C must not leave it half done.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import ray
    from ray import serve

    if ray.is_initialized():
        print("splitserve: stopping the app and its engines ...", file=sys.stderr)
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
