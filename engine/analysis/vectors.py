"""Small vector helpers every analysis shares (numpy only: the app imports them too)."""
from __future__ import annotations

import numpy as np

EPS = 1e-12


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows (last axis) scaled to unit length, in float64 so means of cosines stay exact; an
    all-zero row stays zero instead of becoming NaN."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), EPS)
