"""What the Benchmarks page draws: results/benchmarks.json, the tables and per-layer charts that
`python -m bench.docs` writes from results/*.json beside docs/reproductions.md and
docs/performance.md (bench/views.py builds both, so the page and the docs print the same cells).

The page reads data, never the bench: bench/ is the lab's and the installed package leaves it
out. Cells come with their text already formatted; only json here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DATA = "benchmarks.json"


@dataclass(frozen=True)
class Est:
    """A measured value as a number column shows it (shown: ×100 for a share; None when not
    measured), its 95% interval as text ("" without one), and the cell's full text."""
    shown: float | None
    interval: str
    text: str
    digits: int
    percent: bool
    signed: bool
    unit: str


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[str]
    rows: list[list]           # Est, str, int or float cells
    texts: list[list[str]]     # each cell as the docs print it
    note: str = ""


@dataclass(frozen=True)
class Series:
    """One model's values per layer on a relative-depth axis, and their 95% intervals."""
    model: str
    names: list[str]
    x: list[float]
    y: list[float]
    lo: list[float] | None = None
    hi: list[float] | None = None


@dataclass(frozen=True)
class Reference:
    """A published value (or range): x0..x1 on the chart's axis, lo..hi its values."""
    label: str
    x0: float
    x1: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Chart:
    title: str
    y_title: str
    x_title: str
    series: list[Series]
    references: list[Reference]
    lines: dict[str, float]    # label -> y (chance, baselines)


@dataclass(frozen=True)
class Topic:
    key: str                   # results/<key>.md is its full report
    title: str
    what: str
    data: list[str]            # the results/*.json it is drawn from
    command: str               # how to measure it again
    tables: list[Table]
    charts: list[Chart]
    measured: list[str]        # each entry's `meta` in words
    note: str = ""


@dataclass(frozen=True)
class Benchmarks:
    findings: Table | None     # each published finding on each model, shown above the tabs
    topics: list[Topic]


def _cell(v):
    return Est(**v) if isinstance(v, dict) else v


def _table(t: dict) -> Table:
    return Table(t["title"], t["columns"], [[_cell(v) for v in row] for row in t["rows"]],
                 t["texts"], t["note"])


def _chart(c: dict) -> Chart:
    return Chart(c["title"], c["y_title"], c["x_title"], [Series(**s) for s in c["series"]],
                 [Reference(**r) for r in c["references"]], c["lines"])


def load(results: Path) -> Benchmarks:
    """Nothing measured (no topics) when the file is absent, as in an installed package."""
    path = results / DATA
    if not path.exists():
        return Benchmarks(None, [])
    d = json.loads(path.read_text())
    topics = [Topic(t["key"], t["title"], t["what"], t["data"], t["command"],
                    [_table(x) for x in t["tables"]], [_chart(c) for c in t["charts"]],
                    t["measured"], t["note"]) for t in d["topics"]]
    return Benchmarks(_table(d["findings"]) if d["findings"] else None, topics)
