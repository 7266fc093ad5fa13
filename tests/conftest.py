"""Shared test fixtures: the ../shared folder (skipped with a reason when absent) and offline mode."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# CTXLENS_SHARED: a copy elsewhere (a lent GPU machine receives only the checkout)
SHARED = Path(os.environ.get("CTXLENS_SHARED", ROOT.parent / "shared")).resolve()

# Nothing in the suite may reach a network: hub lookups fail fast instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent (it holds the reference fixtures)")
    return SHARED


@pytest.fixture(scope="session")
def elmo_fixture_dir(shared_dir: Path) -> Path:
    d = shared_dir / "fixtures" / "elmo-reference"
    if not d.is_dir():
        pytest.skip(f"{d} is absent")
    return d


@pytest.fixture
def model_dir(tmp_path, monkeypatch) -> Path:
    """A configured model directory (CTXLENS_MODEL_DIRS) for checkpoints built by a test."""
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(tmp_path))
    return tmp_path


# `make test` runs the suite on two workers (pytest-xdist, --dist loadgroup). Each test file
# stays on one worker, so a module's loaded models serve all of its tests; the browser tests
# all go to one, where one `streamlit run` and one Chromium serve every page's tests (a server
# per worker would load the bundled models twice on the 2 cores they share).
BROWSER_FILES = ("tests/e2e/", "tests/test_serving.py")


def pytest_itemcollected(item):
    # as each test is collected: xdist reads the groups in its own collection_modifyitems
    path = item.nodeid.split("::")[0]
    item.add_marker(pytest.mark.xdist_group(
        "browser" if path.startswith(BROWSER_FILES)
        else path.removeprefix("tests/").removesuffix(".py")))
