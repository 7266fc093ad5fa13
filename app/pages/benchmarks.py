"""Benchmarks, for users: what each measurement means, our numbers with their 95% intervals as
sortable tables, per-layer charts beside the published values, and the published number each
finding echoes. Everything is drawn from results/benchmarks.json (app/benchmark_results.py),
which `python -m bench.docs` writes from results/*.json with the tables docs/reproductions.md
and docs/performance.md print; each topic's method is in its report, results/<topic>.md,
which the tab names."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.colors import qualitative

from app import ui
from app.benchmark_results import Chart, Est, Table, Topic, load
from app.safe import safe_label

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
FINDINGS = "Published findings: reproduced?"
_PATH = re.compile(r"(?<![\w/.])((?:[\w.-]+/)+[\w.-]+\.(?:md|py|json|tsv|toml|png|txt|patch))")
_MISSING = ("n/a", "—", "")
COLOURS = qualitative.D3
PUBLISHED_COLOURS = {"ELMo": "#2ca02c", "BERT-base": "#1f77b4", "GPT-2": "#d62728"}


def frame(table: Table) -> tuple[pd.DataFrame, dict]:
    """A table as a dataframe that sorts: a column of measurements in one unit is a number
    column shown in that unit, its interval in a text column beside it ("top-5: 95% CI")."""
    out, config = {}, {}
    for j, name in enumerate(table.columns):
        cells = [row[j] for row in table.rows]
        ests = [c for c in cells if isinstance(c, Est)]
        kinds = {(e.digits, e.percent, e.signed, e.unit) for e in ests}
        if ests and len(kinds) == 1 and all(isinstance(c, Est) or c in _MISSING for c in cells):
            e0 = ests[0]
            out[name] = pd.Series([c.shown if isinstance(c, Est) else None for c in cells],
                                  dtype="float64")
            config[name] = st.column_config.NumberColumn(
                name, format=("%+" if e0.signed else "%") + f".{e0.digits}f"
                + ("%%" if e0.percent else e0.unit.replace("%", "%%")))
            if any(e.interval for e in ests):
                out[f"{name}: 95% CI"] = [c.interval if isinstance(c, Est) else ""
                                          for c in cells]
        elif cells and all(isinstance(c, (int, float)) and not isinstance(c, bool)
                           for c in cells):
            out[name] = pd.Series(cells)
            if all(isinstance(c, int) for c in cells) and max(map(abs, cells)) >= 10_000:
                config[name] = st.column_config.NumberColumn(name, format="localized")
        else:
            out[name] = [clone_paths(row[j]) for row in table.texts]
    return pd.DataFrame(out), config


def show_table(table: Table, title: bool = True) -> None:
    if title:
        st.markdown(f"**{table.title}**")
    if table.note:
        st.caption(clone_paths(table.note))
    data, config = frame(table)
    st.dataframe(data, hide_index=True, width="stretch", column_config=config)


def chart(c: Chart) -> go.Figure:
    """Each model's values per layer with its 95% interval as a band; published values as
    stars (one layer) or shaded spans (a range of layers); baselines as dashed lines."""
    fig = go.Figure()
    shown_refs = set()
    for ref in c.references:
        name = ref.label.split(" (")[0]
        colour = PUBLISHED_COLOURS.get(name, "grey")
        first = ref.label not in shown_refs
        shown_refs.add(ref.label)
        if ref.x0 == ref.x1 and ref.lo == ref.hi:
            fig.add_trace(go.Scatter(x=[ref.x0], y=[ref.lo], mode="markers", name=ref.label,
                                     legendgroup=ref.label, showlegend=first, opacity=0.7,
                                     marker=dict(symbol="star", size=13, color=colour),
                                     hovertemplate=f"{ref.label}<br>%{{y}}<extra></extra>"))
        else:
            fig.add_trace(go.Scatter(x=[ref.x0, ref.x1, ref.x1, ref.x0], y=[ref.lo, ref.lo,
                                     ref.hi, ref.hi], fill="toself", mode="lines",
                                     line=dict(width=0), fillcolor=colour, opacity=0.15,
                                     name=ref.label, legendgroup=ref.label, showlegend=first,
                                     hovertemplate=f"{ref.label}<br>{ref.lo:g}–{ref.hi:g}"
                                     "<extra></extra>"))
    for i, s in enumerate(c.series):
        colour = COLOURS[i % len(COLOURS)]
        name = safe_label(s.model)
        if s.lo is not None and s.hi is not None:
            fig.add_trace(go.Scatter(x=list(s.x) + list(s.x)[::-1], y=list(s.hi) + list(s.lo)[::-1],
                                     fill="toself", mode="lines", line=dict(width=0),
                                     fillcolor=colour, opacity=0.15, legendgroup=name,
                                     showlegend=False, hoverinfo="skip"))
        ci = ([f" [{lo:.3f}, {hi:.3f}]" for lo, hi in zip(s.lo, s.hi)]
              if s.lo is not None and s.hi is not None else [""] * len(s.y))
        fig.add_trace(go.Scatter(x=s.x, y=s.y, mode="lines+markers", name=name,
                                 legendgroup=name, line=dict(color=colour),
                                 customdata=[[safe_label(n), c_] for n, c_ in zip(s.names, ci)],
                                 hovertemplate=f"{name}<br>%{{customdata[0]}}: %{{y:.3f}}"
                                 "%{customdata[1]}<extra></extra>"))
    for label, y in c.lines.items():
        fig.add_hline(y=y, line=dict(dash="dash", color="grey"), annotation_text=label,
                      annotation_position="bottom right")
    fig.update_layout(title=c.title, xaxis_title=c.x_title, yaxis_title=c.y_title, height=420,
                      margin=dict(t=60, b=40), legend=dict(font=dict(size=11)))
    return fig


def clone_paths(text: str) -> str:
    """Notes in the results may name files of the machine that measured (training runs, the
    shared reference notes): a path that is not in this repository is said to be so."""
    def mark(m: re.Match) -> str:
        path = m.group(1)
        found = (ROOT / path).exists() or (RESULTS / path).exists()
        return path if found else f"{path} (not in this repository)"
    return _PATH.sub(mark, text)


def show(topic: Topic) -> None:
    st.info(topic.what)
    for c in topic.charts:
        ui.plotly_chart(chart(c), key=f"bench-{topic.key}-{c.title}")
    for table in topic.tables:
        if topic.key == "summary" and table.title == FINDINGS:
            continue            # shown above the tabs
        show_table(table)
    with st.expander("How it was measured"):
        report = RESULTS / f"{topic.key}.md"
        if report.exists():
            st.markdown(f"The method and every table: `results/{topic.key}.md`. Measured "
                        f"again by `{topic.command}`; the data: "
                        + ", ".join(f"`results/{d}`" for d in topic.data) + ".")
        for line in topic.measured:
            st.caption(clone_paths(f"Measured {line}"))
        if topic.note:
            for para in topic.note.splitlines():
                st.markdown(clone_paths(para))


st.title("Benchmarks")
benchmarks = load(RESULTS)
topics = benchmarks.topics
if not topics:
    st.info("No results yet: run `make bench` (it writes results/).")
else:
    st.caption("What the bundled models show, measured by `make bench`: every accuracy and "
               "similarity with its 95% confidence interval, beside the published finding it "
               "echoes (the published values are in bench/published.py). Tables sort when you "
               "click a column.")
    if benchmarks.findings:
        st.subheader(FINDINGS)
        show_table(benchmarks.findings, title=False)
    tabs = st.tabs([t.title for t in topics])
    for tab, topic in zip(tabs, topics):
        with tab:
            show(topic)
