"""The Predictions page (app/pages/predictions.py) in a real browser."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.e2e.helpers import BROWSER_MARKS, DRAW_MS, _goto, idle, rerun

pytestmark = BROWSER_MARKS


def test_word_to_mask_follows_edited_sentences(server, browser):
    """Issue 18, item 2, in the browser: a word picked to mask, then the sentences edited: the
    blank starts again from the target word of the new sentence instead of keeping the old
    position (which would name another word, or none)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/predictions?preset=mouse")
    word = page.get_by_role("combobox", name="Word to mask").last
    expect(word).to_have_value("mouse (#2)")       # "Your mouse likes cheese."
    idle(page, DRAW_MS)
    word.click()
    with rerun(page, DRAW_MS):
        page.get_by_role("option", name="cheese (#4)").click()
    expect(word).to_have_value("cheese (#4)")
    blank = page.get_by_text(re.compile(r"^The blank: "))
    expect(blank).to_have_text("The blank: Your mouse likes [MASK].", timeout=DRAW_MS)
    box = page.get_by_role("textbox", name="Sentences, one per line", exact=True)
    typed = "My old mouse hid under the bed .\nA mouse ran ."
    box.fill(typed)
    expect(box).to_have_value(typed)               # typed text is never taken back by a rerun
    with rerun(page, DRAW_MS):                     # a lost Ctrl+Enter fails here, not later
        box.press("Control+Enter")
    # the run the key started has ended: the blank it drew is the new sentence's, at once
    expect(blank).to_have_text("The blank: My old [MASK] hid under the bed .")
    expect(word).to_have_value("mouse (#3)")       # not #4, now "hid"
    idle(page, DRAW_MS)
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def test_next_word_pieces_read_as_words_or_marked_continuations(server, browser):
    """Issue 18, item 10, in the browser: the GPT's next-word bars showed raw pieces (" key",
    "sid"); now a word start reads as the word and a piece glued to the last word as '…sid'."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, server, "predictions", sentences="He locked the door with a key .",
          target="key")
    chart = page.locator(".js-plotly-plot").filter(
        has=page.locator(".gtitle", has_text="Next word (left side only)")).first
    chart.wait_for(timeout=DRAW_MS)
    idle(page, DRAW_MS)
    ticks = chart.locator(".ytick text").all_text_contents()
    assert len(ticks) >= 3
    for t in ticks:
        assert t == t.strip() and not t.startswith(("Ġ", "▁")), ticks
    assert "key" in ticks, ticks
    assert page.get_by_text(re.compile(r"'…x' continues the last word")).count() >= 1
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def test_the_rescore_toggle_redraws_the_masked_lm_and_travels_in_the_link(server, browser):
    """The Predictions page's "Re-rank by sentence" toggle: the masked LM's chart is
    redrawn from the re-scored fill (its caption names the method), the address carries the
    choice, and a page opened from that address starts with it on."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, server, "predictions", sentences="He locked the door with a key .", target="key")
    titled = page.locator(".js-plotly-plot").filter(
        has=page.locator(".gtitle", has_text=re.compile(r"^Masked LM$")))
    titled.first.wait_for(timeout=DRAW_MS)
    idle(page, DRAW_MS)
    plain = titled.first.locator(".ytick text").all_text_contents()
    page.get_by_text("Re-rank by sentence", exact=True).click()
    reranked = page.locator(".js-plotly-plot").filter(
        has=page.locator(".gtitle", has_text="Masked LM, re-ranked")).first
    reranked.wait_for(timeout=DRAW_MS)
    idle(page, DRAW_MS)
    words = reranked.locator(".ytick text").all_text_contents()
    assert len(words) >= 3 and all(w.isalpha() for w in words), words
    assert words != plain and "door" in plain and "door" not in words[:3]
    assert page.get_by_text(re.compile("re-ranked by the pseudo-log-likelihood")).count() >= 1
    assert "pred_rescore=True" in page.url
    link = page.url
    fresh = browser.new_page(viewport={"width": 1400, "height": 1000})
    fresh.goto(link)
    fresh.locator(".js-plotly-plot").filter(
        has=fresh.locator(".gtitle", has_text="Masked LM, re-ranked")).first.wait_for()
    idle(fresh, DRAW_MS)
    for p in (page, fresh):
        assert not p.locator('[data-testid="stException"]').count()
        p.close()
