"""How `make run` serves the app: this machine only unless asked, no usage statistics, and no
lookup of the machine's external IP at start (Issue 47, item 7)."""
from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run_line(*make_args: str) -> str:
    out = subprocess.run(["make", "-n", "run", *make_args], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return next(line for line in out.splitlines() if "streamlit run" in line)


def test_the_app_listens_on_this_machine_and_sends_no_usage_statistics():
    with open(ROOT / ".streamlit" / "config.toml", "rb") as f:
        config = tomllib.load(f)
    assert config["server"]["address"] == "localhost"
    assert config["browser"]["gatherUsageStats"] is False
    # set by hand, the printed address stops Streamlit asking an outside server for the
    # machine's external IP when it listens on every interface
    assert config["browser"]["serverAddress"] == "localhost"


def test_make_run_listens_on_localhost_unless_given_a_host():
    assert "--server.address localhost " in _run_line()
    assert "--server.address 0.0.0.0 " in _run_line("HOST=0.0.0.0")


def _internal_ip() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))      # no packet is sent: it picks a route
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


@pytest.mark.slow
def test_the_server_is_closed_to_the_network_and_never_asks_for_its_external_ip():
    """As `make run` starts it, and again opened to the network: the server is not reachable on
    the machine's network address by default, and neither start contacts checkip.amazonaws.com
    (streamlit.net_util.get_external_ip, replaced here by a stand-in that leaves a mark)."""
    from urllib.parse import urlparse

    from tests.e2e.helpers import _streamlit

    mark = Path(tempfile.mkdtemp()) / "external-ip-asked"
    prelude = ("from streamlit import net_util\n"
               f"net_util.get_external_ip = lambda: open({str(mark)!r}, 'w').close()")
    ip = _internal_ip()
    for env in ({}, {"STREAMLIT_SERVER_ADDRESS": "0.0.0.0"}):
        with _streamlit(env, subprocess.DEVNULL, prelude) as url:
            port = urlparse(url).port
            if ip and not env:
                with pytest.raises(OSError):
                    socket.create_connection((ip, port), timeout=2).close()
            # the start's address banner comes right after the server is up
            time.sleep(2)
        assert not mark.exists(), f"the external IP was looked up ({env or 'default'})"
    os.rmdir(mark.parent)
