"""How `make run` serves the app: this machine only unless asked, no usage statistics, and no
lookup of the machine's external IP at start (Issue 47, item 7)."""
from __future__ import annotations

import os
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


def _listening_addresses(port: int) -> set:
    """The addresses this machine's sockets listen on at `port` (IPv4 and IPv6), from the
    kernel's socket tables: which interfaces a server took, whatever routes the host has."""
    import ipaddress
    import sys

    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            address, hex_port = fields[1].split(":")
            if fields[3] != "0A" or int(hex_port, 16) != port:     # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            if sys.byteorder == "little":    # printed as 32-bit words in the host's order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.ip_address(raw)
            found.add(getattr(ip, "ipv4_mapped", None) or ip)      # ::ffff:127.0.0.1 as IPv4
    return found


@pytest.mark.slow
def test_the_server_is_closed_to_the_network_and_never_asks_for_its_external_ip():
    """As `make run` starts it, and again opened to the network: by default the server's
    listening sockets are on loopback addresses only, opened they take every interface, and
    neither start contacts checkip.amazonaws.com (streamlit.net_util.get_external_ip, replaced
    here by a stand-in that leaves a mark)."""
    from urllib.parse import urlparse

    from tests.e2e.helpers import _streamlit

    if not Path("/proc/net/tcp").is_file():
        pytest.skip("no /proc/net/tcp: the kernel's socket table is read on Linux only")
    folder = Path(tempfile.mkdtemp())
    mark, log_path = folder / "external-ip-asked", folder / "server.log"
    prelude = ("from streamlit import net_util\n"
               f"net_util.get_external_ip = lambda: open({str(mark)!r}, 'w').close()")
    for env in ({}, {"STREAMLIT_SERVER_ADDRESS": "0.0.0.0"}):
        with open(log_path, "w") as log, _streamlit(env, log, prelude) as url:
            listening = _listening_addresses(urlparse(url).port)
            assert listening, "no listening socket found for the server's port"
            if env:
                assert any(a.is_unspecified for a in listening), listening
            else:
                assert all(a.is_loopback for a in listening), listening
            # the lookup would come just before the start's address banner is printed
            # (streamlit.web.bootstrap._print_url): wait for the banner, then look for the mark
            deadline = time.monotonic() + 60
            while "URL: " not in log_path.read_text(errors="replace"):
                assert time.monotonic() < deadline, \
                    f"no address banner in 60 s:\n{log_path.read_text(errors='replace')[-2000:]}"
                time.sleep(0.1)
        assert not mark.exists(), f"the external IP was looked up ({env or 'default'})"
        log_path.unlink()
    os.rmdir(folder)
