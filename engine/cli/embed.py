"""`ctxlens embed`: word vectors of every layer (or some) for a file of sentences."""
from __future__ import annotations

import sys

import numpy as np

from engine.cli.inputs import check_output, read_sentences
from engine.cli.options import layers_arg, model_args
from engine.cli import report
from engine.errors import EngineError
from engine.result import POOLINGS
from engine.text import TextError

# sentences encoded per engine call: enough for the length sort to leave little padding, few
# enough for the progress bar to move
EMBED_CHUNK = 1024


def add(sub) -> None:
    e = sub.add_parser("embed", help="word vectors of every layer for a file of sentences")
    model_args(e)
    e.add_argument("--input", required=True, help="text file, one sentence per line")
    e.add_argument("--output", required=True, help="output .npz")
    e.add_argument("--pool", default="mean", choices=POOLINGS,
                   help="how a word's sub-word tokens become one vector (default mean)")
    e.add_argument("--pretokenized", action="store_true",
                   help="take whitespace-separated tokens as the words")
    e.add_argument("--batch-size", type=int, default=32)
    e.add_argument("--layers", type=layers_arg, default=None, metavar="0,3,6",
                   help="keep only these layers (0 = the embeddings; default: every layer); a "
                        "transformer then stops after the highest one asked for")
    e.add_argument("--compile", action="store_true",
                   help="run a transformer through torch.compile: a minute to compile, then "
                        "faster batches (for large files on a GPU)")
    e.set_defaults(run=cmd_embed)


def embed_pooled(engine, model: str, texts, batch_size: int, pool: str,
                 progress=lambda n: None, layers=None, workers: int | None = None) -> list:
    """Word vectors (layers, W, D) per text, in input order: every layer, or `layers` only.
    Texts go to the engine shortest
    first, so every batch holds texts of near-equal length (sorting within small chunks left a
    quarter of the time to padding); `progress(n)` after each chunk. `workers`: chunks in
    flight at once (default: two on a GPU, one on a CPU)."""
    from concurrent.futures import ThreadPoolExecutor

    from engine.families.base import resolve_device

    order = sorted(range(len(texts)), key=lambda i: len(texts[i].text))
    out: list = [None] * len(texts)
    chunks = [order[s:s + EMBED_CHUNK] for s in range(0, len(order), EMBED_CHUNK)]

    def run(idx):
        return engine.word_vectors(model, [texts[i] for i in idx], batch_size=batch_size,
                                   layers=layers, pool=pool)

    # On a GPU two chunks are in flight: while one waits for its kernels (the GIL released),
    # the other tokenises and pools on the host, which would otherwise leave the GPU idle.
    # On a CPU the model's own threads already use every core.
    if workers is None:
        workers = 2 if resolve_device(engine.options.device) == "cuda" else 1
    with ThreadPoolExecutor(workers) as ex:
        for idx, vecs in zip(chunks, ex.map(run, chunks)):
            for i, v in zip(idx, vecs):
                out[i] = v
            progress(len(idx))
    return out


def cmd_embed(args, engine_cls) -> int:
    from engine.text import to_word_text

    if args.batch_size < 1:
        raise EngineError("--batch-size must be at least 1")
    sentences = read_sentences(args.input)
    out = check_output(args.output)
    texts = []
    for i, s in enumerate(sentences):
        try:
            texts.append(to_word_text(s, args.pretokenized))
        except TextError as e:
            raise TextError(f"sentence {i + 1}: {e}") from e
    # traced: a batch run in a fresh process starts from the model's cached graph
    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0,
                        traced=not args.compile, compile=args.compile)
    engine.hidden_state_encoder(args.model, layers=args.layers)
    with report.progress(len(texts), "sent", f"embed {args.model}", "embedded") as step:
        per_text = embed_pooled(engine, args.model, texts, args.batch_size, args.pool,
                                step, args.layers)
    vectors, sent_idx, word_idx, words = [], [], [], []
    for i, (wv, text) in enumerate(zip(per_text, texts)):
        vectors.append(wv.transpose(1, 0, 2))        # (W, L+1, D)
        sent_idx += [i] * len(text.words)
        word_idx += list(range(len(text.words)))
        words += list(text.words)
    np.savez(out, vectors=np.concatenate(vectors).astype(np.float32, copy=False),
             sentence_index=np.array(sent_idx, np.int64), word_index=np.array(word_idx, np.int64),
             words=np.array(words), sentences=np.array(sentences), model=np.array(args.model),
             pooling=np.array(args.pool),
             layers=np.array(args.layers if args.layers is not None
                             else range(vectors[0].shape[1]), np.int64))
    print(f"wrote {out}: {len(words)} words from {len(texts)} sentences, "
          f"{vectors[0].shape[1]} layers x {vectors[0].shape[2]} dims", file=sys.stderr)
    return 0
