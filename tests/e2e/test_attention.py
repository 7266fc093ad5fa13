"""The Attention and Compare layers pages (app/pages/attention.py, layers.py) in a real browser."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.e2e.helpers import BROWSER_MARKS, ELLIPSIZED, _goto, idle, rerun

pytestmark = BROWSER_MARKS


def test_deep_cka_maps_stay_readable_and_the_head_view_colours_and_focuses(server, browser):
    """Issue 18, item 9, in the browser: SmolLM2's 31 x 31 CKA map was squeezed into a third
    of the row (9 px cells); the head view drew every head in one colour, and focusing a token
    needed the dropdown. Now the map's cells are at least 18 px, each head has its own colour
    and legend entry, and a click on a token focuses it."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, server, "layers", preset="mouse")
    page.wait_for_selector("text=Layer × layer linear CKA >> visible=true")
    cka = "[...document.querySelectorAll('.js-plotly-plot')].find(e => e.layout && " \
          "e.layout.title && /smollm2-135m/.test(e.layout.title.text) && " \
          "e.data[0].type === 'heatmap')"
    page.wait_for_function(f"() => !!{cka} && !!{cka}._fullLayout")
    idle(page)
    n, width = page.evaluate(f"() => {{ const el = {cka}; return [el._fullData[0].z.length, "
                             "el._fullLayout._size.w]; }")
    cell = width / n
    assert n == 31                                      # SmolLM2-135M: embeddings + 30 blocks
    assert cell >= 18, f"CKA cells are {cell:.1f} px wide"

    _goto(page, server, "attention", preset="mouse", att_every_head="True")
    page.wait_for_selector("text=/layer \\d+, every head/ >> visible=true")
    idle(page)
    view = "[...document.querySelectorAll('.js-plotly-plot')].find(e => e.layout && " \
           "e.layout.title && /every head/.test(e.layout.title.text))"
    heads = page.evaluate(f"() => {{ const el = {view}; const shown = el.data.filter(t => "
                          "t.showlegend); return [shown.length, new Set(shown.map(t => "
                          "t.line.color)).size]; }")
    assert heads[0] == heads[1] == 9, heads             # SmolLM2-135M: 9 heads per layer

    focus = page.get_by_role("combobox", name="Focus on token")
    expect(focus).to_have_value("(all)")
    plot = page.locator(".js-plotly-plot").filter(has_text="every head").first
    left = plot.locator(".scatterlayer .trace").nth(-2).locator(".points path")
    with rerun(page):
        left.nth(2).click(force=True)
    expect(focus).to_have_value(re.compile(r"^2: "))
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def test_the_word_view_draws_a_split_word_as_one_on_a_tablet(server, browser):
    """Issue 45, item 3: "Show: Words" draws SmolLM2's attention between the words the rest of
    the app uses (its BPE splits "riverbank" into " river" + "bank"), and its control's labels
    stay whole at 768 px."""
    page = browser.new_page(viewport={"width": 768, "height": 1024})
    _goto(page, server, "attention", sentences="We sat on the riverbank at dawn.\n"
          "The bank closed at noon.", target="bank", att_units="Words")
    page.wait_for_selector("text=smollm2-135m, layer 1, head 1, words >> visible=true")
    heat = "[...document.querySelectorAll('.js-plotly-plot')].find(e => e.layout && " \
           "e.layout.title && /head 1, words/.test(e.layout.title.text) && " \
           "e.data[0].type === 'heatmap')"
    page.get_by_role("tab", name="Heatmap").click()
    page.wait_for_function(f"() => !!{heat}")
    labels = [x.replace("\u200b", "").strip() for x in page.evaluate(f"() => {heat}.data[0].x")]
    assert labels == ["We", "sat", "on", "the", "riverbank", "at", "dawn", "."]
    idle(page)
    assert page.evaluate(ELLIPSIZED) == []
    assert not page.locator('[data-testid="stException"]').count()
    page.close()
