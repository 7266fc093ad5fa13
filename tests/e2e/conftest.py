"""The browser tests' fixtures: one Chromium, and two shared `streamlit run`s of the app that the
modules' `server` names: a personal one (as `make run` serves it: builds allowed) and a class one
(CTXLENS_READ_ONLY=1, as a teacher serves a class, with model folders of its own whose paths read
as markdown). Each loads its models once before its first test (the longest wait of these
tests); tests/conftest.py puts each server's modules in one pytest-xdist group, so the two
servers' tests run side by side. A module that needs a server set up otherwise starts its own
with helpers._streamlit."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from engine.registry import ASSETS
from tests.conftest import CLASS_SERVER_FILES, ROOT
from tests.e2e.helpers import (ARGS, CHROMIUM, FRESH, IMAGE_DIR, LINK_DIR, ONE_MODEL, PATCHING,
                               SERVER_LOG, SHOTS, WARM_VISITS, Browser, app_server, warm)


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
def hostile(tmp_path_factory):
    """The class server's model directory: the bundled GPT and BERT under paths that read as a
    markdown image and a markdown link -> (the directory, the GPT's path, the BERT's path)."""
    root = tmp_path_factory.mktemp("hostile-models")
    gpt, bert = root / "g" / IMAGE_DIR, root / "b" / LINK_DIR
    shutil.copytree(ASSETS / "models" / "gpt-brown", gpt)
    shutil.copytree(ASSETS / "models" / "bert-brown-mlm", bert)
    return root, str(gpt), str(bert)


@pytest.fixture(scope="session")
def class_server(index_dir, hostile, tmp_path_factory, browser):
    """The app as a shared class server runs it (CTXLENS_READ_ONLY=1), its model directory the
    hostile paths; before the first test it draws the default pages, minilm-l6 alone, the
    components page's patching example (SmolLM2) and both hostile models."""
    root, gpt, bert = hostile
    log = Path(tempfile.gettempdir()) / f"ctxlens-e2e-class-server-{os.getpid()}.log"
    hostile_models = {"preset": "mouse", "model_elmo": "(none)", "model_gpt": gpt,
                      "model_bert": bert}
    with open(log, "w") as out, app_server(tmp_path_factory, out, index_dirs=index_dir,
                                           env={"CTXLENS_READ_ONLY": "1",
                                                "CTXLENS_MODEL_DIRS": str(root)}) as url:
        warm(browser, url, [*WARM_VISITS, ("", {**FRESH, **ONE_MODEL}),
                            ("", {"preset": "mouse", **ONE_MODEL}), ("components", PATCHING),
                            ("", hostile_models), ("predictions", hostile_models)])
        yield url


@pytest.fixture(scope="module")
def server(request):
    """The shared server of the module's group: the class server for CLASS_SERVER_FILES, the
    personal one for the rest (a module with a server of its own names that one `server`)."""
    path = Path(request.module.__file__).resolve().relative_to(ROOT).as_posix()
    return request.getfixturevalue("class_server" if path in CLASS_SERVER_FILES
                                   else "session_server")


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield Browser(b)             # its pages count the app's runs (helpers.rerun, idle)
        b.close()
