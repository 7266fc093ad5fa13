"""Model ids that are markdown (issue 52, item 1), in a real browser: every page, given model
folders whose paths read as a markdown image and a markdown link, shows them as text (no
<img>, no <a> to the outside host, no request to it); the issue's own link, a path that climbs
back to a bundled model through names that are not there, is refused as text; the toolbar
offers visitors no "Deploy". On the class server (tests/e2e/conftest.py), whose model directory
holds those folders."""
from __future__ import annotations

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from engine.registry import ASSETS
from tests.e2e.helpers import BROWSER_MARKS, DRAW_MS, IMAGE_DIR, LINK_DIR, OUTSIDE, _goto, idle

pytestmark = BROWSER_MARKS

PAGES = ["", "grid", "layers", "attention", "predictions"]
SHOWS_A_PATH = """([a, b]) => {
    const t = document.querySelector('[data-testid="stMain"]').innerText.replaceAll('\\u2060', '');
    return t.includes(a) || t.includes(b); }"""
ASKED_AS_PAGE = ("img", "a", "iframe", "video", "audio", "source", "link")
# a page has drawn its models' output: a chart in view that plotly has drawn with data in it
# (the Polysemy page names its tabs after the models before any model runs)
CHART_DRAWN = """() => [...document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')]
    .some(e => e.offsetParent !== null && e.querySelector('.main-svg') && e._fullData
          && e._fullData.some(t => ['x', 'y', 'z'].some(k => t[k] && t[k].length > 0)))"""


def _outside(page, server: str) -> list[str]:
    asked: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(server) else asked.append(r.url))
    return asked


def _pointing_out(page) -> list[str]:
    """Every element of the document that fetches or links to the outside host."""
    found = []
    for tag in ASKED_AS_PAGE:
        for attr in ("src", "href"):
            sel = f'{tag}[{attr}*="{OUTSIDE}"]'
            found += [f"{tag} {attr}"] * page.locator(sel).count()
    return found


def _models_drawn(page, path: str) -> None:
    """Wait until the page shows its models' output: a path on the page as typed (the escapes
    are not shown), and a chart drawn; a page that draws neither fails, naming itself, where
    the absences looked for after it would hold on an empty page."""
    try:
        page.wait_for_function(SHOWS_A_PATH, arg=[IMAGE_DIR, LINK_DIR], timeout=DRAW_MS)
        page.wait_for_function(CHART_DRAWN, timeout=DRAW_MS)
        return
    except PlaywrightTimeout:
        text = page.locator('[data-testid="stMain"]').inner_text()
    pytest.fail(f"/{path} drew no model output in {DRAW_MS // 1000} s:\n{text[:500]}")


def test_model_paths_that_read_as_markdown_show_as_text_on_every_page(server, browser,
                                                                      hostile):
    """The image fetched itself on Predictions, Attention and Polysemy, and the link was live
    in the Attention page's Model radio; here both models load and every page names them."""
    _, gpt, bert = hostile
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    asked = _outside(page, server)
    for path in PAGES:
        _goto(page, server, path, preset="mouse", model_elmo="(none)", model_gpt=gpt,
              model_bert=bert)
        page.wait_for_selector('[data-testid="stMain"] h1')
        _models_drawn(page, path)           # absences are looked for once there is content
        idle(page, DRAW_MS)                  # every element of the page drawn, then looked at
        assert _pointing_out(page) == [], path
        assert asked == [], (path, asked)
    page.close()


def test_a_path_climbing_back_through_names_not_there_is_refused_as_text(server, browser):
    """The issue's link: the bundled BERT reached through a markdown link and three '..'."""
    climbing = f"{ASSETS}/models/bert-brown-mlm/[click here](http:/{OUTSIDE}/phish)/../../.."
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    asked = _outside(page, server)
    _goto(page, server, "attention", preset="mouse", model_elmo="(none)", model_gpt="(none)",
          model_bert=climbing)
    error = page.locator('[data-testid="stAlertContainer"]').filter(
        has_text="is not a model folder inside the configured model directories").first
    error.wait_for()
    idle(page)
    assert "[click here](http:" in error.inner_text().replace("\u2060", "")
    assert _pointing_out(page) == [] and asked == []
    page.close()


def test_the_toolbar_offers_visitors_no_deploy_button(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, server, "layers", preset="mouse", model_elmo="(none)", model_gpt="(none)",
          model_bert="(none)")
    page.wait_for_selector('[data-testid="stToolbar"]')
    idle(page)
    assert page.get_by_role("button", name="Deploy").count() == 0
    assert page.locator('[data-testid="stAppDeployButton"]').count() == 0
    page.close()
