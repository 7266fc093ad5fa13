"""The Benchmarks page renders results/ for users: a tab per report linked from
results/README.md, each opening with what it measures, its tables as sortable data, its plots,
and the method prose in an expander that names no file a clone lacks."""
from __future__ import annotations

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "app" / "pages" / "benchmarks.py"
PATH = re.compile(r"(?<![\w/.])((?:[\w.-]+/)+[\w.-]+\.(?:md|py|json|tsv|toml|png|txt))")


def _linked() -> list[str]:
    readme = (ROOT / "results" / "README.md").read_text()
    return [n for n in re.findall(r"\]\(([\w\-.]+\.md)\)", readme)
            if (ROOT / "results" / n).exists()]


def _tables(markdown: str) -> int:
    lines = markdown.splitlines()
    return sum(1 for a, b in zip(lines, lines[1:]) if a.strip().startswith("|")
               and re.fullmatch(r"\|?[\s:|-]+\|?", b.strip()))


def test_page_shows_a_tab_per_linked_report_with_an_explanation_tables_and_plots():
    linked = _linked()
    at = AppTest.from_file(str(PAGE), default_timeout=30).run()
    assert not at.exception
    assert len(at.tabs) == 1 + len(linked)
    # every tab opens with what it measures, for a reader rather than the developer
    assert all(tab.info and len(tab.info[0].value) > 60 for tab in at.tabs)
    images = [p for n in linked for p in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)",
                                                    (ROOT / "results" / n).read_text())]
    assert len(at.get("image")) == len(images)
    # every markdown table of every report is a dataframe (the findings table once)
    expected = sum(_tables((ROOT / "results" / n).read_text()) for n in ["README.md"] + linked)
    assert len(at.dataframe) == expected
    first = at.dataframe[0].value
    assert "reproduced?" in first.columns and "**" not in "".join(first["reproduced?"])


def test_page_leads_with_the_reproduced_findings_table_and_names_no_missing_file():
    readme = (ROOT / "results" / "README.md").read_text()
    at = AppTest.from_file(str(PAGE), default_timeout=30).run()
    assert not at.exception
    if "## Published findings: reproduced?" in readme.splitlines():
        assert [h.value for h in at.subheader] == ["Published findings: reproduced?"]
    shown = "\n".join(m.value for m in at.markdown) + "\n".join(c.value for c in at.caption)
    for path in PATH.findall(shown):
        if not ((ROOT / path).exists() or (ROOT / "results" / path).exists()):
            assert f"{path} (not in this repository)" in shown, path
    assert "shared/reference-numbers.md" not in shown.replace(
        "shared/reference-numbers.md (not in this repository)", "")


def test_number_columns_sort_as_numbers_and_keep_their_intervals():
    """Every cell was text, so a click on "top-5 (95% CI)" sorted 87.9%, 8.7%, 8.1%, 69.8%...
    A column of numbers in one unit is now numeric, its interval in a column beside it."""
    lines = (ROOT / "results" / "cloze.md").read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("| model | how it fills"))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in lines[start + 2:end]]
    at = AppTest.from_file(str(PAGE), default_timeout=30).run()
    assert not at.exception
    shown = next(d.value for d in at.dataframe if list(d.value.columns)[:3] ==
                 ["model", "how it fills", "top-1"])
    assert str(shown["top-5"].dtype) == "float64"
    assert shown["top-5"].tolist() == [float(r[3].split("%")[0]) for r in rows]
    assert shown["top-5: 95% CI"].tolist() == [r[3].split(" ", 1)[1] for r in rows]
    # an interval is no note: "(L4)" and "at L2 (majority ...)" go to a note column
    pos = next(d.value for d in at.dataframe if "best layer: note" in d.value.columns)
    assert all(not ci or (ci.startswith("[") and ci.endswith("]"))
               for ci in pos["best layer: 95% CI"])
    # a cell that is not one number with an interval stays as written ("3 of 5")
    summary = at.dataframe[1].value
    assert not str(summary["published findings reproduced?"].dtype).startswith("float")
    assert summary["published findings reproduced?"].tolist()[0].endswith("yes")
