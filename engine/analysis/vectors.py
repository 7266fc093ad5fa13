"""Small vector helpers every analysis shares (numpy only: the app imports them too)."""
from __future__ import annotations

import numpy as np

EPS = 1e-12
TIE_TOLERANCE = 1e-6   # cosines this close are the same vector up to float rounding


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows (last axis) scaled to unit length, in float64 so means of cosines stay exact; an
    all-zero row stays zero instead of becoming NaN."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), EPS)


def identical_groups(x: np.ndarray, tol: float = 1e-5) -> list[list[int]]:
    """Rows of x [n, dim] that are the same vector (to `tol` relative to their norm), as groups
    of two or more row indices: points a plot would draw on top of each other."""
    x = np.asarray(x, dtype=np.float64)
    scale = np.maximum(np.linalg.norm(x, axis=-1), EPS)
    seen: set[int] = set()
    groups = []
    for i in range(len(x)):
        if i in seen:
            continue
        same = [j for j in range(i, len(x)) if j not in seen and
                np.abs(x[j] - x[i]).max() <= tol * max(scale[i], scale[j])]
        seen.update(same)
        if len(same) > 1:
            groups.append(same)
    return groups
