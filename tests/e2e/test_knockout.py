"""Knocking out a head in a real browser (issue 55): a click on a thumbnail of the Attention
page's model view switches that head off, and the Predictions page then shows each prediction
with it off beside the original, with other probabilities."""
from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.helpers import BROWSER_MARKS, SEE_LOADING, _goto, idle, rerun

pytestmark = BROWSER_MARKS

BARS = ("(title) => { const el = [...document.querySelectorAll('.js-plotly-plot')].find(e => "
        "e.layout && e.layout.title && e.layout.title.text.includes(title)); "
        "return el ? el.data[0].x : null; }")
# the bundled GPT trained on Brown (4 layers x 4 heads), alone: no other page of these tests
# loads it, so this page is its first use on the server, as on a server just started
GPT_BROWN = {"model_elmo": "(none)", "model_bert": "(none)", "model_gpt": "gpt-brown",
             "att_model": "gpt-brown"}


def test_a_head_clicked_off_in_the_model_view_changes_the_predictions(server, browser):
    """The first run of the page loads the model, with a progress box above the tabs; the
    click's rerun has none, so the tabs came back one place higher and Streamlit drew them
    anew, on the first tab: the Model view the user had chosen went to the back."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.add_init_script(SEE_LOADING)
    _goto(page, server, "attention", preset="mouse", att_click="switches the head off",
          **GPT_BROWN)
    idle(page)
    assert page.evaluate("() => window.__sawLoading === true"), \
        "gpt-brown was loaded before this test: its first use (the progress box) is not tested"
    tab = page.get_by_role("tab", name="Model view")
    tab.click()
    expect(tab).to_have_attribute("aria-selected", "true")
    # the other tabs' charts are drawn hidden: the visible one with layer rows is the model view
    grid = page.locator(".js-plotly-plot:visible").filter(has_text="layer 2").first
    # each thumbnail carries one clickable marker, row by row: the first is layer 1, head 1
    marker = grid.locator(".scatterlayer .trace .points path").first
    expect(marker).to_be_attached()
    marker.scroll_into_view_if_needed()
    with rerun(page):
        marker.click(force=True)
    expect(tab).to_have_attribute("aria-selected", "true", timeout=5_000)    # it stays chosen
    expect(page.get_by_text("Switched off: 1.1")).to_be_visible()

    page.get_by_role("link", name="See the predictions with them off").click()
    off_title = "Next word (left side only) · 1.1 off (zero)"
    page.wait_for_function(f"() => ({BARS})({off_title!r}) !== null")
    on = page.evaluate(BARS, "Next word (left side only) · every part on")
    off = page.evaluate(BARS, off_title)
    assert on and off and len(on) == len(off)
    assert max(abs(a - b) for a, b in zip(on, off)) > 1e-4, (on, off)
    box = page.get_by_role("textbox", name="Knock out (heads or blocks)", exact=True)
    expect(box).to_have_value("1.1")
    idle(page)
    assert not page.locator('[data-testid="stException"]').count()
    page.close()
