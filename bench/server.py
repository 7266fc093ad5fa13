"""One `streamlit run` of the app for the browser-driven benchmarks (speed, soak): offline,
on a free port, stopped however the caller's block ends."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def streamlit_server(output=subprocess.DEVNULL, stop_timeout: float = 20,
                     env: dict[str, str] | None = None, script: Path | None = None):
    """Yields (url, process); `output` takes the server's stdout and stderr; `env` is added
    to this process's environment for the server; `script` instead of the app (run from the
    repository, so with its .streamlit settings)."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(script or ROOT / "streamlit_app.py"),
         "--server.port", str(port), "--server.headless", "true",
         "--browser.gatherUsageStats", "false"], cwd=ROOT, env=env, stdout=output,
        stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=stop_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
