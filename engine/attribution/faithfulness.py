"""How far to trust a map, measured on its own input: ERASER's comprehensiveness and
sufficiency (DeYoung et al. 2020, sec. 4), each an AOPC over the top 10/20/50% of the words.

comprehensiveness = mean_k [f(x) − f(x without its top k% words)]: high when the words the map
ranks first carry f. sufficiency = mean_k [f(x) − f(only the top k% words)]: low when they
alone suffice. ERASER reads the predicted class's probability; here the differences are in
units of f (a log-probability or log-odds), as the map is. A removed word's pieces are replaced
by the objective's absent embedding (the one occlusion and IG's baseline use), so positions do
not move. The same numbers for random orders of the same words say what chance gives."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from engine.attribution.methods import f_of
from engine.attribution.objective import Objective

SHARES = (0.10, 0.20, 0.50)
RANDOM_ORDERS = 5        # random orders averaged for the chance baseline
SEED = 0


@dataclass(frozen=True)
class Faithfulness:
    comprehensiveness: float | None
    sufficiency: float | None
    random_comprehensiveness: float | None
    random_sufficiency: float | None


UNMEASURED = Faithfulness(None, None, None, None)


def top_count(n_words: int, share: float) -> int:
    """How many words the top `share` is: at least one, rounded up (ERASER's k% of tokens)."""
    return max(1, math.ceil(share * n_words - 1e-9))


def ranked(words: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The scored words, highest score first (ties: the earlier word first)."""
    return words[np.lexsort((words, -scores[words]))]


def random_orders(words: np.ndarray, count: int = RANDOM_ORDERS,
                  seed: int = SEED) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.permutation(words) for _ in range(count)]


def _removed(obj: Objective, words: np.ndarray) -> torch.Tensor:
    """obj.x with the pieces of `words` replaced by the absent embedding."""
    drop = torch.from_numpy(np.isin(obj.slot_words, words)).to(obj.x.device)
    return torch.where(drop[None, :, None], obj.absent, obj.x)


def measure(obj: Objective, f_x: float, scores: np.ndarray) -> Faithfulness:
    """scores: [words] of the map. Every variant in one batched set of forward passes."""
    words = obj.scored_words
    orders = [ranked(words, scores)] + random_orders(words)
    variants = []
    for order in orders:
        for share in SHARES:
            top = order[:top_count(len(order), share)]
            variants.append(_removed(obj, top))                      # x \ top
            variants.append(_removed(obj, np.setdiff1d(words, top)))  # top only
    f = f_of(obj, torch.cat(variants)).double().cpu().numpy()
    drops = (f_x - f).reshape(len(orders), len(SHARES), 2).mean(axis=1)     # (orders, 2)
    chance = drops[1:].mean(axis=0)
    return Faithfulness(float(drops[0, 0]), float(drops[0, 1]), float(chance[0]),
                        float(chance[1]))
