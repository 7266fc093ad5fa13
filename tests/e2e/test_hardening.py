"""Issue 47 in a real browser, on the class server (CTXLENS_READ_ONLY=1, tests/e2e/conftest.py):
user text shows as text, never as a link, an image or a tag (item 4), typed sentences come back
after a preset is picked (item 6), and issue 66's day-long link is refused at once. The pages
run minilm-l6 alone (quick to load)."""
from __future__ import annotations

import pytest

from playwright.sync_api import expect

from tests.e2e.helpers import (DRAW_MS, ONE_MODEL, PATCHING, BROWSER_MARKS, SERVER_PIDS, _goto,
                               idle, rerun, wait_until_idle)

pytestmark = BROWSER_MARKS

LINK = "[x](http://example.com/t)"
IMAGE = "![i](http://127.0.0.1:9/t.png)"
TAG = '<a href="//example.com">R</a>'
BIG = '<span style="font-size:90px">big</span>'
# links and images inside the page's messages (alerts and captions)
IN_MESSAGES = ", ".join(f'[data-testid="{box}"] {tag}' for box in ("stAlertContainer",
                                                                   "stCaptionContainer")
                        for tag in ("a", "img"))


def _outside_requests(page, server: str) -> list[str]:
    """Every address outside the app the page asks for, kept as it goes: an image in a message
    is fetched."""
    asked: list[str] = []
    page.on("request", lambda request: None if request.url.startswith(server)
            else asked.append(request.url))
    return asked


@pytest.mark.parametrize("target", [LINK, IMAGE, "www.example.com"])
def test_a_target_in_no_sentence_is_quoted_as_text_on_the_grid(server, browser, target):
    """A target written as a markdown link or image, or a bare www address, showed as a live
    link or image (the browser fetched it) in the grid's missing-target error."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    asked = _outside_requests(page, server)
    _goto(page, server, "grid", preset="mouse", target=target, **ONE_MODEL)
    error = page.locator('[data-testid="stAlertContainer"]').filter(
        has_text="is in none of the sentences").first
    error.wait_for()
    idle(page)
    shown = error.inner_text().replace("\u2060", "")
    assert f"'{target}' is in none of the sentences" in shown, shown
    assert page.locator(IN_MESSAGES).count() == 0
    assert asked == []
    page.close()


def test_sense_labels_with_markup_show_literally_in_the_legend_and_the_note(server, browser):
    """A sense label '<a href=...>R</a>' was a link in the clusters legend and a
    '<span style="font-size:90px">' label drew in 90 px; a label with one sentence is named in
    the '… has one' note, as text."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    asked = _outside_requests(page, server)
    labels = [TAG, BIG, BIG, LINK, LINK, "b", "b", "b"]
    _goto(page, server, "", preset="mouse", labels="|".join(labels), **ONE_MODEL)
    page.wait_for_selector(".js-plotly-plot .legendtext")
    note = page.locator('[data-testid="stAlertContainer"]').filter(has_text="has one").first
    expect(note).to_be_visible()
    idle(page)
    legend = page.locator(".js-plotly-plot .legendtext").all_text_contents()
    assert {TAG, BIG, LINK} <= set(legend), legend
    assert page.locator(".js-plotly-plot svg a").count() == 0
    assert page.locator('.js-plotly-plot [style*="90px"]').count() == 0
    assert f"('{TAG}' has one)" in note.inner_text().replace("\u2060", "")
    assert page.locator(IN_MESSAGES).count() == 0
    assert asked == []
    page.close()


def test_custom_brings_back_the_typed_sentences_after_a_preset(server, browser):
    """Picking a preset threw the typed sentences away, and neither '(custom)' nor Back brought
    them back. On the Benchmarks page: the sidebar alone, no model to load."""
    from app.state import presets

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/benchmarks")
    idle(page)
    typed = ["My own line about a crane.", "The crane lifted the steel beam."]
    box = page.get_by_role("textbox", name="Sentences, one per line", exact=True)
    box.fill("\n".join(typed))
    with rerun(page):
        box.press("Control+Enter")
    target = page.get_by_role("textbox", name="Target word", exact=True)
    target.fill("crane")
    with rerun(page):
        target.press("Enter")
    preset = page.get_by_role("combobox", name="Preset")

    def pick(name: str) -> None:
        preset.click()
        page.get_by_role("option", name=name, exact=True).click()
        expect(preset).to_have_value(name)

    pick("bank")
    expect(box).to_have_value("\n".join(presets()["bank"].sentences))
    expect(target).to_have_value(presets()["bank"].target)
    pick("(custom)")
    expect(box).to_have_value("\n".join(typed))
    expect(target).to_have_value("crane")
    page.close()


# Issue 66 H1: 300 astral-plane characters (84 words: inside every text cap) are 1,197 SmolLM2
# tokens, and patching them is 31 × 1,197 cells, about a day of both cores
DAY_LONG = "".join(chr(0x10000 + 37 * i) for i in range(300))
DAY_LONG_LINK = {**PATCHING,
                 "patch_how": "another text", "patch_text_next": DAY_LONG,
                 "patch_corrupt_next": chr(0x10001) + DAY_LONG[1:], "patch_target_next": "a"}


def test_a_day_long_link_is_refused_at_once_and_the_server_goes_idle(server, browser):
    """The link pinned both cores for ~28 h (Stop, closing the tab and CTXLENS_READ_ONLY
    changed nothing): now the page says what it would cost and refuses it, before a forward
    pass, and the server's CPU is idle seconds later."""
    url = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # the page's own small example first (the server has loaded SmolLM2)
    _goto(page, url, "components", **PATCHING)
    page.locator(".js-plotly-plot:visible").first.wait_for(timeout=DRAW_MS)
    _goto(page, url, "components", **DAY_LONG_LINK)
    refusal = page.locator('[data-testid="stAlertContainer"]').filter(
        has_text="refused before it starts")
    refusal.wait_for(timeout=60_000)
    shown = refusal.inner_text()
    assert "31 × 1,197 cells" in shown and " h here" in shown, shown
    assert "cap of 5 min" in shown, shown
    wait_until_idle(SERVER_PIDS[url])
    page.close()
