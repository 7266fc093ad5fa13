"""The layer grid page (app/pages/grid.py) in a real browser."""
from __future__ import annotations

import json
import re
import tomllib

from playwright.sync_api import expect

from tests.e2e.helpers import BROWSER_MARKS, ROOT, SHOTS, _download, idle, rerun

pytestmark = BROWSER_MARKS


def test_layer_grid_click_links_every_panel_and_fills_the_side_panel(server, browser, tmp_path):
    """Layers side by side: one panel per layer; clicking a point rings it in every panel and
    the side panel names its sentence and its nearest neighbours; the grid exports."""
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/grid")
    page.wait_for_selector("text=/'mouse', 8 points/ >> visible=true")
    idle(page)
    plot = page.locator(".js-plotly-plot:visible").filter(has_text="(baseline)").first
    m = re.search(r"(\d+) of (\d+) layers", plot.locator(".gtitle").text_content())
    shown, total = int(m.group(1)), int(m.group(2))
    assert shown == total == plot.locator(".annotation-text").count()
    points = plot.locator(".scatterlayer .trace .points path")
    assert points.count() == 8 * shown
    with rerun(page):
        points.nth(0).click(force=True)
    expect(page.get_by_text("Nearest to", exact=False).first).to_be_visible()
    page.wait_for_selector("text=/1 selected in .*, read at/ >> visible=true")
    body = page.locator("body").inner_text()
    assert "Nearest to" in body and "(sentence " in body
    sentence = int(re.search(r"\(sentence (\d+)\)", body).group(1))
    preset = tomllib.loads((ROOT / "assets" / "presets.toml").read_text())["presets"]["mouse"]
    assert preset["sentences"][sentence - 1][0] in body       # the side panel names it
    # ringed in every panel of the redrawn grid: black outlines, one per panel
    plot = page.locator(".js-plotly-plot:visible").filter(has_text="(baseline)").first
    ringed = plot.evaluate("el => el.data.flatMap(t => [].concat(t.marker.line.color))"
                           ".filter(c => c === 'black').length")
    assert ringed == shown
    assert not page.locator('[data-testid="stException"]').count()
    page.screenshot(path=str(SHOTS / "grid.png"), full_page=True)
    png = _download(page, "Export grid-", "PNG", tmp_path)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    # the HTML export is this grid, standalone: the same title, traces and points as the
    # figure on the page, and plotly.js inside the file rather than fetched from a CDN
    html = _download(page, "Export grid-", "HTML", tmp_path).decode()
    data, layout = _exported_figure(html)
    drawn = plot.evaluate("el => ({title: el.layout.title.text, xy: el.data.map(t => [t.x, t.y]"
                          ".map(v => v == null ? null : ArrayBuffer.isView(v) ? Array.from(v)"
                          " : v))})")
    # (Streamlit's chart theme draws titles in bold on the page)
    assert layout["title"]["text"] == re.sub(r"</?b>", "", drawn["title"])
    exported = [[_values(t.get("x")), _values(t.get("y"))] for t in data]
    assert exported == [[_values(x), _values(y)] for x, y in drawn["xy"]]
    assert sum(len(x) for x, _ in exported) >= 8 * shown
    assert not re.search(r"<script[^>]+src=", html) and "plotly.js v" in html


def _values(v) -> list:
    """A trace's coordinates as a list, whether plain or plotly's {dtype, bdata} encoding."""
    import base64

    import numpy as np

    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist()
    return list(v or [])


def _exported_figure(html: str) -> tuple[list, dict]:
    """The data and layout a standalone plotly HTML file draws: Plotly.newPlot(id, data,
    layout, config), read as JSON."""
    decode = json.JSONDecoder().raw_decode
    at = html.index(",", html.index("Plotly.newPlot(")) + 1
    at = len(html) - len(html[at:].lstrip())
    data, at = decode(html, at)
    at = html.index(",", at) + 1
    layout, _ = decode(html, len(html) - len(html[at:].lstrip()))
    return data, layout


def test_grid_clicks_add_to_the_selection_when_asked(server, browser):
    """The caption promised that shift-click adds, but the grid is redrawn after every click
    and plotly's selection goes with it: each click replaced the selection. "Clicks add" adds
    a point, and a second click on it takes it out again."""
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/grid?grid_add=True")
    page.wait_for_selector("text=/'mouse', 8 points/ >> visible=true")
    idle(page)

    def click(n: int) -> None:
        # points of the top layer's panel (the last traces): the baseline's coincide
        plot = page.locator(".js-plotly-plot:visible").filter(has_text="(baseline)").first
        with rerun(page):
            plot.locator(".scatterlayer .trace .points path").nth(n).click(force=True)

    click(-1)
    page.wait_for_selector("text=/1 selected in .*, read at/ >> visible=true")
    click(-2)
    page.wait_for_selector("text=/2 selected in .*, read at/ >> visible=true")
    page.wait_for_url(re.compile(r"grid_sel=\d+%3A\d+%2C\d+%3A\d+(&|$)"))
    click(-2)
    page.wait_for_selector("text=/1 selected in .*, read at/ >> visible=true")
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def test_stacked_3d_grids_stay_within_the_browsers_webgl_contexts(server, browser):
    """Three models stacked in 3D drew 3 + 8 + 7 = 18 WebGL scenes; Chromium keeps 16 and
    blanked the oldest (the first model's baseline)."""
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    lost = []
    page.on("console", lambda m: lost.append(m.text) if "WebGL" in m.text else None)
    page.goto(f"{server}/grid?grid_3d=True&grid_all=True")
    page.wait_for_selector("text=/'mouse', 8 points/ >> visible=true")
    # every model's grid drawn: three titled charts, each with its panels' WebGL scenes
    page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')].filter(e "
                           "=> /'mouse', 8 points/.test(e.layout?.title?.text ?? '') && "
                           "e.querySelector('.gl-container canvas')).length === 3")
    idle(page)
    scenes = page.evaluate("() => document.querySelectorAll('.js-plotly-plot .gl-container "
                           "canvas').length")
    titles = page.locator(".js-plotly-plot .gtitle").evaluate_all(
        "els => els.map(e => e.textContent)")
    assert len([t for t in titles if "'mouse', 8 points" in t]) == 3, titles
    panels = [int(re.search(r"(\d+) of \d+ layers", t).group(1)) for t in titles]
    assert sum(panels) <= 15 and max(panels) == 5, titles     # 3 + 5 + 5 (was 3 + 8 + 7)
    assert 0 < scenes <= 16 and not [m for m in lost if "Too many" in m], (scenes, lost)
    page.close()


def test_layer_grid_panel_titles_do_not_run_into_each_other_on_a_phone(server, browser):
    """At 390 px the four panels of a row are ~80 px wide and "char CNN (baseline)" ran into
    "biLSTM 1"; the chart's own title ran off the screen."""
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(f"{server}/grid?grid_all=True")
    page.wait_for_selector("text=/'mouse', 8 points/ >> visible=true")
    charts = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text="points"))
    expect(charts.nth(2)).to_be_visible()          # the three models' grids
    idle(page)
    for c in range(3):
        boxes = charts.nth(c).locator(".annotation-text").evaluate_all(
            "els => els.map(e => { const r = e.getBoundingClientRect();"
            " return [e.textContent, r.left, r.right, r.top, r.bottom]; })")
        assert len(boxes) >= 2, boxes
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                same_row = a[3] < b[4] and b[3] < a[4]
                assert not (same_row and a[1] < b[2] and b[1] < a[2]), (a, b)
        title = charts.nth(c).locator(".gtitle").evaluate(
            "e => { const r = e.getBoundingClientRect(); return [r.bottom, r.right]; }")
        right = charts.nth(c).evaluate("e => e.getBoundingClientRect().right")
        assert title[1] <= right + 1, (title, right)
        assert all(title[0] <= b[3] for b in boxes), (title, boxes)  # above the panel titles
    page.close()
