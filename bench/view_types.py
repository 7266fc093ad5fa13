"""The cells, tables and charts a view of results/*.json is made of (bench/views.py builds
them; views written in their own modules, such as bench/attribution_views.py, too), and
`_measured`, each entry's `meta` in words. Light: dataclasses and numpy."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bench import meta


# -- cells and tables -----------------------------------------------------------------------

@dataclass(frozen=True)
class Est:
    """A measured value and its 95% interval (lo, hi: None without one). percent: a share
    shown ×100 with '%'; signed: a difference, shown with its sign; unit: what follows the
    number (' s', '×', ' ms')."""
    value: float
    lo: float | None = None
    hi: float | None = None
    digits: int = 3
    percent: bool = False
    signed: bool = False
    unit: str = ""

    def shown(self, x: float) -> float:
        return 100 * x if self.percent else x

    def number(self, x: float | None = None) -> str:
        x = self.value if x is None else x
        if x is None or not np.isfinite(x):
            return "n/a"
        sign = "+" if self.signed else ""
        return f"{self.shown(x):{sign}.{self.digits}f}" + ("%" if self.percent else self.unit)

    def interval(self) -> str:
        if self.lo is None or self.hi is None:
            return ""
        return f"[{self.number(self.lo)}, {self.number(self.hi)}]"

    def text(self) -> str:
        ci = self.interval()
        return f"{self.number()} {ci}" if ci else self.number()


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)
    note: str = ""            # how to read it, one or two sentences


@dataclass
class Series:
    """One model's values per layer (x: layer / top layer, so models of any depth share an
    axis) and their 95% intervals."""
    model: str
    family: str
    names: list[str]
    y: list[float]
    lo: list[float] | None = None
    hi: list[float] | None = None
    xs: list[float] | None = None      # another x axis than depth (the chart's x_title)

    @property
    def x(self) -> list[float]:
        if self.xs is not None:
            return self.xs
        top = max(1, len(self.y) - 1)
        return [i / top for i in range(len(self.y))]


@dataclass
class Reference:
    """A published value (or range) for a chart: x from/to on the same relative-depth axis."""
    label: str
    x0: float
    x1: float
    lo: float
    hi: float


@dataclass
class Chart:
    title: str
    y_title: str
    series: list[Series]
    references: list[Reference] = field(default_factory=list)
    lines: dict[str, float] = field(default_factory=dict)     # label -> y (chance, baselines)
    x_title: str = "depth (layer / top layer; 0 = the input embedding)"


@dataclass
class View:
    tables: list[Table] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    measured: list[str] = field(default_factory=list)         # each entry's `meta` in words
    note: str = ""


def _measured(entries, label=lambda e: "") -> list[str]:
    """Each distinct `meta` in words; where entries differ, with the entries it covers."""
    groups: dict[str, list[str]] = {}
    for e in entries:
        line = meta.line(e)
        if line:
            names = groups.setdefault(line, [])
            if label(e) and label(e) not in names:
                names.append(label(e))
    if len(groups) == 1:
        return list(groups)
    return [(f"{', '.join(names)}: " if names else "") + line for line, names in groups.items()]
