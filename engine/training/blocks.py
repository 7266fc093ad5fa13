"""Token streams cut into fixed-length blocks, visited in a seeded order (shared by GPT and BERT)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.text import WORD_RE  # the engine's own word definition, so "words" mean the same


def count_words(texts: list[str]) -> int:
    return sum(len(WORD_RE.findall(t)) for t in texts)


@dataclass(frozen=True)
class BlockStream:
    blocks: torch.Tensor       # (N, T) token ids
    words_per_block: float     # corpus words a block covers on average
    seed: int

    def batch(self, step: int, batch_size: int) -> tuple[torch.Tensor, int]:
        """Batch `step`: a pure function of (seed, step); each epoch is a fresh permutation."""
        n = len(self.blocks)
        idx = []
        for k in range(step * batch_size, (step + 1) * batch_size):
            epoch, pos = divmod(k, n)
            perm = np.random.default_rng(self.seed * 1000 + epoch).permutation(n)
            idx.append(int(perm[pos]))
        return self.blocks[idx], round(self.words_per_block * batch_size)


def cut_blocks(stream: list[int], length: int) -> torch.Tensor:
    n = len(stream) // length
    return torch.tensor(stream[: n * length], dtype=torch.long).view(n, length)
