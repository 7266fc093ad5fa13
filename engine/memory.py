"""How many rows one batched pass takes, chosen by memory: every batched pass (activation
patching's grids, IG's steps, occlusion's and faithfulness's perturbed inputs) runs in batches
whose activations stay under half the weights' bytes, so that the process's peak is about
1.5 × a plain forward's however long the input (a fixed 32 rows of IG on a 127-word sentence
took SmolLM2-135M from 1.3 GB for a plain forward to 6.2 GB).

A row's activations, in bytes (float32: a half-precision model keeps less):
- without gradients, one layer's at a time are alive: T × (6 dim + 2 inner + 2 heads T)
  (hidden states and their norms, the feed-forward's inner width, attention scores and
  weights), and the logits of each position read, 4 × vocabulary each (the logits, their
  float32 copy, the log-softmax);
- with gradients, every layer's are kept for the backward pass: twice one layer's above (what
  autograd saves of each op's inputs and outputs is about that: SmolLM2-135M keeps 131 MB a
  row for 93 tokens, this counts 209 MB), in every layer, and the logits read; an objective
  of two readings (a contrast) keeps both graphs, so twice that.

A small model's half is less than batching needs to be quick (half of elmo-brown's 18 MB is
under one row of a 127-word sentence: IG's 32 steps one a pass take about 2× as long as 32
in one), and its plain forward's peak is mostly the process's own (elmo-brown's plain forward
peaks at 303 MB, MiniLM-MLM's at 532 MB): the attributions give every model at least FLOOR,
as counted here (the counts are upper bounds, 1.5-2.6× what autograd keeps), so at most half
such a peak. Patching's chunks (engine/components/patching.py chunk_size) take half the
weights.
"""
from __future__ import annotations

MAX_ROWS = 512
FLOAT = 4                 # bytes of an activation: float32, an upper bound for half precision
FLOOR = 256 * 2**20       # the least activation budget of an attribution's pass (see above)


def _dims(config) -> tuple[int, int, int, int, int]:
    """(dim, inner, heads, vocabulary, layers) of a transformers config, with GPT-2's names
    and a BERT-base's sizes where the config names none."""
    def first(*names, default):
        for name in names:
            value = getattr(config, name, None)
            if value:
                return int(value)
        return default

    dim = first("hidden_size", "n_embd", default=768)
    return (dim, first("intermediate_size", "n_inner", default=4 * dim),
            first("num_attention_heads", "n_head", default=12),
            first("vocab_size", default=50000), first("num_hidden_layers", "n_layer",
                                                      default=12))


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def row_bytes(model, n_tokens: int, grad: bool = False, reads: int = 1) -> int:
    """Activations of one row of `n_tokens` tokens of a transformers model, `reads` positions'
    logits read (see the module docstring)."""
    dim, inner, heads, vocab, layers = _dims(model.config)
    layer = n_tokens * (6 * dim + 2 * inner + 2 * heads * n_tokens)
    kept = 2 * layers * layer if grad else layer
    return FLOAT * (kept + 4 * vocab * reads)


def rows_within(weights: int, per_row: int, n_rows: int, floor: int = 0) -> int:
    """Rows of one pass among `n_rows`: as many as keep their activations (`per_row` bytes
    each) under half of `weights` bytes, or under `floor` if that is more; at least one, at
    most MAX_ROWS."""
    budget = max(weights // 2, floor)
    return int(max(1, min(n_rows, MAX_ROWS, budget // max(per_row, 1))))


def rows_per_pass(model, n_tokens: int, n_rows: int, grad: bool = False, reads: int = 1,
                  readings: int = 1, floor: int = 0) -> int:
    """Rows of one pass of a transformers model among `n_rows` of `n_tokens` tokens each:
    `grad` with a backward pass (IG), else without; `readings` forward passes per row whose
    graphs are kept together until the backward (a target and its contrast)."""
    per_row = row_bytes(model, n_tokens, grad, reads) * (readings if grad else 1)
    return rows_within(weight_bytes(model), per_row, n_rows, floor)
