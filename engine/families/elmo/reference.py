"""The bilm-tf reference protocol (shared/fixtures/elmo-reference/README.md), as a function the
tests and the benchmarks both call: 10 batches of 3 sentences (batch i = sentence i of lists
0, 1, 2), LSTM states carried per batch row from one batch to the next, top layer compared
with sentence boundaries removed."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.families.base import resolve_dtype
from engine.families.elmo.chars import batch_char_ids
from engine.families.elmo.weights import load_allennlp

ATOL, RTOL = 1e-6, 1e-7  # numpy.testing.assert_allclose with atol=1e-6 (its default rtol)


@dataclass(frozen=True)
class FixtureComparison:
    impl: str
    n_values: int
    max_abs_diff: float
    n_over_atol: int          # values with |diff| > 1e-6 outright
    within_tolerance: bool    # every |diff| <= ATOL + RTOL * |expected|


def _expected(directory: Path, n_lists: int) -> list[list[np.ndarray]]:
    import h5py

    out = []
    for k in range(n_lists):
        with h5py.File(directory / f"lm_embeddings_{k}.hdf5", "r") as f:
            # (2, n, proj): forward and backward halves -> [forward; backward] (n, 2*proj)
            out.append([np.concatenate(list(f[str(i)][...]), axis=-1) for i in range(len(f))])
    return out


def compare_with_fixture(directory: Path, impl: str = "fast",
                         device: str = "cpu") -> FixtureComparison:
    directory = Path(directory)
    sentences = json.loads((directory / "sentences.json").read_text())
    expected = _expected(directory, len(sentences))
    # float32 as an engine on that device runs it (on CUDA: no TF32 convolutions)
    bilm = load_allennlp(directory, progress=False, impl=impl).to(
        device=device, dtype=resolve_dtype("float32", device))
    state, diffs, over = None, [], []
    with torch.inference_mode():
        for i in range(len(sentences[0])):
            words = [s[i].split() for s in sentences]
            out = bilm(torch.from_numpy(batch_char_ids(words)).to(device), state=state)
            state = out.state
            for b, (w, e) in enumerate(zip(words, (x[i] for x in expected))):
                actual = out.layers[-1, b, 1:1 + len(w)].float().cpu().numpy()
                if actual.shape != e.shape:
                    raise ValueError(f"batch {i} row {b}: shape {actual.shape} != {e.shape}")
                diff = np.abs(actual - e)
                diffs.append(diff.ravel())
                over.append((diff > ATOL + RTOL * np.abs(e)).ravel())
    d = np.concatenate(diffs)
    return FixtureComparison(impl=impl, n_values=int(d.size), max_abs_diff=float(d.max()),
                             n_over_atol=int((d > ATOL).sum()),
                             within_tolerance=not bool(np.concatenate(over).any()))
