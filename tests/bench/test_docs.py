"""The docs for their readers (issue 46, item 2): a short README for users with the screenshots
first, made by one command; the measured numbers only in the pages written from
results/*.json; results/README.md without a run log; links that lead somewhere."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from bench import docs, summary, views

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GENERATED = tuple(docs.PAGES)
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
INTERVAL = re.compile(r"\[[+\-−]?\d[\d.,]*%?,\s*[+\-−]?\d[\d.,]*%?\]")


def test_the_generated_docs_are_what_the_json_gives():
    """Every measured number in docs/ comes from results/*.json: reproductions.md and
    performance.md are exactly what `python -m bench.docs` writes from it."""
    for name in GENERATED:
        assert (docs.DOCS / name).read_text() == docs.page(name), \
            f"docs/{name} is stale: run python -m bench.docs"


def test_the_benchmarks_page_data_is_what_the_json_gives():
    """The app's Benchmarks page reads results/benchmarks.json (it ships without bench/): the
    same views the docs print, written by the same command."""
    path = ROOT / "results" / docs.PAGE_DATA
    assert path.read_text() == views.page_json(), f"{path.name} is stale: run python -m bench.docs"


def test_hand_written_pages_quote_no_measurement():
    """A number with an interval belongs to the generated pages; the README and the other
    docs link to them instead of copying (so no copy goes stale)."""
    pages = [README] + [p for p in (ROOT / "docs").glob("*.md") if p.name not in GENERATED]
    for page in pages:
        assert not INTERVAL.findall(page.read_text()), page.name


def test_the_readme_is_short_and_opens_with_the_screenshots():
    text = README.read_text()
    assert len(text.split()) <= 1200
    shots = re.findall(r"!\[[^\]]*\]\((assets/screenshots/[\w-]+\.png)\)", text)
    assert sorted(shots) == sorted(f"assets/screenshots/{p.name}"
                                   for p in (ROOT / "assets" / "screenshots").glob("*.png"))
    # the pictures come before the commands, the CLI and the models
    first_code = text.index("```")
    assert all(text.index(s) < first_code for s in shots)
    assert "make run" in text and "make test" in text and "make screenshots" in text


def test_results_readme_says_what_each_report_is_and_carries_no_run_log():
    text = (ROOT / "results" / "README.md").read_text()
    assert text == summary.readme()
    assert not re.search(r"\b\d{1,2}:\d\d\b", text)          # no clock times
    assert "UTC" not in text and "slower machine" not in text
    for name, _ in summary.REPORTS.items():
        assert f"]({name}.md)" in text


def test_links_in_the_readme_and_docs_lead_to_files():
    for page in [README, ROOT / "results" / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_make_screenshots_runs_every_test_that_takes_one():
    """`make screenshots` makes the README's pictures from the real app: exactly the browser
    tests that write into assets/screenshots/."""
    takers = set()
    for path in sorted((ROOT / "tests" / "e2e").glob("test_*.py")):
        source = path.read_text()
        takers |= {f"{path.relative_to(ROOT)}::{f.name}" for f in ast.parse(source).body
                   if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")
                   and "SHOTS /" in ast.get_source_segment(source, f)}
    makefile = (ROOT / "Makefile").read_text()
    listed = re.search(r"SCREENSHOT_TESTS := ((?:.*\\\n)*.*)", makefile).group(1)
    assert set(listed.replace("\\", " ").split()) == takers
    assert re.search(r"^screenshots: install\n\t.*SCREENSHOT_TESTS", makefile, re.M)
