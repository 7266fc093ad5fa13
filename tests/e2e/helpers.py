"""What the browser tests share: `streamlit run` of the app on a free port, Playwright's waits
for a page as a reader sees it, and the inputs several pages are driven with. The fixtures
(the shared server, its corpus index, the browser) are in conftest.py."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import expect

ROOT = Path(__file__).resolve().parents[2]


CHROMIUM = "/usr/bin/chromium"


ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]


# The README's screenshots (the tests write them at SHOTS / name) go to assets/screenshots only
# under `make screenshots` (CTXLENS_SCREENSHOTS=1); in any other run to the session folder of
# tests/conftest.py, so that no test run changes a tracked file (tests/e2e/conftest.py checks
# each one written is a PNG).
SHOTS_ENV = "CTXLENS_SCREENSHOTS"


def shots_dir() -> Path:
    if os.environ.get(SHOTS_ENV) == "1":
        return ROOT / "assets" / "screenshots"
    folder = Path(os.environ.get("CTXLENS_TEST_SESSION", tempfile.gettempdir())) / "screenshots"
    folder.mkdir(exist_ok=True)
    return folder


SHOTS = shots_dir()


SENTENCES = ["A bat flew out of the cave.", "He swung the bat hard.", "The bat slept all day.",
             "She bought a new bat."]


# every wait for what a page shows: each server loads the models its pages draw before the
# first test (warm), so a missing element fails in a minute, not after a model's first load;
# CTXLENS_E2E_WAIT_MS changes it
WAIT_MS = int(os.environ.get("CTXLENS_E2E_WAIT_MS", 120_000))
expect.set_options(timeout=WAIT_MS)      # expect(locator).to_have_text(...) and the like
# the first draw of sentences no page has drawn on a page that computes much, the models
# loaded: the Predictions page fills the blank with every family and asks each for the next
# word (52 s for one sentence on a 2-core machine at load 10)
DRAW_MS = 3 * WAIT_MS
# the one long wait: a server's first load of the bundled models on a busy 2-core machine
WARM_MS = 900_000

# Counts the app's script runs as the browser receives them, in window.__stRuns, from before
# the page's own scripts run: every run starts with a ForwardMsg new_session (field 4) and
# ends with script_finished (field 6; status 2 is a run stopped for the next one). Each count
# moves after Streamlit has handled that message (a task later); `idle` also waits for the
# app to show the run's end (stApp's data-test-script-state). `lostAt`: since when the page
# has had no connection to the server (null while it has one).
RUNS = """(() => {
  const runs = window.__stRuns = {started: 0, ended: 0, running: false, lostAt: null};
  const fields = (bytes) => {       // the top-level fields of one protobuf message
    const found = new Map();
    let i = 0;
    const varint = () => {
      let value = 0, shift = 0, b;
      do { b = bytes[i++]; value += (b & 0x7f) * 2 ** shift; shift += 7; }
      while (b & 0x80 && i < bytes.length);
      return value;
    };
    while (i < bytes.length) {
      const tag = varint(), wire = tag % 8, field = Math.floor(tag / 8);
      if (wire === 0) found.set(field, varint());
      else if (wire === 2) { const n = varint(); i += n; found.set(field, null); }
      else if (wire === 1) i += 8;
      else if (wire === 5) i += 4;
      else break;
    }
    return found;
  };
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('open', () => { runs.lostAt = null; });
      this.addEventListener('close', () => { runs.lostAt = runs.lostAt ?? performance.now(); });
      this.addEventListener('message', (event) => {
        if (!(event.data instanceof ArrayBuffer)) return;
        const msg = fields(new Uint8Array(event.data));
        if (msg.has(4)) setTimeout(() => { runs.started += 1; runs.running = true; });
        if (msg.has(6) && msg.get(6) !== 2)
          setTimeout(() => { runs.ended += 1; runs.running = false; });
      });
    }
  };
})();"""

# the page has finished a run started after run number `n` (the app shows it: its status);
# a page whose server has been gone for 10 s (Streamlit reconnects within that) fails the wait
_RAN_SINCE = """(n) => { const r = window.__stRuns;
  if (r && r.lostAt !== null && performance.now() - r.lostAt > 10000)
    throw new Error('the page has had no connection to its server for 10 s: did it die?');
  const app = document.querySelector('[data-testid="stApp"]');
  return !!r && r.started > n && r.ended > 0 && !r.running && !!app
         && app.getAttribute('data-test-script-state') === 'notRunning'; }"""


# how often a page's wait_for_function checks its condition, in ms
POLL_MS = 100


class Browser:
    """The session's Chromium, whose every new page counts the app's runs (RUNS)."""

    def __init__(self, browser):
        self._browser = browser

    def new_page(self, **kwargs):
        page = self._browser.new_page(**kwargs)
        page.add_init_script(RUNS)
        # Playwright's own 30-s default for a wait given no timeout: too short on 2 busy cores
        # (five such waits timed out in a run beside other jobs)
        page.set_default_timeout(WAIT_MS)
        # page.wait_for_function polls every POLL_MS, not on every animation frame (its
        # default): a frame-by-frame poll makes Chromium draw 60 frames a second for as long as
        # a wait lasts, CPU that the servers computing what the test waits for do not get
        wait = page.wait_for_function
        page.wait_for_function = lambda expression, *, polling=POLL_MS, **kw: wait(
            expression, polling=polling, **kw)
        return page

    def __getattr__(self, name):
        return getattr(self._browser, name)


def runs_started(page) -> int:
    """How many script runs the page has started since it was loaded."""
    return page.evaluate("() => window.__stRuns.started")


def idle(page, timeout: int = WAIT_MS) -> None:
    """Wait until the page has run its script to the end and no run is going. Where a late
    rerun can come (a widget's value sent after it is drawn), wait for what it shows instead."""
    page.wait_for_function(_RAN_SINCE, arg=0, timeout=timeout)


@contextmanager
def rerun(page, timeout: int = WAIT_MS):
    """Around an action that reruns the app (a click, a key): waits, after it, until a run
    started after the action has ended and the app shows it (a missed click fails here)."""
    before = runs_started(page)
    yield
    page.wait_for_function(_RAN_SINCE, arg=before, timeout=timeout)

# every browser test module: slow, and skipped without the system Chromium
BROWSER_MARKS = [pytest.mark.slow,
                 pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} missing "
                                    "(make system-deps installs it)")]


# the shared server's terminal, kept for test_the_server_terminal_stays_quiet
SERVER_LOG = Path(tempfile.gettempdir()) / f"ctxlens-e2e-server-{os.getpid()}.log"


# the process behind each server URL this test process started (a test reads its CPU time)
SERVER_PIDS: dict[str, int] = {}


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system, every thread) process `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_idle(pid: int, busy_share: float = 0.2, within_s: float = 30.0) -> float:
    """Wait until process `pid` uses under `busy_share` of one core over a second; fails after
    `within_s` seconds of it busier. Returns the share it was last measured at."""
    deadline = time.monotonic() + within_s
    while True:
        before, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(1.0)
        share = (cpu_seconds(pid) - before) / (time.monotonic() - t0)
        if share < busy_share:
            return share
        if time.monotonic() > deadline:
            pytest.fail(f"the server still uses {share:.0%} of a core {within_s:.0f} s on")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# what Streamlit prints when its port was taken between _free_port and its start
PORT_TAKEN = ("is not available", "is already in use", "Address already in use")


def _log_path(log) -> tuple[object, Path]:
    """A log the server writes and this process can read back: `log` when it is a file (its
    name), else a temporary file in its place (subprocess.DEVNULL)."""
    name = getattr(log, "name", None)
    if isinstance(name, str) and Path(name).is_file():
        return log, Path(name)
    own = tempfile.NamedTemporaryFile("w", prefix="ctxlens-e2e-", suffix=".log", delete=False)
    return own, Path(own.name)


def _start(start: list[str], env: dict, log, path: Path, port: int,
           within_s: float = 120.0):
    """Start one server on `port` and wait for its health check -> (the process, None), or
    (None, the reason it is not serving: the port was taken). Fails at once with the server's
    last lines when the process dies for another reason, or is not healthy in `within_s`."""
    proc = subprocess.Popen(
        [*start, "--server.port", str(port)], cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **env},
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + within_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)
            return proc, None
        except OSError:
            time.sleep(0.2)                # until the health check answers or the process ends
    alive = proc.poll() is None
    if alive:
        proc.kill()
        proc.wait()
    tail = path.read_text(errors="replace")[-3000:]
    if not alive and any(m in tail for m in PORT_TAKEN):
        return None, tail
    why = (f"did not answer its health check in {within_s:.0f} s" if alive
           else f"exited with {proc.returncode}")
    pytest.fail(f"streamlit on port {port} {why}:\n{tail}", pytrace=False)


@contextmanager
def _streamlit(env: dict, log, prelude: str = "", tries: int = 5):
    """`streamlit run` of the app on a free port, as `make run` serves it (the repository's
    .streamlit/config.toml: headless, no file watcher); yields its URL once it is healthy.
    `prelude`: Python run in the server's process first (a test's stand-ins). A port taken by
    another process between choosing and binding it is chosen again (up to `tries` times); a
    server that dies otherwise fails the test at once, with its last lines."""
    run = ["streamlit", "run", str(ROOT / "streamlit_app.py")]
    start = ([sys.executable, "-c", f"{prelude}\nimport sys\nsys.argv = {run!r} + sys.argv[1:]\n"
              "from streamlit.web.cli import main\nmain()"] if prelude
             else [sys.executable, "-m", *run])
    given = log
    log, path = _log_path(log)
    for _ in range(tries):
        port = _free_port()
        proc, taken = _start(start, env, log, path, port)
        if proc:
            break
        log.seek(0)                        # the taken port's lines are not this server's
        log.truncate()
    else:
        pytest.fail(f"no free port for streamlit in {tries} tries:\n{taken}", pytrace=False)
    url = f"http://127.0.0.1:{port}"
    SERVER_PIDS[url] = proc.pid
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        if log is not given:
            log.close()
            path.unlink(missing_ok=True)


# sentences no encoding is stored for (a restarted server draws stored ones without loading
# the model), so a visit with them loads every model its page runs
FRESH = {"sentences": f"The warm bank {os.getpid()} opened late.\nWe sat on the warm bank "
                      f"{os.getpid()} of the river.", "target": "bank"}
# what the shared server draws before the first test: the Polysemy page on fresh sentences
# (the three families' default encoders: elmo-brown, smollm2-135m, minilm-l6), then the
# default preset most tests open on it, the Attention page (SmolLM2's maps) and the
# Predictions page (minilm-l6-mlm's blanks, each family's next word: no store holds those)
WARM_VISITS = (("", FRESH), ("", {}), ("attention", {}), ("predictions", {}))
# the pages run minilm-l6 alone (quick to load)
ONE_MODEL = {"model_elmo": "(none)", "model_gpt": "(none)", "model_bert": "minilm-l6"}
# the components page's own patching example (SmolLM2)
PATCHING = {"parts_model": "smollm2-135m", "parts_view": "Activation patching"}
# an address no page may ask for: a closed port on this machine (a request is recorded, and
# refused at once, whatever the network)
OUTSIDE = "127.0.0.1:9"
# the class server's model folders, whose paths read as markdown (a path cannot hold '//', and
# a browser takes 'http:/h/p' for 'http://h/p')
IMAGE_DIR = f"![x](http:/{OUTSIDE}/p.png)"
LINK_DIR = f"[click here](http:/{OUTSIDE}/phish)"


def warm(browser, url: str, visits=WARM_VISITS) -> None:
    """Open each page of `visits` ((path, link parameters)) once and wait for its run to end,
    so that the server has loaded the models those pages draw before a test waits on them:
    the one long wait (WARM_MS), here; a page that shows an error box fails here."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        for path, params in visits:
            _goto(page, url, path, **params)
            idle(page, WARM_MS)
            errors = page.locator('[data-testid="stException"]')
            assert not errors.count(), f"/{path}: {errors.first.inner_text()[:300]}"
    finally:
        page.close()


@contextmanager
def app_server(tmp_path_factory, log, env: dict | None = None, index_dirs: Path | None = None):
    """`streamlit run` of the app whose own index folder is a fresh one, not
    ~/.cache/ctxlens/indexes (a Brown index built there by `make index` would change what the
    Corpus page offers); `index_dirs`: CTXLENS_INDEX_DIRS (default: a folder with no index)."""
    own = tmp_path_factory.mktemp("app-indexes")
    prelude = f"from pathlib import Path\nfrom engine.corpus import catalog\n" \
              f"catalog.DEFAULT_DIR = Path({str(own)!r})"
    with _streamlit({"CTXLENS_INDEX_DIRS": str(index_dirs or own / "none"), **(env or {})},
                    log, prelude) as url:
        yield url


def _first_chart(page) -> None:
    """Wait for the first chart the user sees: the Polysemy page opens on the tab where the
    senses separate best, and the other tabs' charts are drawn hidden, so the first chart in
    the document can be one that never becomes visible."""
    page.wait_for_selector(".js-plotly-plot:visible", timeout=WAIT_MS)


def _type_inputs(page, sentences=SENTENCES, word: str = "bat"):
    """Type the sentences and the target word as a user does, each sent with its key, and wait
    for the run each starts (a word already in the box starts none); returns the sentence
    box."""
    box = page.get_by_role("textbox", name="Sentences, one per line", exact=True)
    box.fill("\n".join(sentences))
    with rerun(page):
        box.press("Control+Enter")
    target = page.get_by_role("textbox", name="Target word", exact=True)
    if target.input_value() == word:
        return box
    target.fill(word)
    with rerun(page):
        target.press("Enter")
    return box


def _download(page, expander: str, fmt: str, tmp_path: Path) -> bytes:
    details = page.locator("details").filter(has_text=expander, visible=True).first
    if details.get_attribute("open") is None:
        details.locator("summary").click()
    button = details.get_by_role("button", name=fmt, exact=True)
    with page.expect_download(timeout=120_000) as info:
        button.click()
    path = tmp_path / f"download.{fmt.lower()}"
    info.value.save_as(path)
    return path.read_bytes()


# the index of the first chart with `n` clickable markers (-1 while there is none)
_CHART_WITH = """(n) => [...document.querySelectorAll('.js-plotly-plot')].findIndex(p =>
    p.querySelectorAll('.scatterlayer .trace .points path').length === n)"""


def _open_from_model_view(page) -> None:
    """Click the thumbnail of layer 3, head 2 (smollm2-135m: 30 layers x 9 heads): the layer
    slider comes to 3, and the Model view stays the tab in front."""
    tab = page.get_by_role("tab", name="Model view")
    tab.click()
    page.wait_for_function(f"() => ({_CHART_WITH})({30 * 9}) >= 0")
    grid = page.locator(".js-plotly-plot").nth(page.evaluate(_CHART_WITH, 30 * 9))
    with rerun(page):
        grid.locator(".scatterlayer .trace .points path").nth(2 * 9 + 2).click(force=True)
    expect(page.get_by_role("slider", name="Layer").first).to_have_value("3")
    expect(tab).to_have_attribute("aria-selected", "true")


def _goto(page, server: str, path: str = "", **params) -> None:
    from urllib.parse import urlencode

    page.goto(f"{server}/{path}" + (f"?{urlencode(params)}" if params else ""))


BANK = ["We sat on the bank of the river.", "The river bank was muddy.",
        "She put her money in the bank.", "The bank lent him money.",
        "He works at a bank downtown."]


def _differs_when_swapped(page, locator, old: str, new: str) -> bool:
    """Screenshot a chart's text element, swap one character for another in place, screenshot
    again: with a font for both they draw differently; with none, both are the same box."""
    element = locator.element_handle()     # a handle: the locator's text match changes below
    before = element.screenshot()
    element.evaluate("(el, [a, b]) => { el.textContent = el.textContent.replace(a, b); }",
                     [old, new])
    after = element.screenshot()           # a screenshot draws a new frame of the page
    element.evaluate("(el, [a, b]) => { el.textContent = el.textContent.replace(b, a); }",
                     [old, new])
    return before != after


# the default page has settled when its last chart, sense separation under the tabs, is drawn
SETTLED = ".st-key-sep-silhouette .js-plotly-plot"


# records, from before the page's own scripts run, whether a model-loading box ever showed
SEE_LOADING = """new MutationObserver(() => {
    if ((document.body && document.body.innerText || '').includes('Loading and running'))
        window.__sawLoading = true;
}).observe(document, {subtree: true, childList: true, characterData: true});"""


def _open_sense_editor(page):
    """Open the sense-label table; returns it once its grid is there (the data grid's
    accessible table: role grid, a row per sentence, a gridcell per column)."""
    page.get_by_text("Sense labels (edit, or let clustering suggest them)").click()
    editor = page.locator('[data-testid="stDataFrame"]').first
    editor.scroll_into_view_if_needed()
    expect(editor.locator('td[role="gridcell"]').first).to_be_attached()
    return editor


def sense_cell(editor, row: int):
    """The sense cell of sentence `row` (from 0) in the table's grid: the header row is
    aria-rowindex 1, and the sense column, the one to edit, comes first."""
    return editor.locator(f'tr[role="row"][aria-rowindex="{row + 2}"] '
                          'td[role="gridcell"][aria-colindex="1"]')


ELLIPSIZED = """() => Array.from(document.querySelectorAll('[data-testid="stMain"] label *'))
  .filter(e => e.offsetParent && e.textContent.trim() && e.scrollWidth > e.clientWidth + 1
               && getComputedStyle(e).textOverflow === 'ellipsis')
  .map(e => e.textContent.trim())"""
