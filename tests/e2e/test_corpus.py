"""The Corpus page (app/pages/corpus.py) in a real browser, and the Polysemy page's way into it."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.e2e.helpers import BROWSER_MARKS, SETTLED, SHOTS, _streamlit, idle, rerun, warm

pytestmark = BROWSER_MARKS


def _corpus_map(browser, url: str, settled: str, chart: str, height: int):
    """The Corpus page at `url`, once the text `settled` (a /regex/) shows: the page and the
    chart whose text holds `chart`."""
    page = browser.new_page(viewport={"width": 1500, "height": height})
    page.goto(url)
    page.wait_for_selector(f"text={settled} >> visible=true")
    idle(page)
    return page, page.locator(".js-plotly-plot").filter(has_text=chart).first


def test_corpus_page_maps_a_word_and_finds_nearest_contexts(server, browser):
    """Corpus: the indexed word is mapped, a click opens its nearest contexts in the corpus,
    and a typed sentence is searched."""
    page, plot = _corpus_map(browser, f"{server}/corpus?corpus_word=bank&corpus_layer=6",
                             "/'bank' in .*24 of 24 occurrences/", "occurrences", 1100)
    points = plot.locator(".scatterlayer .trace .points path")
    assert points.count() == 24
    with rerun(page):
        points.nth(0).click(force=True)
    page.wait_for_selector("text=/Nearest contexts at/ >> visible=true")
    box = page.locator(".st-key-corpus_query_text input")
    box.fill("He sat on the bank of the river .")
    with rerun(page):
        box.press("Enter")
    word = page.locator(".st-key-corpus_query_word input")
    word.fill("bank")
    with rerun(page):
        word.press("Enter")
    page.wait_for_url(re.compile(r"corpus_query_word=bank"))
    page.wait_for_function("() => document.querySelectorAll('[data-testid=\"stDataFrame\"]')"
                           ".length >= 2")
    assert not page.locator('[data-testid="stException"]').count()
    assert not page.locator('[data-testid="stAlert"]').filter(has_text="error").count()
    page.screenshot(path=str(SHOTS / "corpus.png"), full_page=True)


def test_corpus_page_offers_brown_for_another_model_beside_an_index(server, browser):
    """With an index open, a toggle opens the Brown build form: model, layers (every one of
    minilm-l6's seven by default), the size on disk, and the build button."""
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/corpus?corpus_word=bank&corpus_layer=6")
    page.wait_for_selector("text=/'bank' in .*24 of 24 occurrences/ >> visible=true")
    page.get_by_text("Build a Brown index for another model or other layers").click()
    page.wait_for_selector("text=/7 of 7 layers \\(384 dimensions each\\)/ >> visible=true")
    idle(page)
    caption = page.get_by_text("7 of 7 layers", exact=False).first.inner_text()
    assert re.search(r"about 6\.4 GiB on disk", caption)
    # the button comes after the caption in the same run: waited for, not counted at once
    expect(page.locator("button", has_text="Build the Brown index for minilm-l6")).to_have_count(1)
    tags = page.locator("[data-testid='stMultiSelect'] [data-tag-index]")
    assert tags.count() == 7 and tags.first.get_attribute("aria-label") == "0: embeddings"
    assert not page.locator('[data-testid="stException"]').count()


def test_the_corpus_page_builds_brown_with_a_moving_bar_and_opens_the_index(browser,
                                                                          tmp_path):
    """No index yet: the page builds Brown (here a 24-sentence stand-in, in a server of its
    own) into the app's folder; the bar reaches every sentence before the search indexes are
    built (it stayed at 0: the app's builds reported no progress), and the new index opens."""
    from tests.engine.corpus.test_done_when import MONEY, RIVER

    src = tmp_path / "brown.txt"
    src.write_text("\n".join(RIVER + MONEY))
    embedded = tmp_path / "bar-seen"
    prelude = "\n".join([
        "import time",
        "from pathlib import Path",
        "from engine.corpus import catalog, index, sources",
        f"catalog.DEFAULT_DIR = Path({str(tmp_path / 'default')!r})",
        f"lines = tuple(Path({str(src)!r}).read_text().splitlines())",
        "sources.brown = lambda build=True, progress=True: sources.Corpus('brown', lines)",
        # the search indexes of 24 sentences take a moment; Brown's take minutes: the bar is
        # held in that state until the test has seen it (the file `embedded`)
        "finish = index.finish",
        "def held(*args, **kwargs):",
        f"    while not Path({str(embedded)!r}).exists():",
        "        time.sleep(0.05)",
        "    return finish(*args, **kwargs)",
        "index.finish = held",
    ])
    with open(tmp_path / "server.log", "w") as log, \
            _streamlit({"CTXLENS_INDEX_DIRS": str(tmp_path / "none")}, log, prelude) as url:
        # minilm-l6 loaded, as on the shared server (the Polysemy page with it alone)
        warm(browser, url, [("", {"model_elmo": "(none)", "model_gpt": "(none)"})])
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(f"{url}/corpus?corpus_word=bank")
        page.wait_for_selector("text=No corpus index yet >> visible=true")
        page.locator("button", has_text="Build the Brown index for minilm-l6").click()
        page.wait_for_selector("text=/All 24 sentences embedded; building the search indexes/"
                               " >> visible=true")
        embedded.touch()
        page.wait_for_selector("text=/'bank' in brown: 24 of 24 occurrences, minilm-l6/"
                               " >> visible=true")
        idle(page)
        index = page.locator("input[aria-label='Index']").input_value()
        assert index.startswith("brown-minilm-l6: minilm-l6, brown, 24 sentences")
        assert not page.locator('[data-testid="stException"]').count()
    assert (tmp_path / "default" / "brown-minilm-l6" / "manifest.json").is_file()


def test_corpus_every_layer_grid_clicks_to_the_nearest_contexts_at_that_layer(server, browser):
    """Corpus, every layer side by side: the same 24 occurrences in each of the index's three
    panels (layers 0, 4, 6); a click in a panel opens the nearest contexts at that layer."""
    page, plot = _corpus_map(
        browser, f"{server}/corpus?corpus_word=bank&corpus_layer=6&corpus_grid=true",
        "/24 of 24 occurrences at every layer/", "every layer", 1300)
    assert plot.locator(".annotation-text").count() == 3           # one title a panel
    points = plot.locator(".scatterlayer .trace .points path")
    assert points.count() == 24 * 3
    with rerun(page):
        points.nth(24 * 3 - 1).click(force=True)     # a point of the last trace's last panel
    page.wait_for_selector("text=/Nearest contexts at layer/ >> visible=true")
    heading = page.get_by_text("Nearest contexts at", exact=False).first.inner_text()
    assert re.search(r"Nearest contexts at (layer [46]|embeddings)", heading)
    # the heading comes first, the table when the search is done (under two test workers the
    # count ran before it)
    page.locator('[data-testid="stDataFrame"] >> visible=true').first.wait_for()
    assert not page.locator('[data-testid="stException"]').count()


def test_a_point_clicked_on_the_polysemy_page_searches_the_corpus_for_its_context(server,
                                                                                   browser):
    """Polysemy clusters: clicking a sentence's point offers 'Search the corpus for contexts
    like this'; the button opens the Corpus page with that sentence and the target word in its
    search box, and the corpus's nearest contexts listed."""
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/?preset=mouse")
    page.wait_for_selector(SETTLED)
    idle(page)
    plot = page.locator(".js-plotly-plot:visible").filter(has_text="(baseline)").first
    # a point of the contextual panel (the baseline's points may all sit under one "×8")
    with rerun(page):
        plot.locator(".scatterlayer .trace .points path").last.click(force=True)
    button = page.get_by_role("button", name="Search the corpus for contexts like this")
    expect(button.first).to_be_visible()
    clicked = page.locator("[class*='st-key-corpus_from_']").first.inner_text()
    button.first.click()
    page.wait_for_url(re.compile(r"/corpus"))
    box = page.locator(".st-key-corpus_query_text input")
    expect(box).to_have_value(re.compile(r"\S"))
    assert box.input_value() in clicked
    expect(page.locator(".st-key-corpus_query_word input")).to_have_value(
        re.compile(r"^mouse$", re.IGNORECASE))
    page.wait_for_function("() => document.querySelectorAll('[data-testid=\"stDataFrame\"]')"
                           ".length >= 1")
    idle(page)
    assert not page.locator('[data-testid="stException"]').count()
