"""Shared test fixtures: the ../shared folder (skipped with a reason when absent), offline mode,
the session folder that every cache, config and temporary file of a run goes to, and the tiny
checkpoints' zoo in it."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# CTXLENS_SHARED: a copy elsewhere (a lent GPU machine receives only the checkout)
SHARED = Path(os.environ.get("CTXLENS_SHARED", ROOT.parent / "shared")).resolve()

# Nothing in the suite may reach a network: hub lookups fail fast instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# One compute thread for each process of the run (set before torch is imported; the xdist
# workers, the app servers and the CLI runs inherit it): two workers, two servers and a
# browser share two cores, and a second torch (OpenMP, numba) thread a process costs more
# than it gains there (make test: 973 s and 20.3 CPU-min with 2 threads, 790 s and 15.4
# CPU-min with 1, the same session and tree). One set already (OMP_NUM_THREADS=2) is kept.
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

# The suite leaves the machine as it found it (issue 60, item 4): ctxlens's cache, its user
# registry, the Hugging Face cache, the config folder (Chromium's profile), every temporary file
# (tempfile, TMPDIR: server logs, Playwright, Ray, torch.compile) and pytest's own basetemp live
# in one session folder under the system temp dir, set here, before any engine module reads
# them (engine.corpus.catalog reads CTXLENS_CACHE at import). The servers and CLI processes the
# tests start, and pytest-xdist's workers, inherit it from os.environ; a worker (or a pytest run
# by a test) finds SESSION_ENV set and uses that folder. Removed after a green run by the
# process that made it; a red run keeps it and says where (pytest_terminal_summary).
SESSION_ENV = "CTXLENS_TEST_SESSION"
SESSION_OWNER = SESSION_ENV not in os.environ
# the user's own cache, read before it is pointed elsewhere: its converted GGUF models seed the
# session's cache
USER_CACHE = Path(os.environ.get("CTXLENS_CACHE", Path.home() / ".cache" / "ctxlens")).expanduser()


def _seed_converted(source: Path, cache: Path) -> None:
    """The bundled SmolLM2's GGUF converted once (about 30 s, 517 MB) is reused from the user's
    cache: each complete folder hard-linked file by file (a copy across file systems). The
    product never writes into a published folder (engine.folders.publish writes a new one and
    renames it), so the user's files are only read; removing the session unlinks the links."""
    for done in sorted(source.glob("converted/*/*/config.json")):
        src = done.parent
        dst = cache / src.relative_to(source)
        try:
            shutil.copytree(src, dst, copy_function=os.link)
        except OSError:
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst, dirs_exist_ok=True)
    digests = source / "file-digests.json"          # the GGUF's content hash, not hashed again
    if digests.is_file():
        shutil.copy2(digests, cache / digests.name)


if SESSION_OWNER:
    os.environ[SESSION_ENV] = tempfile.mkdtemp(prefix="ctxlens-tests-")
    os.environ.pop("HF_HUB_CACHE", None)                 # it would win over HF_HOME
SESSION = Path(os.environ[SESSION_ENV])
# the owner sets each; a process started inside the session keeps what it was given (a test's
# own CTXLENS_CACHE), and takes the session's where it was given only SESSION_ENV
for var, sub in (("CTXLENS_CACHE", "cache"), ("HF_HOME", "hf"), ("XDG_CONFIG_HOME", "config"),
                 ("TMPDIR", "t"), ("PYTEST_DEBUG_TEMPROOT", ""),
                 ("CTXLENS_REGISTRY", "config/ctxlens/models.toml")):
    if SESSION_OWNER or var not in os.environ:
        os.environ[var] = str(SESSION / sub)
        if var != "CTXLENS_REGISTRY":
            (SESSION / sub).mkdir(parents=True, exist_ok=True)
if SESSION_OWNER:
    _seed_converted(USER_CACHE, SESSION / "cache")
# what a test passes to a process it starts with an environment of its own
SESSION_VARS = (SESSION_ENV, "CTXLENS_CACHE", "CTXLENS_REGISTRY", "HF_HOME", "XDG_CONFIG_HOME",
                "TMPDIR")
tempfile.tempdir = None          # read TMPDIR again: this process's temporary files go there too


# The app's cached functions, called by unit tests outside a Streamlit runtime, each log "No
# runtime found, using MemoryCacheStorageManager": the memory store is what such a test wants, and
# the line is noise in the suite's output (the servers the tests start keep their own logging)
def _quiet_streamlit_outside_a_runtime() -> None:
    import logging

    from streamlit.logger import get_logger

    get_logger("streamlit.runtime.caching.cache_data_api").setLevel(logging.ERROR)


_quiet_streamlit_outside_a_runtime()


# CTXLENS_REQUIRE_SHARED=1: a missing ../shared fails the tests that need it instead of
# skipping them (for a machine that must run them)
REQUIRE_SHARED_ENV = "CTXLENS_REQUIRE_SHARED"


def _missing(what: Path, holds: str) -> None:
    why = (f"NOT RUN: {what} is absent ({holds}); put the project's shared folder beside the "
           f"checkout or name a copy with CTXLENS_SHARED; {REQUIRE_SHARED_ENV}=1 fails instead")
    if os.environ.get(REQUIRE_SHARED_ENV) == "1":
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        _missing(SHARED, "it holds the reference fixtures")
    return SHARED


@pytest.fixture(scope="session")
def elmo_fixture_dir(shared_dir: Path) -> Path:
    d = shared_dir / "fixtures" / "elmo-reference"
    if not d.is_dir():
        _missing(d, "AllenNLP's ELMo outputs that ctxlens's ELMo is checked against")
    return d


@pytest.fixture(scope="session")
def zoo():
    """The tiny checkpoints of tests/zoo.py, each built once a session into SESSION/zoo and
    shared with pytest-xdist's other workers."""
    from tests.zoo import Zoo       # here, not at the top: it imports torch

    return Zoo(SESSION / "zoo")


@pytest.fixture
def model_dir(tmp_path, monkeypatch) -> Path:
    """A configured model directory (CTXLENS_MODEL_DIRS) for checkpoints built by a test."""
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(tmp_path))
    return tmp_path


# `make test` runs the suite on two workers (pytest-xdist, --dist loadgroup). Each test file
# stays on one worker, so a module's loaded models serve all of its tests. The browser tests go
# in two groups, one for each of tests/e2e/conftest.py's two shared servers (a personal one and
# a class one, read-only with model folders of its own): each group is one `streamlit run` and
# one Chromium on whichever worker takes it, so the two can run side by side.
BROWSER_FILES = ("tests/e2e/", "tests/test_serving.py")
# the browser test files that run against the class server (tests/e2e/conftest.py's `server`)
CLASS_SERVER_FILES = tuple(f"tests/e2e/test_{name}.py" for name in (
    "hardening", "hostile_ids", "attention", "clusters", "grid", "explain", "knockout"))


def pytest_itemcollected(item):
    # as each test is collected: xdist reads the groups in its own collection_modifyitems
    path = item.nodeid.split("::")[0]
    group = ("browser-class" if path in CLASS_SERVER_FILES
             else "browser" if path.startswith(BROWSER_FILES)
             else path.removeprefix("tests/").removesuffix(".py"))
    item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    # trylast: after pytest-xdist has stopped its workers and pytest has closed its basetemp
    if SESSION_OWNER and exitstatus == 0:
        shutil.rmtree(SESSION, ignore_errors=True)


def pytest_terminal_summary(terminalreporter, exitstatus):
    if SESSION_OWNER and SESSION.exists():
        terminalreporter.write_line(f"ctxlens: this run's caches, logs and tmp_path folders are "
                                    f"kept in {SESSION} (removed after a green run)")
