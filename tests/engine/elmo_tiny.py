"""A tiny random ELMo checkpoint in AllenNLP's layout, for tests that need an ELMo on disk."""
from __future__ import annotations

from pathlib import Path

import torch

from engine.families.elmo.modules import ElmoBiLm
from engine.families.elmo.weights import Softmax, save_allennlp

TINY_OPTIONS = {
    "lstm": {"dim": 12, "projection_dim": 6, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
             "use_skip_connections": True},
    "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 6], [3, 8]],
                 "n_highway": 2, "n_characters": 262, "max_characters_per_token": 50,
                 "activation": "relu"},
}

TINY_VOCAB = ("<S>", "</S>", "<UNK>", "the", "bank", "river", "money", "of", "a", "is", ".")


def tiny_softmax(proj_dim: int, seed: int, vocab: tuple[str, ...] = TINY_VOCAB) -> Softmax:
    gen = torch.Generator().manual_seed(seed + 1)
    return Softmax(torch.randn(len(vocab), proj_dim, generator=gen),
                   torch.randn(len(vocab), generator=gen), vocab)


def write_tiny_elmo(directory: Path, seed: int = 0, with_softmax: bool = True,
                    options: dict | None = None) -> Path:
    """Write options.json + weights.hdf5 (+ lm_softmax.safetensors, vocab.txt) to directory.

    The weights are uniform in +-0.5 (larger than the trainer's init) so that the LSTM gates
    and the clips are exercised rather than sitting near zero.
    """
    options = options or TINY_OPTIONS
    model = ElmoBiLm.from_options(options, seed=seed, init_scale=0.5)
    softmax = tiny_softmax(options["lstm"]["projection_dim"], seed) if with_softmax else None
    return save_allennlp(model, Path(directory), options, softmax=softmax)
