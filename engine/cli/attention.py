"""`ctxlens attention`: attention maps of every layer and head for one text, as an NPZ."""
from __future__ import annotations

import sys

import numpy as np

from engine.cli.inputs import check_output
from engine.cli.options import model_args
from engine.errors import EngineError


def add(sub) -> None:
    a = sub.add_parser("attention", help="attention maps of every layer and head for one text")
    model_args(a)
    a.add_argument("--text", required=True)
    a.add_argument("--output", required=True, help="output .npz: attentions [layers, heads, "
                   "tokens, tokens] (rows attend to columns), tokens, token_to_word, words, "
                   "layers, layer_names, model")
    a.add_argument("--words", action="store_true", help="also write the maps merged to whole "
                   "words: word_attentions [layers, heads, entries, entries] and word_labels, "
                   "word_special [entries]; the entries are the words and, each on its own, the "
                   "special tokens; attention to a word is the sum over its pieces, from a word "
                   "the mean over its pieces (Clark et al. 2019)")
    a.add_argument("--query-key", action="store_true", help="also write what the scores are "
                   "made of: query and key [layers, heads, tokens, head_dim], scale [layers] "
                   "causal, allowed [layers, tokens, tokens] and softcap [layers] (NaN: none), so "
                   "that attentions = softmax(cap(query @ keyᵀ × scale)) over the allowed keys, "
                   "cap(s) = softcap·tanh(s / softcap)")
    a.set_defaults(run=cmd_attention)


def cmd_attention(args, engine_cls) -> int:
    out = check_output(args.output)
    engine = engine_cls(device=args.device, dtype=args.dtype)
    enc = engine.encode(args.model, [args.text], attentions=True)[0]
    if enc.attentions is None:
        from engine.families import FAMILIES

        fam = FAMILIES[enc.family]
        can = ", ".join(f.label for f in FAMILIES.values() if "attention" in f.capabilities)
        raise EngineError(f"{args.model} is {fam.a_label} model: it has no attention maps "
                          f"(models that have: {can})")
    n = enc.attentions.shape[0]
    extra = {}
    if args.words:
        extra.update(word_maps(enc))
    if args.query_key:      # before anything is written: a refused layer leaves no file
        extra.update(_query_keys(engine, args.model, args.text, n))
    # attentions[i] is block i + 1's (the app's "layer i + 1"; hidden layer 0 is the embeddings)
    np.savez(out, attentions=enc.attentions, tokens=np.array(enc.tokens),
             token_to_word=enc.token_to_word, words=np.array(enc.words),
             model=np.array(args.model), layers=np.arange(1, n + 1, dtype=np.int64),
             layer_names=np.array(enc.layer_names[1:n + 1] or
                                  [f"layer {i}" for i in range(1, n + 1)]), **extra)
    print(f"wrote {out}: {enc.attentions.shape[0]} layers x {enc.attentions.shape[1]} heads x "
          f"{len(enc.tokens)} tokens"
          + (f" ({extra['word_attentions'].shape[-1]} word entries)" if args.words else "")
          + (" with queries and keys" if args.query_key else ""), file=sys.stderr)
    return 0


def word_maps(enc) -> dict[str, np.ndarray]:
    """The NPZ arrays of `attention --words` (engine.analysis.attention.word_attention)."""
    from engine.analysis.attention import word_attention, word_labels

    labels, special = word_labels(enc.tokens, enc.words, enc.token_to_word)
    return {"word_attentions": word_attention(enc.attentions, enc.token_to_word,
                                              len(enc.words), tokens=enc.tokens),
            "word_labels": np.array(labels), "word_special": special}


def _query_keys(engine, model: str, text: str, n_layers: int) -> dict[str, np.ndarray]:
    """The NPZ arrays of `attention --query-key`: every layer's QueryKey, stacked."""
    from engine.errors import UnsupportedPrediction

    per_layer = []
    for layer in range(1, n_layers + 1):
        try:
            per_layer.append(engine.query_key(model, text, layer))
        except UnsupportedPrediction as e:
            raise UnsupportedPrediction(f"--query-key: layer {layer} of {model}: {e}") from e
    return {"query": np.stack([qk.queries for qk in per_layer]).astype(np.float32),
            "key": np.stack([qk.keys for qk in per_layer]).astype(np.float32),
            "scale": np.array([qk.scale for qk in per_layer], np.float64),
            "causal": np.array(per_layer[0].causal),
            # where each query may look (padding, causal order, sliding windows) and the
            # soft-cap applied to the scores (NaN: none), so softmax is rebuilt exactly
            "allowed": np.stack([qk.allowed_mask() for qk in per_layer]),
            "softcap": np.array([qk.softcap or np.nan for qk in per_layer], np.float64)}
