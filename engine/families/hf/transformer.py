"""What the Hugging Face adapters (bert.py, gpt.py) give the component views through the
protocol (base.Transformer): their parts, found once per loaded model, a plain forward pass on
a text, and a next word's pieces. A mixin over an adapter's `model`, `tokenizer`, `max_tokens`
and `own_kind`."""
from __future__ import annotations

import threading
from typing import Sequence

from engine.families.base import NextPieces, Sites
from engine.families.hf import tokens
from engine.families.hf.parts import sites_of
from engine.text import WordText

# one finding of the parts per adapter, whichever session asks first
_PARTS_LOCK = threading.Lock()


class HFTransformer:
    _parts: Sites | None = None

    def parts(self) -> Sites:
        with _PARTS_LOCK:
            if self._parts is None:
                self._parts = sites_of(self.model)
            return self._parts

    def forward_text(self, text: str) -> int:
        import torch

        model = self.model
        ids = torch.tensor([self.tokenizer(text)["input_ids"]],
                           device=next(model.parameters()).device)
        # a decoder keeps no key/value cache it would not use; some encoders take no
        # use_cache argument at all
        extra = {"use_cache": False} if self.own_kind == "next" else {}
        model(input_ids=ids, attention_mask=torch.ones_like(ids), **extra)
        return ids.shape[1]

    def next_pieces(self, text: WordText, words: Sequence[str]) -> NextPieces:
        return tokens.next_pieces(self.tokenizer, text, words, self.max_tokens)
