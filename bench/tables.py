"""The Markdown table and the timing interval the results/*.md reports share.

They sit below bench/report.py, which reads bench/views.py: the speed and corpus reports, which
the views read, use them too, so importing them from bench/report.py would close a cycle.
"""
from __future__ import annotations

import numpy as np


def table(headers: list[str], rows: list[list]) -> str:
    def cell(v) -> str:
        if isinstance(v, float):
            return "n/a" if not np.isfinite(v) else f"{v:.3f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def quantile_ci(values, q: float = 50.0) -> tuple[float, float, float]:
    """A percentile of repeated timings and its 95% percentile-bootstrap interval over the
    repeats (scipy.stats.bootstrap, seed 0): (value, low, high)."""
    from scipy.stats import bootstrap

    x = np.asarray(values, dtype=float)
    value = float(np.percentile(x, q))
    if len(x) < 3 or np.ptp(x) == 0:
        return value, value, value
    res = bootstrap((x,), lambda a, axis=-1: np.percentile(a, q, axis=axis),
                    confidence_level=0.95, method="percentile", n_resamples=2000,
                    random_state=0)
    return value, float(res.confidence_interval.low), float(res.confidence_interval.high)
