"""``serve run`` with clean exits: ``python -m deployments.serve_run CONFIG [serve run options]``.

Ray Serve's ``serve run`` shuts down cleanly on Ctrl-C (SIGINT: it deletes the app,
whose replicas stop their engines, then stops Ray's local cluster). On SIGTERM it does
not: Ray's driver has a crash handler for SIGTERM that prints a stack dump and aborts
(exit -6), and the handler ``ray.init`` installs would skip Serve's shutdown anyway.

This wrapper runs ``serve run`` as a child in its own session and turns SIGTERM and
SIGINT (Ctrl-C, which the terminal sends only to this process) into one SIGINT for the
child: Serve's own clean shutdown. It exits with the child's status (0 when stopped so).
A second signal while stopping is ignored. ``make run`` uses it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from types import FrameType


def main(argv: list[str]) -> int:
    child = subprocess.Popen(
        [sys.executable, "-m", "ray.serve.scripts", "run", *argv],
        start_new_session=True,  # signals reach it only through this process
        # A shell's background job starts with SIGINT ignored, and a Python started so
        # would ignore it too: give the child the default, so SIGINT interrupts it.
        preexec_fn=_default_sigint,
    )
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping and child.poll() is None:
            stopping = True
            print(
                f"splitserve: {signal.Signals(signum).name}: stopping the app and its engines",
                file=sys.stderr,
                flush=True,
            )
            child.send_signal(signal.SIGINT)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    return child.wait()


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
