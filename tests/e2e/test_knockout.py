"""Knocking out a head in a real browser (issue 55): a click on a thumbnail of the Attention
page's model view switches that head off, and the Predictions page then shows each prediction
with it off beside the original, with other probabilities."""
from __future__ import annotations

from tests.e2e.helpers import BROWSER_MARKS, MODEL_WAIT_MS, _goto, _settle

pytestmark = BROWSER_MARKS

BARS = ("(title) => { const el = [...document.querySelectorAll('.js-plotly-plot')].find(e => "
        "e.layout && e.layout.title && e.layout.title.text.includes(title)); "
        "return el ? el.data[0].x : null; }")


def test_a_head_clicked_off_in_the_model_view_changes_the_predictions(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, server, "attention", preset="mouse", att_model="smollm2-135m",
          att_click="switches the head off")
    page.get_by_role("tab", name="Model view").click(timeout=MODEL_WAIT_MS)
    # the other tabs' charts are drawn hidden: the visible one with layer rows is the model view
    grid = page.locator(".js-plotly-plot:visible").filter(has_text="layer 2").first
    grid.wait_for(state="visible", timeout=MODEL_WAIT_MS)
    _settle(page)
    # each thumbnail carries one clickable marker, row by row: the first is layer 1, head 1
    marker = grid.locator(".scatterlayer .trace .points path").first
    marker.scroll_into_view_if_needed()
    marker.click(force=True)
    _settle(page)
    # the rerun may bring the first tab back to the front: the caption is there, hidden
    page.get_by_text("Switched off: 1.1").wait_for(state="attached", timeout=MODEL_WAIT_MS)

    page.get_by_role("tab", name="Model view").click()      # the link is on that tab
    page.get_by_role("link", name="See the predictions with them off").click()
    off_title = "Next word (left side only) · 1.1 off (zero)"
    page.wait_for_function(f"() => ({BARS})({off_title!r}) !== null", timeout=MODEL_WAIT_MS)
    _settle(page)
    on = page.evaluate(BARS, "Next word (left side only) · every part on")
    off = page.evaluate(BARS, off_title)
    assert on and off and len(on) == len(off)
    assert max(abs(a - b) for a, b in zip(on, off)) > 1e-4, (on, off)
    box = page.get_by_role("textbox", name="Knock out (heads or blocks)", exact=True)
    assert box.input_value() == "1.1"
    assert not page.locator('[data-testid="stException"]').count()
    page.close()
