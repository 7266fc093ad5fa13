"""What the component analyses return (engine/components/): typed, numpy only, so the app and
the CLI read them without torch."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SITES = ("residual", "attention", "mlp")
ABLATION_MODES = ("zero", "mean")
# what patching says when the corruption leaves f as it is: every cell's share is 0/0
NOTHING_TO_RESTORE = "the corrupted run gives the same f as the clean one: nothing to restore"
# clean and corrupted f closer than this (relative to their size, or absolutely below 1) are
# the same f: float32 rounding of one forward pass, not a difference to share out
SAME_F = 1e-6


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
    def nothing_to_restore(self) -> bool:
        """Whether the corrupted run gives the clean run's f (a corrupted text equal to the
        clean one, or one the model reads alike): then no cell has a share to restore."""
        gap = abs(self.clean - self.corrupt)
        return not gap > SAME_F * max(1.0, abs(self.clean), abs(self.corrupt))

    @property
    def restore_note(self) -> str | None:
        """The line to say instead of a grid when there is nothing to restore, else None."""
        return NOTHING_TO_RESTORE if self.nothing_to_restore else None

    @property
    def restored(self) -> np.ndarray:
        """(patched − corrupt) / (clean − corrupt): the share of f each cell restores; NaN
        everywhere when there is nothing to restore."""
        if self.nothing_to_restore:
            return np.full(self.patched.shape, np.nan, np.float32)
        return (self.patched - self.corrupt) / (self.clean - self.corrupt)

    @property
    def row_labels(self) -> tuple[str, ...]:
        """Each row's name: residual "embeddings", "layer 1", ...; attention and mlp
        "layer 1", ... (the docstring above: which output each row is)."""
        n = self.patched.shape[0]
        if self.site == "residual":
            return tuple("embeddings" if l == 0 else f"layer {l}" for l in range(n))
        return tuple(f"layer {l + 1}" for l in range(n))

    def arrays(self) -> dict[str, np.ndarray]:
        """The patching as named arrays, what the app's NPZ and `ctxlens patch --output
        x.npz` hold: the grid, its share restored, both f, the axes' labels and the question;
        text as unicode arrays (np.load needs no allow_pickle)."""
        return {"patched": np.asarray(self.patched, np.float32),
                "restored": np.asarray(self.restored, np.float32),
                "clean": np.float32(self.clean), "corrupt": np.float32(self.corrupt),
                "tokens": np.array(self.tokens, dtype=str),
                "rows": np.array(self.row_labels, dtype=str),
                **{k: np.array(v, dtype=str) for k, v in (
                    ("model", self.model_id), ("kind", self.kind), ("site", self.site),
                    ("target", self.target), ("contrast", self.contrast or ""),
                    ("f_means", self.f_means), ("corruption", self.corruption))}}


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
