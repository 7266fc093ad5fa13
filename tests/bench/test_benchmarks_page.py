"""The Benchmarks page draws results/*.json for users (as results/benchmarks.json, which
bench/views.py writes from them; never by parsing the Markdown reports): a tab per topic whose JSON is there, each opening with what it measures,
its tables as sortable data with intervals beside the numbers, per-layer charts with the
published values, and the method folded away, naming no file a clone lacks."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from bench import views

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "app" / "pages" / "benchmarks.py"
PATH = re.compile(r"(?<![\w/.])((?:[\w.-]+/)+[\w.-]+\.(?:md|py|json|tsv|toml|png|txt))")


@pytest.fixture(scope="module")
def at():
    page = AppTest.from_file(str(PAGE), default_timeout=60).run()
    assert not page.exception
    return page


def published_tables() -> dict[str, dict[str, int]]:
    """Topic title -> table title -> rows, as the committed docs/reproductions.md and
    performance.md list them (tests/bench/test_docs.py keeps them equal to results/*.json):
    what the page must show, read without bench/views.py, which writes what the page draws."""
    out: dict[str, dict[str, int]] = {}
    topic = table = None
    for name in ("reproductions.md", "performance.md"):
        for line in (ROOT / "docs" / name).read_text().splitlines():
            if line.startswith("## "):
                topic, table = line[3:], None
                out[topic] = {}
            elif line.startswith("### "):
                table = line[4:]
                out[topic][table] = -2                  # the header row and the |---| line
            elif line.startswith("|") and table is not None:
                out[topic][table] += 1
    return out


def test_page_shows_a_tab_per_topic_with_an_explanation_tables_and_charts(at):
    published = published_tables()
    assert sorted(t.label for t in at.tabs) == sorted(published)
    # every tab opens with what it measures, for a reader rather than the developer
    assert all(tab.info and len(tab.info[0].value) > 60 for tab in at.tabs)
    # the findings table once above the tabs ...
    first = at.dataframe[0].value
    assert "reproduced?" in first.columns and "**" not in "".join(first["reproduced?"])
    assert len(first) == published["Summary"].pop("Published findings: reproduced?")
    # ... then, in each topic's tab, every table the docs publish, under its title, with its
    # rows (a tab may show more: the findings again, each model's per-layer table)
    for tab in at.tabs:
        titles = [m.value.strip("*") for m in tab.markdown if m.value.startswith("**")]
        shown = {title: len(df.value) for title, df in zip(titles, tab.dataframe)}
        assert len(titles) == len(tab.dataframe), tab.label
        for title, rows in published[tab.label].items():
            assert shown.get(title) == rows, (tab.label, title, shown)
    # charts drawn from the JSON, not the PNGs of the reports: each per-layer topic draws its
    # layers with a line per model measured
    assert not at.get("image")
    models = {r["model"] for r in json.loads((ROOT / "results" / "layers.json").read_text())}
    for tab in at.tabs:
        if tab.label not in ("Word senses", "How contextual is each layer?", "Part of speech"):
            continue
        charts = [json.loads(c.proto.spec) for c in tab.get("plotly_chart")]
        assert charts, tab.label
        for c in charts:
            lines = {t["name"] for t in c["data"] if t.get("mode") == "lines+markers"}
            assert lines == models, (tab.label, c["layout"]["title"]["text"])


def test_per_layer_charts_are_the_json_values_with_intervals_and_published_points(at):
    layers = json.loads((ROOT / "results" / "layers.json").read_text())
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    pos = next(c for c in charts if "Part-of-speech" in c["layout"]["title"]["text"])
    lines = {t["name"]: t for t in pos["data"] if t.get("mode") == "lines+markers"}
    assert set(lines) == {r["model"] for r in layers}
    for r in layers:
        assert lines[r["model"]]["y"] == pytest.approx(r["pos"]["accuracy"])
    bands = [t for t in pos["data"] if t.get("fill") == "toself"]
    assert len(bands) == len(layers)         # each model's 95% interval
    geometry = next(c for c in charts if c["layout"]["title"]["text"].startswith("Anisotropy"))
    stars = [t for t in geometry["data"] if t.get("marker", {}).get("symbol") == "star"]
    assert any(t["y"] == [0.978] for t in stars)     # GPT-2's top layer, Ethayarajh 2019


def test_the_findings_lead_with_their_published_numbers_and_no_missing_file_is_named(at):
    assert [h.value for h in at.subheader] == ["Published findings: reproduced?"]
    findings = at.dataframe[0].value
    assert str(findings["measured difference"].dtype) == "float64"
    assert all(ci.startswith("[") and ci.endswith("]")
               for ci in findings["measured difference: 95% CI"])
    assert any("0.978" in p for p in findings["published"])
    assert any("69.0" in p for p in findings["published"])     # Peters et al., ELMo layer 2
    shown = "\n".join(m.value for m in at.markdown) + "\n".join(c.value for c in at.caption)
    shown += "\n".join(str(v) for d in at.dataframe for col in d.value.columns
                       for v in d.value[col] if isinstance(v, str))
    for path in PATH.findall(shown):
        if not ((ROOT / path).exists() or (ROOT / "results" / path).exists()):
            assert f"{path} (not in this repository)" in shown, path
    assert "shared/reference-numbers.md" not in shown.replace(
        "shared/reference-numbers.md (not in this repository)", "")


def test_number_columns_sort_as_numbers_and_keep_their_intervals(at):
    """A click on "top-5" once sorted 87.9%, 8.7%, 8.1%, 69.8%... as text. A column of
    measurements in one unit is numeric, its interval in a column beside it, as the JSON has
    them."""
    rows = sorted(json.loads((ROOT / "results" / "cloze.json").read_text()),
                  key=lambda r: -r["top5"]["rate"])
    shown = next(d.value for d in at.dataframe if list(d.value.columns)[:3] ==
                 ["model", "how it fills", "top-1"])
    assert str(shown["top-5"].dtype) == "float64"
    assert shown["top-5"].tolist() == pytest.approx([100 * r["top5"]["rate"] for r in rows])
    assert shown["top-5: 95% CI"].tolist() == [
        f"[{100 * r['top5']['ci'][0]:.1f}%, {100 * r['top5']['ci'][1]:.1f}%]" for r in rows]
    pos = next(d.value for d in at.dataframe if "best layer index" in d.value.columns)
    assert all(ci.startswith("[") and ci.endswith("]") for ci in pos["best layer: 95% CI"])
    # a cell that is not one number with an interval stays as written ("3 yes")
    summary = at.dataframe[1].value
    assert not str(summary["published findings reproduced?"].dtype).startswith("float")
    assert summary["published findings reproduced?"].tolist()[0].endswith("yes")


def test_cloze_gains_are_bench_cloze_s_own():
    """The page and the docs recompute the paired gains from the items in cloze.json with
    bench.cloze's bootstrap (same resamples, same seed): the same intervals as cloze.md."""
    from bench import cloze

    rows = {(r["model"], r["sides"]): r for r in
            json.loads((ROOT / "results" / "cloze.json").read_text())}
    a, b = rows[("minilm-l6-mlm", "both")], rows[("minilm-l6-mlm", "both-rescored")]
    mine = views.paired_gain(views._hits(a), views._hits(b))
    theirs = cloze.paired_gain(cloze._hits(a), cloze._hits(b))
    assert (mine.value, mine.lo, mine.hi) == (theirs["gain"], *theirs["ci"])
    later = {(r["model"], r["sides"]): r for r in
             json.loads((ROOT / "results" / "cloze_replication.json").read_text())}
    c = later[("minilm-l6-mlm", "both")]
    mine = views.set_difference(views._hits(a), views._hits(c))
    theirs = cloze.difference(cloze._hits(a), cloze._hits(c))
    assert (mine.value, mine.lo, mine.hi) == (theirs["difference"], *theirs["ci"])


def test_every_tab_says_when_and_where_its_numbers_were_measured(at):
    """Dates, machines and commands come from each JSON entry's `meta`."""
    captions = [c.value for tab in at.tabs for c in tab.caption]
    for topic in views.available():
        if views.view(topic.key).measured:
            assert any(c.startswith("Measured ") for c in captions)
    assert any("python -m bench --only layers" in c for c in captions)
