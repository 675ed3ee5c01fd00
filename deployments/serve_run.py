"""``serve run`` with clean exits: ``python -m deployments.serve_run CONFIG [serve run options]``.

Ray Serve's ``serve run`` shuts down cleanly on Ctrl-C (SIGINT: it deletes the app,
whose replicas stop their engines, then stops Ray's local cluster). On SIGTERM it does
not: Ray's driver has a crash handler for SIGTERM that prints a stack dump and aborts
(exit -6), and the handler ``ray.init`` installs would skip Serve's shutdown anyway.

This wrapper runs ``serve run`` as a child in its own session and turns SIGTERM and
SIGINT (Ctrl-C, which the terminal sends only to this process) into one SIGINT for the
child: Serve's own clean shutdown. It exits with the child's status (0 when stopped so).
A second signal while stopping is ignored. ``make run`` uses it.

Before it starts anything it checks what the ingress would refuse at its start, so the
error comes at once and alone instead of after Ray's start, in a replica's traceback: a
config that serves the API on an address other hosts reach with no API key
(``IngressConfig.check_exposure``); an invalid config. It exits 2 naming what is wrong.

It also prints when the app is ready: the moment its ``/health`` first answers 200,
which the ingress does only once every pool has a warm replica serving
(:mod:`app.api.readiness`), so a client may start then.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Any


def main(argv: list[str]) -> int:
    if argv and Path(argv[0]).is_file():
        problem = preflight(argv[0])
        if problem is not None:
            print(f"splitserve: {argv[0]}: {problem}", file=sys.stderr, flush=True)
            return 2
    child = subprocess.Popen(
        [sys.executable, "-m", "ray.serve.scripts", "run", *argv],
        start_new_session=True,  # signals reach it only through this process
        # A shell's background job starts with SIGINT ignored, and a Python started so
        # would ignore it too: give the child the default, so SIGINT interrupts it.
        preexec_fn=_default_sigint,
    )
    stopping = False
    if argv and Path(argv[0]).is_file():
        urls = _health_urls(argv[0])
        threading.Thread(target=_announce_ready, args=(urls, child), daemon=True).start()

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


def preflight(config: str) -> str | None:
    """What in the Serve config file ``config`` would keep the app from starting, or None.

    Only splitserve's own config files are read (one application, its builder): for
    another file, None, and Serve judges it."""
    import yaml
    from pydantic import ValidationError

    from app.config import AppConfig, serve_file_args

    try:
        args = serve_file_args(config)
    except (ValueError, OSError, yaml.YAMLError):
        return None  # not one of ours: Serve reads it
    try:
        ingress = AppConfig.model_validate(args).ingress
        ingress.check_exposure(_http_host(_http_options(config)), ingress.keys())
    except (ValidationError, ValueError) as exc:
        return str(exc)
    return None


def _http_options(config: str) -> dict[str, Any]:
    """The Serve config file's ``http_options`` ({} when it has none)."""
    import yaml

    with open(config) as f:
        options: dict[str, Any] = (yaml.safe_load(f) or {}).get("http_options") or {}
    return options


def _http_host(options: dict[str, Any]) -> str:
    """The address Serve's HTTP servers bind: the file's, else Serve's default."""
    return str(options.get("host") or "127.0.0.1")


def _health_urls(config: str) -> list[str]:
    """Where the app's ``/health`` answers: Serve's proxy (the file's ``http_options``) and
    the ingress's own port when Serve's direct ingress is on (``make run``)."""
    options = _http_options(config)
    host = _http_host(options)
    host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    urls = [f"http://{host}:{int(options.get('port') or 8000)}"]
    if os.environ.get("RAY_SERVE_ENABLE_DIRECT_INGRESS") == "1":
        direct = os.environ.get("RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT", "8100")
        urls.insert(0, f"http://{host}:{direct}")
    return urls


def _announce_ready(urls: list[str], child: subprocess.Popen[bytes]) -> None:
    """Print once ``/health`` first answers 200 on every URL."""
    started = time.monotonic()
    pending = list(urls)
    while pending and child.poll() is None:
        try:
            with urllib.request.urlopen(f"{pending[0]}/health", timeout=2) as answer:
                if answer.status == 200:
                    pending.pop(0)
                    continue
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    if not pending:
        print(
            f"splitserve: ready after {time.monotonic() - started:.0f} s, every pool warm: "
            f"the OpenAI API answers at {' and '.join(urls)} (/v1)",
            file=sys.stderr,
            flush=True,
        )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
