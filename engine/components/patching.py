"""Activation patching (Vig et al. 2020; Meng et al. 2022's causal tracing): run the model on a
clean text and on a corrupted one, then rerun the corrupted one with a single (layer, position)
cell of one site taken from the clean run, for every cell; f of each rerun says how much of
the clean prediction that cell alone carries.

f is the attribution's (engine/attribution/explain.py `objective_of`): the target's
log-probability at the read position, minus the contrast's when there is one. The corrupted run
is a second text of the same token length, or the clean text with some words' input embeddings
noised (Meng et al.: Gaussian noise of 3 × the std of the input embedding matrix, f averaged
over seeds).

Sites (engine/families/hf/parts.py reaches them): "residual", the residual stream (row 0 the
embeddings' output, row l block l's output); "attention", the input of each layer's attention
output projection, i.e. all heads' outputs side by side at that position (not the projection's
output: the same cell, before the projection's bias); "mlp", each feed-forward block's output.

The cells run in batches: each row of a batch is the corrupted input with a different cell
patched (`grid`), in chunks sized so a chunk's activations stay under half the weights' bytes
(peak memory about 1.5 × a plain forward's). A cell whose activation the corruption left as
it is (a decoder's positions before the first corrupted token) is not run: putting back what
is there gives the corrupted run's f."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from engine.attribution.explain import objective_of
from engine.components.result import SITES, Patching
from engine.errors import EngineError, UnsupportedPrediction
from engine.families.base import Transformer
from engine.families.hf.parts import hooked
from engine.families.hooks import BEFORE, on_this_thread
from engine.memory import rows_per_pass
from engine.text import MASK, WordText, to_word_text

NOISE_SCALE = 3.0          # Meng et al. 2022: noise of 3 × the embeddings' std
MAX_SEEDS = 100


@dataclass(frozen=True)
class Layout:
    """Where reading k's positions sit relative to reading 0's (the grid's columns): reading
    0 has `width` pieces from position `start` on that depend on the word read (a masked LM's
    blank pieces, a decoder's target pieces before its last); reading k of length L_k has
    width + L_k − L_0 there, and the positions after them shift by L_k − L_0."""

    start: int
    width: int
    length: int

    def positions(self, length: int) -> np.ndarray:
        """For a reading of `length` tokens: the position of each grid column, −1 where the
        reading has none."""
        t = np.arange(self.length)
        shift = length - self.length
        inside = (t >= self.start) & (t < self.start + self.width)
        out = np.where(t < self.start, t, t + shift)
        keep = ~inside | (t - self.start < self.width + shift)
        return np.where(keep, out, -1)

    @classmethod
    def single(cls, length: int) -> "Layout":
        return cls(start=length, width=0, length=length)


@contextmanager
def _counting(model):
    """Yields a list whose last item is the index of the model's current forward pass on this
    thread (an objective with a contrast runs one pass per reading)."""
    calls = [-1]

    def count(module, args, kwargs):
        calls[0] += 1

    with on_this_thread((model, BEFORE, count)):
        yield calls


def _rows(h, batch: int):
    """h as [batch, tokens, width]: OPT's feed-forward runs on the tokens flattened
    ([batch × tokens, width])."""
    return h if h.dim() == 3 else h.view(batch, -1, h.shape[-1])


def _edit_kw(site: str) -> str:
    return {"residual": "resid", "attention": "attn_in", "mlp": "mlp_out"}[site]


def rows_of(sites, site: str) -> int:
    return sites.n_layers + 1 if site == "residual" else sites.n_layers


def record(model, sites, site: str, value, x):
    """f(x) (a float) and the activations of `site` on x: per forward pass (reading) a dict,
    row -> [tokens, width]."""
    import torch

    acts: list[dict[int, object]] = []
    with torch.no_grad(), _counting(model) as calls:
        def keep(layer, h):
            while len(acts) <= calls[0]:
                acts.append({})
            acts[calls[0]][layer] = _rows(h, 1)[0].detach().clone()
            return None

        with hooked(sites, **{_edit_kw(site): keep}):
            f = float(value(x)[0])
    return f, acts


def chunk_size(model, n_tokens: int, n_cells: int) -> int:
    """Rows per batch: a chunk's activations (hidden states, the feed-forward's inner width,
    attention maps, the logits read) kept under half the weights' bytes, without gradients
    (engine/memory.py, which sizes the attributions' passes too)."""
    return rows_per_pass(model, n_tokens, n_cells)


def unchanged(acts, bad_acts, layout: Layout) -> np.ndarray:
    """[rows, columns] True where the clean and corrupted runs' activations are the same in
    every reading (a decoder's positions before the first corrupted token, the embeddings of
    the tokens left alone): patching such a cell puts back what is there, so its f is the
    corrupted run's, exactly."""
    rows = len(acts[0])
    same = np.ones((rows, layout.length), bool)
    for a, b in zip(acts, bad_acts):
        at = layout.positions(next(iter(a.values())).shape[0])
        for layer in range(rows):
            if a[layer].shape != b[layer].shape:
                same[layer] = False
                continue
            eq = (a[layer] == b[layer]).all(-1).cpu().numpy()
            same[layer] &= np.where(at >= 0, eq[np.clip(at, 0, None)], True)
    return same


def grid(model, sites, site: str, value, x_corrupt, acts, layout: Layout,
         chunk: int | None = None, corrupt: tuple | None = None,
         window: int = 1) -> np.ndarray:
    """[rows, columns] f of `value` on the corrupted input x_corrupt (1, N, D) with each cell
    (row, column) of `site` replaced by the clean run's (`acts`, from `record`); with a
    window, rows row … row + window − 1 at that column together (Meng et al. restore 10
    layers of MLPs or attention at once). corrupt: the corrupted run's (f, acts) from
    `record`; then the cells `unchanged` leaves alone take its f without a run."""
    import torch

    rows, cols = rows_of(sites, site), layout.length
    out = np.empty((rows, cols), np.float64)
    skip = np.zeros((rows, cols), bool)
    if corrupt is not None:
        same = unchanged(acts, corrupt[1], layout)
        skip = np.array([same[r:r + window].all(0) for r in range(rows)])
        out[skip] = corrupt[0]
    cells = np.argwhere(~skip)                                        # (n, 2) row, column
    size = chunk or chunk_size(model, cols, max(len(cells), 1))
    maps = [layout.positions(next(iter(a.values())).shape[0]) for a in acts]
    device = x_corrupt.device
    for lo in range(0, len(cells), size):
        part = cells[lo:lo + size]                                    # (B, 2) row, column
        with torch.no_grad(), _counting(model) as calls:
            def put(layer, h):
                k = calls[0]
                at = maps[k][part[:, 1]]
                sel = np.nonzero((part[:, 0] <= layer) & (layer < part[:, 0] + window)
                                 & (at >= 0))[0]
                if not len(sel):
                    return None
                new = _rows(h, len(part)).clone()
                pos = torch.from_numpy(at[sel]).to(device)
                new[torch.from_numpy(sel).to(device), pos] = acts[k][layer][pos].to(h.dtype)
                return new.view(h.shape)

            with hooked(sites, **{_edit_kw(site): put}):
                f = value(x_corrupt.expand(len(part), -1, -1))
        out[part[:, 0], part[:, 1]] = f.detach().double().cpu().numpy()
    return out


def _layout(obj, text: WordText, kind: str, length: int) -> Layout:
    """The grid's columns are reading 0's pieces; see Layout."""
    if kind == "masked":
        blank = np.nonzero(obj.piece_to_word == text.one_mask())[0]
        return Layout(start=int(blank[0]), width=len(blank), length=length)
    width = len(obj.target_pieces) - 1        # a decoder reads its target's first pieces too
    return Layout(start=length - width, width=width, length=length)


def noised_slots(obj, text: WordText, noise_words: str) -> np.ndarray:
    """The indices into obj.x of the pieces of `noise_words`, a run of words of the text (the
    first run that matches, case as typed)."""
    want = noise_words.split()
    if not want:
        raise EngineError("name at least one word of the clean text to noise")
    for w in want:
        if w == MASK:
            raise EngineError(f"{MASK} is the blank the prediction is read at; noise other "
                              "words")
        if w not in text.words:
            raise EngineError(f"{w!r} is not a word of the clean text (its words: "
                              f"{' '.join(text.words)})")
    n = len(want)
    start = next((i for i in range(len(text.words) - n + 1)
                  if list(text.words[i:i + n]) == want), None)
    if start is None:
        raise EngineError(f"the words {noise_words!r} do not stand together in the clean text "
                          "in that order")
    slots = np.nonzero((obj.slot_words >= start) & (obj.slot_words < start + n))[0]
    if not len(slots):
        raise EngineError(f"the words {noise_words!r} have no pieces this model reads")
    return slots


def embedding_std(model) -> float:
    """The std of every entry of the model's input embedding matrix (the noise's unit)."""
    import torch

    with torch.no_grad():
        return float(model.get_input_embeddings().weight.float().std())


def _check(adapter, site: str, kind: str, corrupt, noise_words, seeds: int) -> None:
    if site not in SITES:
        raise EngineError(f"site must be one of {', '.join(SITES)}, not {site!r}")
    # a transformer is patched on its own head's prediction: a decoder's next word, a masked
    # LM's blank
    if not isinstance(adapter, Transformer):
        raise UnsupportedPrediction(f"{adapter.info.family} models have no transformer blocks "
                                    "to patch")
    if kind != adapter.own_kind:
        how = ("a decoder is patched on its next word: end the texts where the word comes "
               "and use kind 'next'" if adapter.own_kind == "next" else
               "a masked LM is patched on its blank: put one [MASK] in each text and use "
               "kind 'masked'")
        raise UnsupportedPrediction(f"kind {kind!r} is not supported for this model; {how}")
    if (corrupt is None) == (not noise_words):
        raise EngineError("give either a corrupted text or the words to noise, not both "
                          "and not neither")
    if not 1 <= seeds <= MAX_SEEDS:
        raise EngineError(f"seeds must be between 1 and {MAX_SEEDS}, not {seeds}")


def patch(adapter, clean: str, corrupt: str | None, target: str, contrast: str | None = None,
          site: str = "residual", kind: str = "next", noise_words: str | None = None,
          seeds: int = 5, chunk: int | None = None, window: int = 1) -> Patching:
    """Every cell of `site` patched from the clean run into the corrupted one (see the module
    docstring); `chunk` fixes the rows per batch (default: chunk_size); `window`: each cell
    restores that many rows from its own on (`grid`)."""
    import torch

    _check(adapter, site, kind, corrupt, noise_words, seeds)
    sites = adapter.parts()
    model = sites.model
    if not 1 <= window <= rows_of(sites, site):
        raise EngineError(f"the window must be between 1 and {rows_of(sites, site)} rows, "
                          f"not {window}")
    text = to_word_text(clean)
    obj = objective_of(adapter, text, target, contrast, kind)
    f_clean, acts = record(model, sites, site, obj.value, obj.x)
    layout = _layout(obj, text, kind, len(obj.pieces))
    if corrupt is not None:
        bad = objective_of(adapter, to_word_text(corrupt), target, contrast, kind)
        if len(bad.pieces) != len(obj.pieces):
            raise EngineError(f"the clean text reads as {len(obj.pieces)} tokens and the "
                              f"corrupted text as {len(bad.pieces)}: the sentences must "
                              "tokenize alike (the same number of tokens) to be patched "
                              "position by position")
        if kind == "masked" and _layout(bad, to_word_text(corrupt), kind,
                                        len(bad.pieces)).start != layout.start:
            raise EngineError("the [MASK] sits at another token in the corrupted text than "
                              "in the clean one: put it at the same place")
        f_corrupt, bad_acts = record(model, sites, site, bad.value, bad.x)
        patched = grid(model, sites, site, bad.value, bad.x, acts, layout, chunk,
                       (f_corrupt, bad_acts), window)
        corruption = f"the text {corrupt!r}"
    else:
        slots = noised_slots(obj, text, noise_words)
        std = embedding_std(model)
        fs, grids = [], []
        for seed in range(seeds):
            gen = torch.Generator().manual_seed(seed)
            noise = torch.randn((len(slots), obj.x.shape[-1]), generator=gen)
            x = obj.x.clone()
            x[0, torch.from_numpy(slots).to(x.device)] += (NOISE_SCALE * std * noise).to(
                x.device, x.dtype)
            f, bad_acts = record(model, sites, site, obj.value, x)
            grids.append(grid(model, sites, site, obj.value, x, acts, layout, chunk,
                              (f, bad_acts), window))
            fs.append(f)
        f_corrupt, patched = float(np.mean(fs)), np.mean(grids, axis=0)
        corruption = (f"Gaussian noise of σ = {NOISE_SCALE:g} × {std:.3g} (the std of the "
                      f"input embedding matrix) on the input embeddings of {noise_words!r} "
                      f"({len(slots)} pieces); f averaged over {seeds} seeds")
    if window > 1:
        corruption += f"; each cell restores {window} rows from its own on"
    return Patching(model_id=adapter.info.model_id, kind=kind, site=site,
                    target=target.strip(), contrast=contrast.strip() if contrast else None,
                    f_means=obj.f_means, tokens=tuple(obj.pieces),
                    patched=patched.astype(np.float32), clean=f_clean, corrupt=f_corrupt,
                    corruption=corruption)
