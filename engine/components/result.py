"""What the component analyses return (engine/components/): typed, numpy only, so the app and
the CLI read them without torch."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SITES = ("residual", "attention", "mlp")
ABLATION_MODES = ("zero", "mean")


@dataclass(frozen=True, eq=False)
class HeadImportance:
    """For one prediction, each head's importance two ways (Michel et al. 2019): `knocked`,
    how much f drops when that head alone is knocked out (f − f with it zeroed), and
    `gradient`, |∂f/∂ξ_h| for a gate ξ_h = 1 on each head's output; `spearman`, their rank
    correlation over all heads."""

    model_id: str
    kind: str                  # "masked" | "next" | "previous"
    target: str
    contrast: str | None
    f: float                   # f with every head on
    f_means: str
    knocked: np.ndarray        # [layers, heads]
    gradient: np.ndarray       # [layers, heads]
    spearman: float


@dataclass(frozen=True, eq=False)
class Patching:
    """Activation patching: `patched[l, t]` is f of the corrupted run with cell (l, t) of
    `site` taken from the clean run. Residual: rows = layers + 1 (row 0 the embeddings' output,
    row l block l's output, as `embed` numbers them); attention and mlp: rows = layers (row
    l-1 = block l's). `tokens`: the pieces the model read, as its tokenizer spells them."""

    model_id: str
    kind: str
    site: str
    target: str
    contrast: str | None
    f_means: str
    tokens: tuple[str, ...]
    patched: np.ndarray        # [rows, tokens]
    clean: float
    corrupt: float
    corruption: str            # how the corrupted run was made, in words

    @property
    def restored(self) -> np.ndarray:
        """(patched − corrupt) / (clean − corrupt): the share of f each cell restores."""
        gap = self.clean - self.corrupt
        return (self.patched - self.corrupt) / (gap if gap else np.nan)


@dataclass(frozen=True, eq=False)
class Components:
    """Direct logit attribution: each part's direct contribution to the target's logit (or the
    target − contrast difference) through the final norm with its scale frozen at this input.
    embed + heads.sum() + mlp.sum() + rest == logit (to float rounding)."""

    model_id: str
    target: str
    contrast: str | None
    tokens: tuple[str, ...]
    heads: np.ndarray          # [layers, heads]
    mlp: np.ndarray            # [layers]
    embed: float
    rest: float                # biases and whatever no component owns
    logit: float               # the model's own logit of the target (or the difference)
    logit_means: str           # what `logit` is, in words (e.g. before Gemma-2's soft-cap)

    @property
    def total(self) -> float:
        return float(self.embed + self.heads.sum() + self.mlp.sum() + self.rest)
