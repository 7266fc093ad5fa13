"""Issue 47, finding 1, in a real browser: a chart larger than Streamlit's message limit came
back as an exception box ('MessageSizeError: Data of size 519.0 MB exceeds … 200 MB') that no
page guard could catch, since Streamlit refuses the message after the script has run. The
server here takes messages of 2 MB at most, so a 60-word sentence's model view (6 layers x 12
heads of minilm-l6, 3 MB) stands in for SmolLM2's 600-token one."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from playwright.sync_api import expect

from tests.e2e.helpers import FRESH, ONE_MODEL, app_server, BROWSER_MARKS, _goto, idle, warm

pytestmark = BROWSER_MARKS

WORDS = ("the river bank was muddy after the rain and the children walked along it slowly "
         "while their parents talked about money loans and the new bank in town").split()


@pytest.fixture(scope="module")
def small_messages_server(tmp_path_factory, browser):
    log = Path(tempfile.gettempdir()) / f"ctxlens-e2e-long-{os.getpid()}.log"
    with open(log, "w") as out, app_server(
            tmp_path_factory, out, {"STREAMLIT_SERVER_MAX_MESSAGE_SIZE": "2"}) as url:
        warm(browser, url, [("", {**FRESH, **ONE_MODEL})])      # minilm-l6 loaded
        yield url


def test_a_chart_over_the_message_limit_is_one_line_not_an_exception_box(
        small_messages_server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    sentence = " ".join(WORDS * 3)[:400] + " ."
    _goto(page, small_messages_server, "attention", sentences=sentence, target="bank",
          **ONE_MODEL)
    tab = page.get_by_role("tab", name="Model view")
    tab.wait_for()
    idle(page)              # an over-large message becomes its box once the run has ended
    tab.click()
    note = page.get_by_text("too large to send to the browser").first
    expect(note).to_be_visible()
    boxes = page.locator('[data-testid="stException"]')
    assert not boxes.count(), boxes.first.inner_text()[:200]
    # the other views of the same sentence are drawn
    page.get_by_role("tab", name="Heatmap").click()
    expect(page.locator(".js-plotly-plot:visible").first).to_be_visible()
    page.close()
