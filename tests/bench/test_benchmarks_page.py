"""The Benchmarks page renders results/: one tab per report linked from results/README.md."""
from __future__ import annotations

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "app" / "pages" / "benchmarks.py"


def test_page_shows_a_tab_per_linked_report_and_their_plots():
    readme = (ROOT / "results" / "README.md").read_text()
    linked = [n for n in re.findall(r"\]\(([\w\-.]+\.md)\)", readme)
              if (ROOT / "results" / n).exists()]
    at = AppTest.from_file(str(PAGE), default_timeout=30).run()
    assert not at.exception
    assert len(at.tabs) == 1 + len(linked)
    images = [p for n in linked for p in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)",
                                                    (ROOT / "results" / n).read_text())]
    assert len(at.get("image")) == len(images)


def test_page_leads_with_the_reproduced_findings_table():
    readme = (ROOT / "results" / "README.md").read_text()
    at = AppTest.from_file(str(PAGE), default_timeout=30).run()
    assert not at.exception
    heading = "## Published findings: reproduced?"
    if heading not in readme.splitlines():
        assert not [h for h in at.subheader if "reproduced" in h.value]
        return
    assert [h.value for h in at.subheader] == ["Published findings: reproduced?"]
    first = at.markdown[0].value
    assert "| reproduced? |" in first
    # shown once above the tabs: the Summary tab (README.md) leaves it out
    assert not any("| reproduced? |" in m.value for m in at.tabs[0].markdown)
