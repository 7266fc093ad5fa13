"""What a generation returns (engine.generation.generate): CPU numpy in frozen dataclasses that
check their own shapes, like engine/result.py, so they pickle for st.cache_data and carry no
torch to a page."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from engine.result import numbered_layers

Stop = Literal["eos", "max_tokens"]

PROB_CONVENTION = ("prob, entropy and top: the model's own softmax over its whole vocabulary "
                   "at temperature 1 (float32, natural logs); sampled_prob: the probability "
                   "the token was drawn with, softmax(logits / temperature)")
RANK_CONVENTION = ("layer_ranks: the generated token's rank (1 = top) at each layer by the "
                   "logit lens (that layer's hidden state at the predicting position through "
                   "the final norm and the output head; the top layer is the model's own "
                   "logits); ties are ranked by how many tokens score strictly higher")


def _require(cond: bool, name: str, why: str) -> None:
    if not cond:
        raise ValueError(f"{name}: {why}")


@dataclass(frozen=True, eq=False)
class Generation:
    """A decoder's continuation of a prompt, one row per generated token (G of them).

    prompt_ids / prompt_tokens: the prompt as the model read it (with its BOS, if any).
    token_ids / tokens: the generated pieces as the tokenizer spells them (" bank" carries its
    space), the stop token included when `stopped == "eos"`; `text` is their decoding after
    the prompt, special tokens left out.
    prob, entropy [G]; top_tokens [G][k], top_probs [G, k] and top_ids [G, k] (int64): see
    PROB_CONVENTION.
    sampled_prob [G]: with sampling only (None when greedy).
    layer_ranks [G, layers+1] (int64): see RANK_CONVENTION; None when the model's final norm
    or output head could not be found (no logit lens).
    contexts [G]: the text before each generated token (prompt + earlier tokens) and
    context_round_trips [G]: whether the tokenizer reads that text back as exactly
    context_ids(i); where it does not (a byte piece cut mid-character, a start token the
    tokenizer does not add), explain context_ids(i) instead.
    seed: the seed that was used (drawn and recorded when none was given).
    """

    model_id: str
    prompt: str
    prompt_ids: tuple[int, ...]
    prompt_tokens: tuple[str, ...]
    token_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    text: str
    prob: np.ndarray
    entropy: np.ndarray
    top_tokens: tuple[tuple[str, ...], ...]
    top_probs: np.ndarray
    top_ids: np.ndarray
    layer_ranks: np.ndarray | None
    contexts: tuple[str, ...]
    context_round_trips: tuple[bool, ...]
    stopped: Stop
    sample: bool = False
    temperature: float = 1.0
    seed: int | None = None
    sampled_prob: np.ndarray | None = None
    layer_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        g = len(self.token_ids)
        _require(len(self.prompt_ids) == len(self.prompt_tokens) > 0, "prompt_tokens",
                 "one per prompt id, at least one")
        _require(g >= 1 and len(self.tokens) == g, "tokens", "one per generated id, at least one")
        for name in ("prob", "entropy") + (("sampled_prob",) if self.sample else ()):
            a = getattr(self, name)
            _require(isinstance(a, np.ndarray) and a.shape == (g,) and a.dtype == np.float32,
                     name, f"must be float32 [{g}]")
        _require(self.sample == (self.sampled_prob is not None), "sampled_prob",
                 "given exactly when sampling")
        _require(self.top_probs.ndim == 2 and self.top_probs.shape[0] == g and
                 all(len(t) == self.top_probs.shape[1] for t in self.top_tokens) and
                 len(self.top_tokens) == g, "top_probs", "must be [tokens, k] like top_tokens")
        _require(self.top_ids.shape == self.top_probs.shape and self.top_ids.dtype == np.int64,
                 "top_ids", "must be int64 [tokens, k] like top_probs")
        _require(len(self.contexts) == len(self.context_round_trips) == g, "contexts",
                 "one per generated token")
        _require(self.stopped in ("eos", "max_tokens"), "stopped", "'eos' or 'max_tokens'")
        if self.layer_ranks is not None:
            r = self.layer_ranks
            _require(r.ndim == 2 and r.shape[0] == g and r.dtype == np.int64 and
                     bool((r >= 1).all()), "layer_ranks", "must be int64 [tokens, layers+1], >= 1")
            if not self.layer_names:
                object.__setattr__(self, "layer_names", numbered_layers(r.shape[1]))
            _require(len(self.layer_names) == r.shape[1], "layer_names", "one name per layer")

    def context_ids(self, i: int) -> tuple[int, ...]:
        """The ids the model read before generated token i: what an attribution of that token
        explains (prompt and tokens 0..i-1)."""
        return self.prompt_ids + self.token_ids[:i]

    def to_json(self) -> dict:
        """The JSON of `ctxlens generate` (issue #54 part 5): tokens, text, and per step prob,
        entropy, top and layer_ranks, with the conventions they follow."""
        steps = []
        for i, tok in enumerate(self.tokens):
            step = {"token": tok, "token_id": self.token_ids[i], "prob": float(self.prob[i]),
                    "entropy": float(self.entropy[i]),
                    "top": [{"token": t, "token_id": int(k), "prob": float(p)}
                            for t, k, p in zip(self.top_tokens[i], self.top_ids[i],
                                               self.top_probs[i])],
                    "layer_ranks": (None if self.layer_ranks is None
                                    else [int(r) for r in self.layer_ranks[i]])}
            if self.sample:
                step["sampled_prob"] = float(self.sampled_prob[i])
            steps.append(step)
        return {"model": self.model_id, "prompt": self.prompt,
                "prompt_tokens": list(self.prompt_tokens), "tokens": list(self.tokens),
                "text": self.text, "stopped": self.stopped,
                "decoding": ({"method": "sampling", "temperature": self.temperature,
                              "seed": self.seed} if self.sample else {"method": "greedy"}),
                "layer_names": list(self.layer_names), "steps": steps,
                "conventions": {"prob": PROB_CONVENTION, "layer_ranks": RANK_CONVENTION}}


@dataclass(frozen=True, eq=False)
class GenerationAttention:
    """Attention over prompt + generated tokens from one forward of the whole sequence:
    attentions [layers, heads, n, n] (rows attend to columns, causal), the first n_prompt
    tokens the prompt's. Rows n_prompt.. are the generated tokens attending to the prompt and
    to the tokens generated before them (bertviz#131)."""

    model_id: str
    tokens: tuple[str, ...]
    n_prompt: int
    attentions: np.ndarray

    def __post_init__(self) -> None:
        a, n = self.attentions, len(self.tokens)
        _require(isinstance(a, np.ndarray) and a.ndim == 4 and a.shape[2:] == (n, n) and
                 a.dtype == np.float32, "attentions", f"must be float32 [layers, heads, {n}, {n}]")
        _require(0 < self.n_prompt < n, "n_prompt", "the prompt and at least one generated token")
