"""Issue #54 in a real browser: a prediction explained on the Predictions page, and a prompt
continued on the Generation page, with what a reader sees."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.e2e.helpers import BROWSER_MARKS, DRAW_MS, _goto, idle, rerun

pytestmark = BROWSER_MARKS


def _chart(page, title):
    return page.locator(".js-plotly-plot").filter(
        has=page.locator(".gtitle", has_text=title)).first


def test_a_prediction_is_explained_word_by_word(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, server, "predictions", sentences="He sat on the bank of the river .",
          target="bank")
    _chart(page, re.compile(r"^Masked LM$")).wait_for(timeout=DRAW_MS)
    idle(page, DRAW_MS)
    with rerun(page):
        page.get_by_text("Explain these predictions", exact=True).click()
    box = page.get_by_role("textbox", name="Word to explain", exact=True)
    box.fill("bank")
    box.press("Enter")
    words = _chart(page, "gradient × input: why 'bank'")
    words.wait_for(timeout=DRAW_MS)
    idle(page)
    # the sentence's words drawn in the coloured cells, the blank among them
    cells = words.locator("text").all_text_contents()
    for w in ("He", "sat", "river", "[MASK]"):
        assert w in cells, cells
    assert page.get_by_text(re.compile("How far to trust this map")).first.is_visible()
    assert _chart(page, "Attention rollout").count() == 1
    assert "why_target=bank" in page.url and "why=True" in page.url
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def test_a_prompt_is_continued_and_a_generated_token_explained(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, server, "generation", gen_prompt="The capital of France is", gen_tokens=4)
    steps = _chart(page, "Each generated token")
    steps.wait_for(timeout=DRAW_MS)
    idle(page)
    expect(page.get_by_text(re.compile(r"^The capital of France is.+")).first).to_be_visible()
    assert page.get_by_text(re.compile(r"^4 tokens, as many as asked for; greedy")).count() == 1
    ticks = steps.locator(".xtick text").all_text_contents()
    assert [t.split(":")[0] for t in ticks] == ["1", "2", "3", "4"], ticks
    page.get_by_role("tab", name="Why this token?").click()
    why = _chart(page, "gradient × input: why")
    why.wait_for(timeout=DRAW_MS)
    cells = why.locator("text").all_text_contents()
    assert "capital" in cells and "France" in cells, cells
    assert not page.locator('[data-testid="stException"]').count()
    page.close()
