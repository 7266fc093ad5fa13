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
    block_words: np.ndarray | None = None  # (N,) words per block when blocks differ (padded chunks)

    def batch(self, step: int, batch_size: int) -> tuple[torch.Tensor, int]:
        """Batch `step`: a pure function of (seed, step); each epoch is a fresh permutation."""
        n = len(self.blocks)
        idx = []
        for k in range(step * batch_size, (step + 1) * batch_size):
            epoch, pos = divmod(k, n)
            perm = np.random.default_rng(self.seed * 1000 + epoch).permutation(n)
            idx.append(int(perm[pos]))
        if self.block_words is not None:
            return self.blocks[idx], round(float(self.block_words[idx].sum()))
        return self.blocks[idx], round(self.words_per_block * batch_size)


def cut_blocks(stream: list[int], length: int) -> torch.Tensor:
    n = len(stream) // length
    return torch.tensor(stream[: n * length], dtype=torch.long).view(n, length)


def sentence_chunks(docs: list[list[list[int]]], doc_words: list[list[int]], length: int,
                    single_prob: float, seed: int) -> tuple[list[list[int]], np.ndarray]:
    """Consecutive whole sentences of one document packed greedily into chunks of at most
    `length` tokens (a longer sentence is cut, its words shared out by tokens), so a chunk ends
    where a sentence ends. With probability `single_prob` a chunk holds one sentence only: the
    short inputs BERT also trained on (Devlin et al. 2019, appendix A.2), which is what the app
    and the pseudo-perplexity feed the model. Returns the chunks and their corpus words."""
    rng = np.random.default_rng(seed)
    chunks: list[list[int]] = []
    words: list[float] = []
    for sents, counts in zip(docs, doc_words):
        cur: list[int] = []
        cur_words = 0.0
        single = False
        for ids, n in zip(sents, counts):
            pieces = [ids[i:i + length] for i in range(0, len(ids), length)] or [[]]
            for piece in pieces:
                w = n * len(piece) / max(len(ids), 1)
                if cur and (single or len(cur) + len(piece) > length):
                    chunks.append(cur)
                    words.append(cur_words)
                    cur, cur_words = [], 0.0
                if not cur:
                    single = bool(rng.random() < single_prob)
                cur += piece
                cur_words += w
        if cur:
            chunks.append(cur)
            words.append(cur_words)
    return chunks, np.asarray(words)
