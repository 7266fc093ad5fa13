"""Across pages in a real browser: the explorer's tour of every page (it takes the README's
screenshots), settings that travel between pages and in links, a restarted server, controls
on a tablet, and a quiet server terminal."""
from __future__ import annotations

import re
import subprocess

import pytest

from tests.e2e.helpers import (BROWSER_MARKS, ELLIPSIZED, MODEL_WAIT_MS, SEE_LOADING, SENTENCES,
                               SERVER_LOG, SETTLED, SHOTS, _download, _first_chart, _goto,
                               _open_from_model_view, _settle, _streamlit, _type_inputs)

pytestmark = BROWSER_MARKS


def test_explorer_in_a_real_browser(server, browser, tmp_path):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/")          # the default page (clusters) lives at the root
    _first_chart(page)
    _type_inputs(page)
    _settle(page)
    page.wait_for_selector("text='bat' in 4 sentences >> visible=true", timeout=MODEL_WAIT_MS)
    assert not page.locator('[data-testid="stException"]').count()

    # typed sentences have no sense labels yet: let clustering suggest them
    page.locator("details").filter(has_text="Sense labels").first.locator("summary").click()
    page.get_by_role("button", name="Suggest senses").click()
    _settle(page)
    page.wait_for_selector(".js-plotly-plot .legendtext:text-is('sense 1'):visible",
                           timeout=60_000)
    _settle(page, 3000)
    page.screenshot(path=str(SHOTS / "clusters.png"), full_page=True)

    # the layer slider: Home moves it to layer 0, and the right panel's title follows
    slider = page.get_by_role("slider", name="Layer").first
    top = slider.input_value()
    slider.focus()
    page.keyboard.press("Home")
    _settle(page)
    assert slider.input_value() == "0" != top
    slider.focus()
    page.keyboard.press("ArrowRight")
    _settle(page)
    assert slider.input_value() == "1"
    page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot "
                           ".annotation-text')].some(t => /^(layer|biLSTM) 1$/.test("
                           "t.textContent.trim()))", timeout=60_000)

    png = _download(page, "Export clusters-", "PNG", tmp_path)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    svg = _download(page, "Export clusters-", "SVG", tmp_path)
    assert b"<svg" in svg[:300]

    copied = page.url
    assert "target=bat" in copied and re.search(r"layer_[^=&]+=1(&|$)", copied)

    for name, link, expected in (
            ("attention", "Attention", "text=smollm2-135m, layer 1, head 1"),
            ("predictions", "Predictions", "text=A [MASK] flew out of the cave."),
            ("layers", "Compare layers", "text=Anisotropy baseline"),
            ("elmo", "ELMo layer weights", "h1:has-text('ELMo layer weights')")):
        page.get_by_role("link", name=link).first.click()
        _settle(page)
        page.wait_for_selector(expected, timeout=MODEL_WAIT_MS)
        _settle(page, 3000)
        assert not page.locator('[data-testid="stException"]').count()
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
        if name == "attention":
            _open_from_model_view(page)

    # the copied link in a fresh dark-mode browser: same state, and the theme follows the system
    again = browser.new_page(viewport={"width": 1400, "height": 1000}, color_scheme="dark")
    again.goto(copied)
    again.wait_for_selector("text='bat' in 4 sentences >> visible=true", timeout=MODEL_WAIT_MS)
    _settle(again)
    assert again.get_by_role("textbox", name="Target word", exact=True).input_value() == "bat"
    assert again.get_by_role("slider", name="Layer").first.input_value() == "1"
    box = again.get_by_role("textbox", name="Sentences, one per line", exact=True)
    assert SENTENCES[1] in box.input_value()
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
    _settle(page)
    slider = page.get_by_role("slider", name="Layer").first
    slider.focus()
    page.keyboard.press("Home")
    page.keyboard.press("ArrowRight")
    _settle(page)
    assert slider.input_value() == "1"

    page.get_by_role("link", name="ELMo layer weights").first.click()
    _settle(page)
    page.wait_for_selector("h1:has-text('ELMo layer weights')", timeout=MODEL_WAIT_MS)
    weight = page.locator("[data-testid='stSlider']").filter(has_text="s for").first \
        .get_by_role("slider")
    before = float(weight.input_value())
    weight.focus()
    page.keyboard.press("ArrowRight")
    _settle(page)
    moved = weight.input_value()
    assert float(moved) == pytest.approx(before + 0.1)

    page.get_by_role("link", name="Polysemy clusters").first.click()
    _settle(page)
    _first_chart(page)
    assert page.get_by_role("slider", name="Layer").first.input_value() == "1"
    page.get_by_role("link", name="ELMo layer weights").first.click()
    _settle(page)
    page.wait_for_selector("h1:has-text('ELMo layer weights')", timeout=MODEL_WAIT_MS)
    again = page.locator("[data-testid='stSlider']").filter(has_text="s for").first \
        .get_by_role("slider")
    assert again.input_value() == moved
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def test_a_shared_link_restores_settings_of_pages_not_visited_yet(server, browser):
    """Issue 18, item 3, in the browser: a link made on the Predictions and Attention pages,
    opened on another page, kept only that page's settings (the rest left the address at the
    first run); now each page restores its own when visited."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, server, preset="mouse", top_k="5", att_every_head="True")
    _first_chart(page)
    _settle(page)
    assert "top_k=5" in page.url and "att_every_head=True" in page.url
    page.get_by_role("link", name="Predictions").first.click()
    _settle(page)
    slider = page.get_by_role("slider", name="top k")
    slider.wait_for(timeout=MODEL_WAIT_MS)
    assert slider.input_value() == "5"
    page.get_by_role("link", name="Attention").first.click()
    _settle(page)
    page.wait_for_selector("text=/layer \\d+, every head/ >> visible=true", timeout=MODEL_WAIT_MS)
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def test_a_pages_settings_stay_in_the_link_after_leaving_it(server, browser):
    """Streamlit drops a page widget's value when its page is left: the address lost the
    clusters page's layers and projection as soon as another page was opened."""
    from urllib.parse import parse_qs, urlparse

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/?projection=UMAP")            # the clusters page lives at the root
    _first_chart(page)
    _settle(page)
    before = {k: v for k, v in parse_qs(urlparse(page.url).query).items()
              if k.startswith("layer_") or k == "projection"}
    assert before.get("projection") == ["UMAP"] and len(before) >= 2, page.url
    page.get_by_role("link", name="Attention").first.click()
    page.wait_for_selector("h1:has-text('Attention')", timeout=MODEL_WAIT_MS)
    # the address is written at the end of the page's run
    page.wait_for_url(re.compile(r"att_every_head="), timeout=MODEL_WAIT_MS)
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
            page.wait_for_selector(SETTLED, timeout=MODEL_WAIT_MS)
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
    _settle(page, 3000)
    assert page.evaluate(ELLIPSIZED) == []
    page.close()


def test_the_server_terminal_stays_quiet(server, browser):
    """After every page was driven above: no warnings, no tracebacks, no file-watcher noise
    (before .streamlit/config.toml, Streamlit watched .venv and printed hundreds of "Inotify
    queue overflowed" lines)."""
    page = browser.new_page()
    for path in ("", "layers", "attention", "predictions", "elmo"):
        page.goto(f"{server}/{path}")
        _settle(page, 3000)
    page.close()
    lines = [ln for ln in SERVER_LOG.read_text().splitlines() if ln.strip()]
    noisy = [ln for ln in lines if any(w in ln for w in ("Warning", "WARNING", "Traceback",
                                                           "Error", "Inotify", "deprecat"))]
    assert noisy == [], noisy[:5]
