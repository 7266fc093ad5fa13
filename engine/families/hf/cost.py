"""What one pass of a Hugging Face model costs (engine/budget.py): its anatomy, read off the
loaded model, and how many tokens a text is for its tokenizer."""
from __future__ import annotations

from engine.budget import Anatomy
from engine.text import WordText


def anatomy_of(model) -> Anatomy:
    """Every parameter but the embedding tables' (token, position and type tables are
    lookups, no multiply; a head tied to the token table is applied at the positions read
    only, as the views slice it), the layers and the hidden size."""
    import torch

    cfg = model.config
    total = sum(p.numel() for p in model.parameters())
    tables = {id(p): p.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding)
              for p in m.parameters(recurse=False)}
    lookup = sum(tables.values())
    param = next(model.parameters())
    return Anatomy(weights=max(total - lookup, 1), n_layers=int(cfg.num_hidden_layers),
                   width=int(cfg.hidden_size), device=param.device.type)


def count_tokens(tokenizer, text: WordText) -> int:
    """The tokens `text` is with the tokenizer's special tokens (what a pass reads)."""
    return len(tokenizer(text.text)["input_ids"])
