"""Across pages in a real browser: the explorer's tour of every page (it takes the README's
screenshots), settings that travel between pages and in links, a restarted server, controls
on a tablet, and a quiet server terminal."""
from __future__ import annotations

import re
import subprocess

import pytest

from playwright.sync_api import expect

from tests.e2e.helpers import (BROWSER_MARKS, DRAW_MS, ELLIPSIZED, SEE_LOADING, SENTENCES,
                               SERVER_LOG, SETTLED, SHOTS, WAIT_MS, WARM_MS, _download,
                               _first_chart, _goto, _open_from_model_view, _streamlit,
                               _type_inputs, idle, rerun)

pytestmark = BROWSER_MARKS


def test_explorer_in_a_real_browser(server, browser, tmp_path):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/")          # the default page (clusters) lives at the root
    _first_chart(page)
    _type_inputs(page)
    page.wait_for_selector("text='bat' in 4 sentences >> visible=true")
    assert not page.locator('[data-testid="stException"]').count()

    # typed sentences have no sense labels yet: let clustering suggest them
    page.locator("details").filter(has_text="Sense labels").first.locator("summary").click()
    with rerun(page):
        page.get_by_role("button", name="Suggest senses").click()
    page.wait_for_selector(".js-plotly-plot .legendtext:text-is('sense 1'):visible")
    page.screenshot(path=str(SHOTS / "clusters.png"), full_page=True)

    # the layer slider: Home moves it to layer 0, and the right panel's title follows
    slider = page.get_by_role("slider", name="Layer").first
    top = slider.input_value()
    assert top != "0"
    slider.focus()
    with rerun(page):
        page.keyboard.press("Home")
    expect(slider).to_have_value("0")
    slider.focus()
    with rerun(page):
        page.keyboard.press("ArrowRight")
    expect(slider).to_have_value("1")
    page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot "
                           ".annotation-text')].some(t => /^(layer|biLSTM) 1$/.test("
                           "t.textContent.trim()))")

    png = _download(page, "Export clusters-", "PNG", tmp_path)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    svg = _download(page, "Export clusters-", "SVG", tmp_path)
    assert b"<svg" in svg[:300]

    page.wait_for_url(lambda url: "target=bat" in url
                      and re.search(r"layer_[^=&]+=1(&|$)", url) is not None)
    copied = page.url

    for name, link, expected in (
            ("attention", "Attention", "text=smollm2-135m, layer 1, head 1"),
            ("predictions", "Predictions", "text=A [MASK] flew out of the cave."),
            ("layers", "Compare layers", "text=Anisotropy baseline"),
            ("elmo", "ELMo layer weights", "h1:has-text('ELMo layer weights')")):
        # the typed sentences are new to each page: the Predictions page's draw is long
        with rerun(page, DRAW_MS):
            page.get_by_role("link", name=link).first.click()
        page.wait_for_selector(expected)
        assert not page.locator('[data-testid="stException"]').count()
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
        if name == "attention":
            _open_from_model_view(page)

    # the copied link in a fresh dark-mode browser: same state, and the theme follows the system
    again = browser.new_page(viewport={"width": 1400, "height": 1000}, color_scheme="dark")
    again.goto(copied)
    again.wait_for_selector("text='bat' in 4 sentences >> visible=true")
    expect(again.get_by_role("textbox", name="Target word", exact=True)).to_have_value("bat")
    expect(again.get_by_role("slider", name="Layer").first).to_have_value("1")
    box = again.get_by_role("textbox", name="Sentences, one per line", exact=True)
    assert SENTENCES[1] in box.input_value()
    idle(again)
    background = again.evaluate("getComputedStyle(document.querySelector('.stApp'))"
                                ".backgroundColor")
    rgb = [int(x) for x in re.findall(r"\d+", background)[:3]]
    assert sum(rgb) < 200, background          # a dark background
    again.screenshot(path=str(SHOTS / "clusters-dark.png"), full_page=True)


def test_sliders_keep_their_values_across_page_switches(server, browser):
    """Issue 18, item 5: a layer slider once jumped back to 0 after a page switch (not
    reproduced since; this keeps it so). The clusters page's ELMo layer slider and the ELMo
    weights page's first mixing weight, each moved, then the other page visited and back."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/")
    _first_chart(page)
    idle(page)
    slider = page.get_by_role("slider", name="Layer").first
    slider.focus()
    with rerun(page):
        page.keyboard.press("Home")
    with rerun(page):
        page.keyboard.press("ArrowRight")
    expect(slider).to_have_value("1")

    with rerun(page):
        page.get_by_role("link", name="ELMo layer weights").first.click()
    page.wait_for_selector("h1:has-text('ELMo layer weights')")
    weight = page.locator("[data-testid='stSlider']").filter(has_text="s for").first \
        .get_by_role("slider")
    before = float(weight.input_value())
    weight.focus()
    with rerun(page):
        page.keyboard.press("ArrowRight")
    moved = weight.input_value()
    assert float(moved) == pytest.approx(before + 0.1)

    with rerun(page):
        page.get_by_role("link", name="Polysemy clusters").first.click()
    _first_chart(page)
    expect(page.get_by_role("slider", name="Layer").first).to_have_value("1")
    with rerun(page):
        page.get_by_role("link", name="ELMo layer weights").first.click()
    page.wait_for_selector("h1:has-text('ELMo layer weights')")
    again = page.locator("[data-testid='stSlider']").filter(has_text="s for").first \
        .get_by_role("slider")
    expect(again).to_have_value(moved)
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def test_a_shared_link_restores_settings_of_pages_not_visited_yet(server, browser):
    """Issue 18, item 3, in the browser: a link made on the Predictions and Attention pages,
    opened on another page, kept only that page's settings (the rest left the address at the
    first run); now each page restores its own when visited."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, server, preset="mouse", top_k="5", att_every_head="True")
    _first_chart(page)
    idle(page)
    assert "top_k=5" in page.url and "att_every_head=True" in page.url
    # five words a blank, not the ten the shared server has drawn: a new draw
    with rerun(page, DRAW_MS):
        page.get_by_role("link", name="Predictions").first.click()
    expect(page.get_by_role("slider", name="top k")).to_have_value("5")
    with rerun(page):
        page.get_by_role("link", name="Attention").first.click()
    page.wait_for_selector("text=/layer \\d+, every head/ >> visible=true")
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def test_a_pages_settings_stay_in_the_link_after_leaving_it(server, browser):
    """Streamlit drops a page widget's value when its page is left: the address lost the
    clusters page's layers and projection as soon as another page was opened."""
    from urllib.parse import parse_qs, urlparse

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/?projection=UMAP")            # the clusters page lives at the root
    _first_chart(page)
    idle(page)
    before = {k: v for k, v in parse_qs(urlparse(page.url).query).items()
              if k.startswith("layer_") or k == "projection"}
    assert before.get("projection") == ["UMAP"] and len(before) >= 2, page.url
    page.get_by_role("link", name="Attention").first.click()
    page.wait_for_selector("h1:has-text('Attention')")
    # the address is written at the end of the page's run
    page.wait_for_url(re.compile(r"att_every_head="))
    after = parse_qs(urlparse(page.url).query)
    assert {k: after.get(k) for k in before} == before, page.url
    page.close()


def test_a_restarted_server_draws_the_default_page_from_stored_encodings(browser):
    """The app keeps its encodings on disk: after `streamlit run` again, the default page draws
    every chart without loading a model (no "Loading and running …" box at any moment)."""
    for visit in ("fills the store", "after a restart"):
        with _streamlit({}, subprocess.DEVNULL) as url:
            page = browser.new_page()
            page.add_init_script(SEE_LOADING)
            page.goto(url)
            # the first visit may load the models (the one long wait); the second must not
            page.wait_for_selector(SETTLED, timeout=WARM_MS if visit == "fills the store"
                                   else WAIT_MS)
            idle(page)
            saw = page.evaluate("() => window.__sawLoading === true")
            assert page.locator(".js-plotly-plot").count() >= 4, visit
            page.close()
    assert not saw


@pytest.mark.parametrize("path", ["grid", "attention", "predictions"])
def test_control_labels_are_not_cut_short_on_a_tablet(server, browser, path):
    """At 768 px "All models", "Isolate selection", "Hide special tokens", "Every head, one
    colour each" and "Re-rank by the whole sentence" (now "Re-rank by sentence") ended in "…"."""
    page = browser.new_page(viewport={"width": 768, "height": 1024})
    page.goto(f"{server}/{path}")
    _first_chart(page)
    idle(page)
    assert page.evaluate(ELLIPSIZED) == []
    page.close()


def test_the_server_terminal_stays_quiet(server, browser):
    """After every page was driven above: no warnings, no tracebacks, no file-watcher noise
    (before .streamlit/config.toml, Streamlit watched .venv and printed hundreds of "Inotify
    queue overflowed" lines)."""
    page = browser.new_page()
    for path in ("", "layers", "attention", "predictions", "elmo"):
        page.goto(f"{server}/{path}")
        idle(page)
    page.close()
    lines = [ln for ln in SERVER_LOG.read_text().splitlines() if ln.strip()]
    noisy = [ln for ln in lines if any(w in ln for w in ("Warning", "WARNING", "Traceback",
                                                           "Error", "Inotify", "deprecat"))]
    assert noisy == [], noisy[:5]
