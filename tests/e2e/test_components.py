"""The "What each part does" page in a real browser (issue 60 §3): the numbers are read back
from the charts drawn, not from the app's state. Each head's cell of the direct effects is the
engine's own number; the block bars add the head map's rows up; and the caption's parts add up
to its total, which is the logit."""
from __future__ import annotations

import re

import numpy as np
from playwright.sync_api import expect

from tests.e2e.helpers import BROWSER_MARKS, DRAW_MS, _goto, idle

pytestmark = BROWSER_MARKS

MODEL, TEXT, TARGET = "smollm2-135m", "The capital of France is", "Paris"
# the traces of the chart whose title holds `title` (the theme writes it in bold), as plotly
# drew them (its _fullData: the typed arrays the figure's JSON carries, decoded), as plain
# lists; null until drawn
TRACES = ("(title) => { const el = [...document.querySelectorAll('.js-plotly-plot')].find(e => "
          "e.layout && e.layout.title && e.layout.title.text.includes(title)); "
          "const list = (v) => v && typeof v === 'object' && v.length !== undefined "
          "? Array.from(v, list) : v; "
          "return el && el._fullData ? el._fullData.map(t => ({x: list(t.x), y: list(t.y), "
          "z: list(t.z)})) : null; }")
NUMBER = r"(-?\d+\.\d+)"
ADD_UP = re.compile(rf"embeddings {NUMBER} \+ heads {NUMBER} \+ feed-forward blocks {NUMBER} "
                    rf"\+ rest {NUMBER} = {NUMBER}; .*: {NUMBER} \(difference")


def _drawn(page, title: str) -> list[dict]:
    page.wait_for_function(f"(t) => ({TRACES})(t) !== null", arg=title, timeout=DRAW_MS)
    return page.evaluate(TRACES, title)


def test_the_direct_effects_drawn_are_the_engines_and_add_up_to_the_logit(server, browser):
    from engine.api import Engine

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, server, "components", parts_model=MODEL,
          parts_view="Direct logit attribution", dla_text_next=TEXT, dla_target_next=TARGET)
    heads = np.array(_drawn(page, "Each head's direct effect")[0]["z"], float)
    bars = _drawn(page, "Each block's direct effect")[0]
    idle(page)
    said = page.get_by_text(re.compile(r"^The parts add up"))
    expect(said).to_be_visible()

    # a head's cell, and every other, is the engine's direct effect of that head
    c = Engine(device="cpu").components(MODEL, TEXT, TARGET)
    assert heads.shape == c.heads.shape == (30, 9)
    top = np.unravel_index(np.abs(heads).argmax(), heads.shape)
    assert abs(heads[top] - c.heads[top]) <= 1e-5, (top, heads[top], c.heads[top])
    np.testing.assert_allclose(heads, c.heads, atol=1e-5)

    # the bars: the embeddings, then per layer its attention (the sum of its heads' cells
    # drawn above) and its feed-forward block, then the rest
    names, values = bars["x"], np.array(bars["y"], float)
    assert names[0] == "embeddings" and names[-1] == "rest" and len(names) == 2 + 2 * 30
    attn = values[1:-1:2]
    mlp = values[2:-1:2]
    assert names[1:-1:2] == [f"{layer} attn" for layer in range(1, 31)]
    np.testing.assert_allclose(attn, heads.sum(axis=1), atol=1e-4)

    # the caption's parts are the charts' (to its 3 decimals), and they add up to the logit
    got = ADD_UP.search(said.inner_text())
    assert got, said.inner_text()
    embed, head_sum, mlp_sum, rest, total, logit = (float(v) for v in got.groups())
    assert abs(embed - values[0]) <= 5e-4
    assert abs(head_sum - heads.sum()) <= 5e-4 + 1e-5 * heads.size
    assert abs(mlp_sum - mlp.sum()) <= 5e-4 + 1e-5 * mlp.size
    assert abs(rest - values[-1]) <= 5e-4
    assert abs(total - values.sum()) <= 5e-4 + 1e-5 * values.size
    assert abs(total - logit) <= 2e-3, (total, logit)
    assert abs(logit - c.logit) <= 5e-4
    assert not page.locator('[data-testid="stException"]').count()
    page.close()
