"""The Benchmarks page (app/pages/benchmarks.py) in a real browser."""
from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.helpers import BROWSER_MARKS, SHOTS, idle

pytestmark = BROWSER_MARKS


def test_benchmarks_page_is_for_users(server, browser):
    """Issue 18, item 13, and issue 46, item 3, in the browser: the Benchmarks page was
    developer prose citing files a clone lacks, then Markdown tables parsed back into data; each
    topic is now a tab drawn from results/*.json that opens with what it measures, its tables
    as sortable dataframes, per-layer charts beside the published values, and its method
    folded away. Saves assets/screenshots/benchmarks.png (`make screenshots`)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/benchmarks")
    page.wait_for_selector("h1:has-text('Benchmarks')")
    page.locator('[data-testid="stDataFrame"]').first.wait_for()   # the findings
    idle(page)
    assert page.get_by_role("heading", name="Published findings: reproduced?").count() == 1
    # a per-layer chart from layers.json, with Ethayarajh's published values on it
    page.get_by_role("tab", name="How contextual is each layer?").click()
    geometry = page.get_by_role("tabpanel").filter(has_text="Ethayarajh (2019)").first
    chart = geometry.locator(".js-plotly-plot").first
    expect(chart).to_contain_text("GPT-2 (Ethayarajh 2019)")
    # the tab's explanation at the top of the window, its first chart below it
    geometry.locator('[data-testid="stAlert"]').first.evaluate(
        "e => e.scrollIntoView({block: 'start'})")
    expect(chart).to_be_in_viewport()
    page.screenshot(path=str(SHOTS / "benchmarks.png"))
    page.get_by_role("tab", name="Filling a blank").click()
    panel = page.get_by_role("tabpanel").filter(has_text="Everyday blanks").first
    expect(panel).to_be_visible()
    assert panel.locator('[data-testid="stDataFrame"]').count() >= 1
    method = panel.locator("details").filter(has_text="How it was measured")
    assert method.count() == 1 and method.get_attribute("open") is None
    shown = panel.inner_text()
    assert "|---" not in shown and "../shared" not in shown
    # the GPU report (results/gpu.json) has its own tab that says what MFU is before its table
    page.get_by_role("tab", name="GPU").click()
    gpu = page.get_by_role("tabpanel").filter(has_text="model FLOP utilisation").first
    expect(gpu).to_be_visible()
    assert gpu.locator('[data-testid="stDataFrame"]').count() >= 1
    assert "|---" not in gpu.inner_text()
    assert not page.locator('[data-testid="stException"]').count()
    page.close()
