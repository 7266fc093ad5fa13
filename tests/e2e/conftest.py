"""The browser tests' fixtures: one Chromium and one `streamlit run` of the app for every
browser test module (a server loads the bundled models once, the longest wait of these tests);
a module that needs a server set up otherwise starts its own with helpers._streamlit."""
from __future__ import annotations

import time

import pytest

from tests.e2e.helpers import ARGS, CHROMIUM, SERVER_LOG, SHOTS, Browser, app_server, warm


@pytest.fixture(autouse=True)
def screenshots_taken_are_pngs():
    """Each screenshot a test writes at SHOTS / name (helpers.shots_dir) is a PNG of a page."""
    started = time.time()
    yield
    for shot in SHOTS.glob("*.png"):
        if shot.stat().st_mtime >= started:
            png = shot.read_bytes()
            assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000, shot


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory):
    """A small corpus index of the bundled minilm-l6 for the Corpus page."""
    from engine.corpus.index import build
    from tests.engine.corpus.test_done_when import MONEY, RIVER

    root = tmp_path_factory.mktemp("indexes")
    src = root / "bank.txt"
    src.write_text("\n".join(RIVER + MONEY))
    build("minilm-l6", str(src), root / "banks", layers="0,4,6", progress=False)
    return root


@pytest.fixture(scope="session")
def session_server(index_dir, tmp_path_factory, browser):
    # the terminal output is kept for test_the_server_terminal_stays_quiet
    with open(SERVER_LOG, "w") as log, app_server(tmp_path_factory, log,
                                                  index_dirs=index_dir) as url:
        warm(browser, url)       # the models loaded before the first test: its waits are short
        yield url


@pytest.fixture(scope="session")
def server(session_server):
    """The shared server (a module with a server of its own names that one `server`, and can
    still ask for this one as session_server)."""
    return session_server


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield Browser(b)             # its pages count the app's runs (helpers.rerun, idle)
        b.close()
