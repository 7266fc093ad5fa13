"""`ctxlens` command line: models, embed, attention, predict.

Every failure a user can cause ends as one line on stderr and a non-zero exit, never a traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import EngineError
from engine.result import POOLINGS
from engine.text import TextError, drop_invisible, split_lines, unspaced_note

EXIT_USAGE = 2
EXIT_INTERNAL = 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ctxlens", description="Contextual word embeddings: "
                                "ELMo, GPT and BERT, layer by layer.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("models", help="list the model registry and what is available here")
    # in this order in --help
    for add in (_embed_args, _attention_args, _predict_args, _index_args, _neighbours_args,
                _stats_args, _compare_args):
        add(sub)
    return p


def _model_args(sp) -> None:
    sp.add_argument("--model", required=True, help="registry id (see `ctxlens models`), a "
                    "Hugging Face hub id (org/name) or a model directory under "
                    "CTXLENS_MODEL_DIRS")
    _device_args(sp)


def _device_args(sp) -> None:
    sp.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    sp.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])


def _embed_args(sub) -> None:
    e = sub.add_parser("embed", help="word vectors of every layer for a file of sentences")
    _model_args(e)
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


def _attention_args(sub) -> None:
    a = sub.add_parser("attention", help="attention maps of every layer and head for one text")
    _model_args(a)
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


def _predict_args(sub) -> None:
    pr = sub.add_parser("predict", help="top-k masked / next / previous word as JSON")
    _model_args(pr)
    g = pr.add_mutually_exclusive_group(required=True)
    g.add_argument("--text", help='a text with one [MASK], e.g. "The [MASK] barked ." (BERT: '
                   "its MLM head; GPT and ELMo fill it from both sides, see --sides)")
    g.add_argument("--next", help="a prefix; predicts the next word")
    g.add_argument("--previous", help="a suffix; predicts the previous word (ELMo backward LM)")
    g.add_argument("--input", help="a text file, one text a line: writes one JSON line per "
                   "text (see --kind); a bad line gets an \"error\" field, the rest still run")
    pr.add_argument("--kind", choices=PREDICT_KINDS, default="masked",
                    help="with --input: what each line asks for (default: masked)")
    pr.add_argument("--sides", choices=["both", "left"], default="both",
                    help="for a [MASK] with a GPT or ELMo model: re-rank with the words after "
                         "the blank too (both, default) or use only the words before it")
    pr.add_argument("--rescore", action="store_true",
                    help="for a [MASK] with a masked LM (BERT): re-rank the head's 30 likeliest "
                         "words by the pseudo-log-likelihood of the sentence each makes (slower: "
                         "one forward pass per candidate and token)")
    pr.add_argument("--top-k", type=int, default=10,
                    help="how many candidates to list (default 10); a re-ranking fill (a GPT's "
                         "blank, --rescore) ranks a fixed set of words (its method line says "
                         "how many) and lists at most those")
    pr.add_argument("--output", help="with --input: write the JSON lines here, not to stdout")


def _index_args(sub) -> None:
    ix = sub.add_parser("index", help="embed every word of a corpus into a vector database "
                        "(resumable: run it again to continue)")
    _model_args(ix)
    ix.add_argument("--corpus", required=True, help="brown, a text file (one sentence a "
                    "line), a folder of .txt files, or hf:NAME[:split[:column]]")
    ix.add_argument("--output", help="index folder; for --corpus brown it may be left out: "
                    "the folder the app's Corpus page reads (CTXLENS_CACHE/indexes/"
                    "brown-MODEL[-L0-5-10])")
    ix.add_argument("--layers", type=layers_arg, default=None, metavar="all|0,3,6",
                    help="all (the default), or layer numbers like 0,3,6")
    ix.add_argument("--pool", default="mean", choices=POOLINGS,
                    help="how a word's sub-word tokens become one vector (default mean)")
    ix.add_argument("--engine", default="local", choices=["local", "ray"])
    ix.add_argument("--ray-address", help="join a running Ray cluster (ray start --head)")
    ix.add_argument("--workers", type=int, default=2, help="Ray actors (one model each)")
    ix.add_argument("--batch-size", type=int, default=32)
    ix.add_argument("--commit-sentences", type=int, default=2048, help=argparse.SUPPRESS)
    ix.add_argument("--replace-older", action="store_true", help="an index of an older "
                    "ctxlens format in --output is deleted and built again")


def _neighbours_args(sub) -> None:
    nb = sub.add_parser("neighbours", help="the nearest occurrences in an index of a word in "
                        "its sentence")
    nb.add_argument("--index", required=True, help="index folder (ctxlens index)")
    nb.add_argument("--text", required=True)
    nb.add_argument("--word", required=True)
    nb.add_argument("--layer", type=int, required=True)
    nb.add_argument("-k", type=int, default=10)
    nb.add_argument("--occurrence", type=int, default=1, help="which appearance of --word in "
                    "--text, counted from 1 (default 1), when it appears more than once")
    nb.add_argument("--exact", action="store_true", help="exact search instead of the ANN "
                    "index")
    nb.add_argument("--json", action="store_true", help="one JSON object a line")


def _stats_args(sub) -> None:
    st_ = sub.add_parser("stats", help="Ethayarajh's per-layer statistics over an index, with "
                         "95%% intervals")
    st_.add_argument("--index", required=True)
    st_.add_argument("--sample", type=int, default=2000,
                     help="sentences drawn (seeded) for the statistics; 0: all")
    st_.add_argument("--json", action="store_true")


def _compare_args(sub) -> None:
    cm = sub.add_parser("compare", help="layer x layer linear CKA between two models on the "
                        "same sentences, with 95%% bootstrap intervals over the sentences")
    cm.add_argument("--models", required=True, metavar="A,B",
                    help="two model ids (as --model elsewhere), e.g. elmo-brown,minilm-l6")
    cm.add_argument("--input", required=True, help="text file, one sentence per line")
    cm.add_argument("--output", required=True, help="output .npz: cka, ci_low, ci_high "
                    "[layers of A, layers of B], layer_names_a/_b, model_a/_b and the counts")
    cm.add_argument("--csv", help="output .csv, a row per pair of layers (default: --output "
                    "with .csv for .npz)")
    cm.add_argument("--pool", default="mean", choices=POOLINGS,
                    help="how a word's sub-word tokens become one vector (default mean)")
    cm.add_argument("--resamples", type=int, default=1000,
                    help="bootstrap resamples of the sentences (default 1000)")
    cm.add_argument("--sample", type=int, default=0,
                    help="draw this many sentences (seeded) from the file; 0: all (default)")
    _device_args(cm)


PREDICT_KINDS = ("masked", "next", "previous")
# JSON allows U+2028 and U+2029 raw inside a string, but JavaScript before ES2019 ends a line
# there: escaped, a JSON line pasted into a script or an HTML page's <script> stays one line
JS_LINE_ENDS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029"})


def to_json(obj) -> str:
    """The CLI's JSON: one line, non-ASCII text as it is (readable), U+2028/U+2029 escaped."""
    return json.dumps(obj, ensure_ascii=False).translate(JS_LINE_ENDS)


def _read_lines(path: str) -> list[str]:
    """The file's lines, split at "\\n" only (engine.text.split_lines): line n is what an editor
    shows as line n."""
    f = Path(path)
    if f.is_dir():
        raise EngineError(f"input {path} is a folder; give a text file, one text a line")
    if not f.is_file():
        raise EngineError(f"input file {path} does not exist")
    try:
        lines = [drop_invisible(ln) for ln in split_lines(f.read_bytes().decode("utf-8"))]
    except UnicodeDecodeError as e:
        raise EngineError(f"input file {path} is not UTF-8 text") from e
    _note_unspaced(lines)
    return lines


# notes already printed by this run (main() starts each run with none)
_NOTED: set[str] = set()


def _note_unspaced(texts) -> None:
    """Once a run, on stderr: how the word split treats a script written without spaces."""
    note = unspaced_note(texts)
    if note and note not in _NOTED:
        _NOTED.add(note)
        print(f"ctxlens: {note}", file=sys.stderr)


def _read_sentences(path: str) -> list[str]:
    sentences = [ln.strip() for ln in _read_lines(path) if ln.strip()]
    if not sentences:
        raise EngineError(f"input file {path} holds no sentences")
    return sentences


def _check_output(path: str) -> Path:
    out = Path(path)
    if out.suffix != ".npz":
        raise EngineError(f"--output must end in .npz (got {path})")
    if not out.parent.exists():
        raise EngineError(f"output folder {out.parent} does not exist")
    return out


# a model id is echoed in a message; a longer one that is no model folder is no model at all
MAX_MODEL_ID = 200
TEXT_ARGS = ("text", "next", "previous", "word")


def _check_text_arg(flag: str, text: str) -> None:
    """An argument Python could not decode holds lone surrogates (PEP 383): one byte each,
    which a tokenizer refuses with a TypeError deep inside a run."""
    at = next((i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff"), None)
    if at is None:
        return
    c = text[at]
    what = (f"the byte 0x{ord(c) - 0xdc00:02x}" if "\udc80" <= c <= "\udcff"
            else f"a lone surrogate U+{ord(c):04X}")
    raise TextError(f"{flag} is not UTF-8 text: {what} at character {at + 1}; pass the text in "
                    "UTF-8")


def _check_model_id(model: str) -> None:
    if len(model) > MAX_MODEL_ID and not os.path.isdir(model):
        raise EngineError(f"unknown model {model[:60] + '…'!r} ({len(model):,} characters): not "
                          "in the registry and no model folder; see `ctxlens models`")


def _check_not_system(path: str, flag: str = "--output") -> None:
    # the kernel's folders answer "No such file or directory" to a new file, which misleads
    resolved = Path(path).resolve()
    for top in (Path("/proc"), Path("/sys")):
        if resolved == top or top in resolved.parents:
            raise EngineError(f"{flag} {path} cannot be written: {top} holds the system's "
                              "own files; choose another folder")


def _check_writable_file(path: str, flag: str = "--output") -> None:
    """An output file (`flag` names it in a message) can be written: checked before any work,
    so that a long run does not end in an error (/proc/x.npz, a folder, a read-only disk).
    Opening for append leaves an existing file as it is; a file this check creates is removed
    again."""
    out = Path(path)
    _check_not_system(path, flag)
    if out.is_dir():
        raise EngineError(f"{flag} {path} is a folder; give a file name")
    if not out.parent.is_dir():
        raise EngineError(f"output folder {out.parent} does not exist")
    try:
        if out.exists():
            open(out, "ab").close()
        else:
            os.close(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            out.unlink()
    except OSError as e:
        raise EngineError(f"{flag} {path} cannot be written ({e.strerror or e})") from None


def _check_writable_folder(path: str) -> None:
    """An index folder (--output of `index`): a folder, or one that can be made where asked."""
    import tempfile

    out = Path(path)
    _check_not_system(path)
    if out.exists() and not out.is_dir():
        raise EngineError(f"--output {path} is a file; give a folder for the index")
    there = out
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        raise EngineError(f"--output {path} cannot be made: {there} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=there):
            pass
    except OSError as e:
        raise EngineError(f"--output {path} cannot be written ({e.strerror or e})") from None


def _check_args(args) -> None:
    """What can be checked before a model loads: texts, the model id and the output path."""
    for name in TEXT_ARGS:
        if getattr(args, name, None) is not None:
            _check_text_arg(f"--{name}", getattr(args, name))
    texts = [getattr(args, n) for n in TEXT_ARGS[:3] if getattr(args, n, None) is not None]
    _note_unspaced(texts)
    if getattr(args, "model", None) is not None:
        _check_model_id(args.model)
    if getattr(args, "output", None) is not None:
        if args.command == "index":
            _check_writable_folder(args.output)
        else:
            _check_writable_file(args.output)


def cmd_models(args, engine_cls) -> int:
    """The registry, the model folders and the cached hub models, each with what it can do."""
    from engine.registry import catalogue, model_dirs, what_it_can

    rows = []
    for e, where in catalogue():
        shown = e.id if len(e.id) <= 40 else "…" + e.id[-39:]
        # a broken folder says why where the others say what they can do
        broken = where.startswith("broken: ")
        rows.append((shown, e.family, "broken" if broken else where,
                     where.removeprefix("broken: ") if broken else what_it_can(e)))
    width = max(len(r[0]) for r in rows) + 2
    print(f"{'id':<{width}}{'family':<8}{'here':<27}can")
    for mid, fam, where, can in rows:
        print(f"{mid:<{width}}{fam:<8}{where:<27}{can}")
    print("Any Hugging Face hub id (org/name) or a folder under CTXLENS_MODEL_DIRS works too; "
          "see README.md, 'Your own model'.")
    print("Model directories: " + os.pathsep.join(str(d) for d in model_dirs()))
    return 0


# sentences encoded per engine call: enough for the length sort to leave little padding, few
# enough for the progress bar to move
EMBED_CHUNK = 1024
# runs shorter than this show no progress
PROGRESS_MIN = 50
# without a terminal: a line each tenth of the way, or after this many seconds without one
PROGRESS_SECONDS = 10.0


@contextlib.contextmanager
def _progress(total: int, unit: str, desc: str, done_verb: str):
    """Yields step(n): tqdm's bar on a terminal; elsewhere (a log file, a pipe, a batch job),
    where a bar draws nothing, plain lines such as "ctxlens: embedded 2000/10000 sentences"."""
    if sys.stderr.isatty() or total < PROGRESS_MIN:
        from tqdm import tqdm

        with tqdm(total=total, unit=unit, desc=desc, file=sys.stderr,
                  disable=total < PROGRESS_MIN or None) as bar:
            yield bar.update
        return
    state = {"done": 0, "tenth": 0, "at": time.monotonic()}
    noun = {"sent": "sentences", "text": "texts"}.get(unit, unit)

    def step(n: int) -> None:
        state["done"] += n
        tenth = 10 * state["done"] // total
        if tenth > state["tenth"] or time.monotonic() - state["at"] >= PROGRESS_SECONDS:
            state.update(tenth=tenth, at=time.monotonic())
            print(f"ctxlens: {done_verb} {state['done']:,}/{total:,} {noun}", file=sys.stderr,
                  flush=True)

    yield step


def layers_arg(value: str) -> tuple[int, ...] | None:
    """--layers for argparse: engine.families.base.parse_layers, its refusal a usage error."""
    from engine.families.base import parse_layers

    try:
        return parse_layers(value)
    except EngineError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


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
    sentences = _read_sentences(args.input)
    out = _check_output(args.output)
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
    with _progress(len(texts), "sent", f"embed {args.model}", "embedded") as step:
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


def cmd_attention(args, engine_cls) -> int:
    out = _check_output(args.output)
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
        extra.update(_word_maps(enc))
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


def _word_maps(enc) -> dict[str, np.ndarray]:
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


def _predict_one(engine, model: str, kind: str, text: str, top_k: int, sides: str,
                 rescore: bool = False):
    if kind == "masked":
        return engine.predict_masked(model, text, top_k=top_k, sides=sides, rescore=rescore)
    if rescore:
        raise EngineError("--rescore re-ranks a masked LM's fillers of a [MASK]; it does not "
                          "apply to next- or previous-word predictions")
    if kind == "next":
        return engine.predict_next(model, text, top_k=top_k)
    return engine.predict_previous(model, text, top_k=top_k)


def cmd_predict(args, engine_cls) -> int:
    if args.top_k < 1:
        raise EngineError("--top-k must be at least 1")
    if args.output and args.input is None:
        raise EngineError("--output goes with --input (a single prediction prints to stdout)")
    if args.input is not None:
        return _predict_batch(args, engine_cls)
    engine = engine_cls(device=args.device, dtype=args.dtype)
    kind, text = next((k, t) for k, t in (("masked", args.text), ("next", args.next),
                                          ("previous", args.previous)) if t is not None)
    pred = _predict_one(engine, args.model, kind, text, args.top_k, args.sides, args.rescore)
    print(to_json(pred.as_json()))
    if pred.method:       # how it was filled, and what "<UNK>" means when it is listed
        print(f"ctxlens: {pred.method}", file=sys.stderr)
    if pred.ranked_among and len(pred.candidates) < args.top_k:
        n = len(pred.candidates)
        print(f"ctxlens: {n} candidate{'s' if n != 1 else ''}, not {args.top_k}: this method "
              f"ranks a fixed set of {pred.ranked_among} words, and the probabilities are shares among "
              "them", file=sys.stderr)
    return 0


def _predict_batch(args, engine_cls) -> int:
    """One JSON line per input line, in order: {"line", "text", "candidates"} or
    {"line", "text", "error"}; the model loads once, a bad line does not stop the others."""
    todo = [(n, ln.strip()) for n, ln in enumerate(_read_lines(args.input), 1) if ln.strip()]
    if not todo:
        raise EngineError(f"input file {args.input} holds no texts")
    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0)
    engine.adapter(args.model)      # a model that cannot load is one error, not one per line
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    errors = 0
    try:
        with _progress(len(todo), "text", f"predict {args.model}", "predicted") as step:
            for n, text in todo:
                row: dict = {"line": n, "text": text}
                try:
                    pred = _predict_one(engine, args.model, args.kind, text, args.top_k,
                                        args.sides, args.rescore)
                    row.update(kind=pred.kind, method=pred.method, candidates=pred.as_json())
                except (EngineError, TextError) as e:
                    errors += 1
                    row["error"] = str(e)
                out.write(to_json(row) + "\n")
                step(1)
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"ctxlens: {len(todo) - errors} of {len(todo)} texts predicted"
          + (f", {errors} with an error (see their \"error\" field)" if errors else ""),
          file=sys.stderr)
    # a script must see that nothing came out; some lines failing is still a result
    return EXIT_USAGE if errors == len(todo) else 0


COMMANDS = {"models": cmd_models, "embed": cmd_embed, "attention": cmd_attention,
            "predict": cmd_predict}


def cmd_index(args, engine_cls) -> int:
    from engine.corpus.index import build

    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0)
    output = args.output or brown_output(engine, args)
    m = build(args.model, args.corpus, output, layers=args.layers, pool=args.pool,
              engine_kind=args.engine, batch_size=args.batch_size, device=args.device,
              dtype=args.dtype, ray_address=args.ray_address, ray_workers=args.workers,
              commit_sentences=args.commit_sentences, replace_older=args.replace_older,
              engine=engine, on_corpus=lambda corpus: _note_unspaced(corpus.sentences))
    per = m.rows / max(1, len(m.layers))
    print(f"ctxlens: {output}: {m.n_sentences:,} sentences, {per:,.0f} occurrences x "
          f"{len(m.layers)} layers = {m.rows:,} rows, {m.bytes_on_disk / 2**20:,.1f} MiB "
          f"({m.bytes_on_disk / max(1, m.rows):,.0f} bytes per occurrence-layer)"
          + (f"; {m.skipped_lines} line{'s' if m.skipped_lines > 1 else ''} left out (over "
             "the caps)" if m.skipped_lines else ""))
    return 0


def brown_output(engine, args) -> str:
    """The app's own folder for Brown at these layers (the Corpus page lists it)."""
    from engine.corpus.catalog import brown_index_path
    from engine.corpus.embed import chosen_layers

    if args.corpus != "brown":
        raise EngineError("--output is needed (only --corpus brown has a folder of its own)")
    n_states = engine.adapter(args.model, progress=True).info.n_layers + 1
    return str(brown_index_path(args.model, chosen_layers(args.layers, n_states), n_states))


def cmd_neighbours(args, engine_cls) -> int:
    from engine.corpus.query import CorpusIndex, neighbours
    from engine.text import occurrences_of, to_word_text

    if args.k < 1:
        raise EngineError("-k must be at least 1")
    index = CorpusIndex(args.index)
    engine = engine_cls(cache_size=0)
    hits = neighbours(engine, index, args.text, args.word, args.layer, args.k, args.exact,
                      args.occurrence)
    at = occurrences_of(to_word_text(args.text).words, args.word)
    if len(at) > 1:    # which one was searched for, on stderr: stdout stays the hits alone
        print(f"ctxlens: {args.word!r} occurs {len(at)} times in the text; these are the "
              f"neighbours of occurrence {args.occurrence} (word position "
              f"{at[args.occurrence - 1]}, from 0); --occurrence N picks another",
              file=sys.stderr)
    # each line read alone (a file of lines from several indexes) says whose vectors these are
    source = {"model": index.manifest.model, "pooling": index.manifest.pooling}
    for h in hits:
        if args.json:
            print(to_json({**h.as_json(), **source}))
        else:
            # the same 0-based sentence id and word position as --json and the index's rows
            print(f"{h.cosine:.4f}  {h.word}  (sentence {h.sentence_id}, position {h.position})"
                  f"  {h.sentence}")
    return 0


def cmd_stats(args, engine_cls) -> int:
    from engine.analysis.bootstrap import interval
    from engine.corpus.query import CorpusIndex, stats

    if args.sample == 1 or args.sample < 0:
        raise EngineError(f"--sample is a number of sentences, at least 2, or 0 for all "
                          f"(got {args.sample})")
    index = CorpusIndex(args.index)
    metrics, n = stats(index, sample=args.sample)
    rows = []
    for i, name in enumerate(index.manifest.layer_names):
        row = {"layer": index.manifest.layers[i], "name": name}
        for key in ("self_similarity", "intra_sentence", "anisotropy"):
            lo, hi = interval(metrics.replicates[key][:, i])
            row[key] = [float(getattr(metrics, key)[i]), float(lo), float(hi)]
        rows.append(row)
    if args.json:
        for r in rows:
            print(to_json(r))
        return 0
    print(f"{index.manifest.model} over {n:,} sentences of {index.manifest.corpus} "
          "(value [95% CI]; a word is its exact form, as on the Compare layers page; "
          "self-similarity resamples the repeated words, the others the sentences):")
    print(f"{'layer':<14}{'self-similarity':>28}{'intra-sentence':>28}{'anisotropy':>28}")
    for r in rows:
        cells = "".join(f"{v:>10.3f} [{lo:.3f}, {hi:.3f}]" for v, lo, hi in
                        (r["self_similarity"], r["intra_sentence"], r["anisotropy"]))
        print(f"{r['name']:<14}{cells}")
    return 0


def _compare_inputs(args) -> tuple[list[str], list]:
    """The two model ids and the sentences (split into words) that `compare` reads, checked
    before any model loads."""
    from engine.analysis.model_cka import check_enough, check_size
    from engine.text import to_word_text

    models = [m.strip() for m in args.models.split(",")]
    if len(models) != 2 or not all(models):
        raise EngineError(f"--models takes two model ids, A,B (got {args.models!r})")
    for m in models:
        _check_model_id(m)
    if args.resamples < 1 or args.sample < 0:
        raise EngineError("--resamples must be at least 1 and --sample 0 (all) or more")
    sentences = _read_sentences(args.input)
    if args.sample and args.sample < len(sentences):
        keep = np.random.default_rng(0).choice(len(sentences), args.sample, replace=False)
        sentences = [sentences[i] for i in sorted(keep)]
    texts = []
    for i, s in enumerate(sentences):
        try:
            texts.append(to_word_text(s))
        except TextError as e:
            raise TextError(f"sentence {i + 1}: {e}") from e
    n_words = sum(len(t.words) for t in texts)
    check_enough(n_words, len(texts))
    check_size(n_words, len(texts), 1, 1)
    return models, texts


def cmd_compare(args, engine_cls) -> int:
    import csv

    from engine.analysis.model_cka import compare_models

    out = _check_output(args.output)
    table = Path(args.csv) if args.csv else out.with_suffix(".csv")
    # the default table too: it is written last, after both models have run
    _check_writable_file(str(table), "--csv" if args.csv else "the CSV (choose it with --csv)")
    models, texts = _compare_inputs(args)
    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0)
    for m in models:        # an unknown second model is said before the first one loads
        engine.family(m)
    encs = [engine.encode_words(m, texts) for m in models]
    res = compare_models(encs[0], encs[1], pool=args.pool, n_resamples=args.resamples)
    np.savez(out, cka=res.cka.astype(np.float32), ci_low=res.low.astype(np.float32),
             ci_high=res.high.astype(np.float32), layer_names_a=np.array(res.layer_names_a),
             layer_names_b=np.array(res.layer_names_b), model_a=np.array(models[0]),
             model_b=np.array(models[1]), n_words=np.array(res.n_words),
             n_sentences=np.array(res.n_sentences), n_resamples=np.array(res.n_resamples),
             level=np.array(res.level), pooling=np.array(args.pool),
             estimator=np.array("debiased linear CKA (Song et al. 2012 unbiased HSIC)"))
    rows = res.rows()
    with open(table, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {out} and {table}: {models[0]} ({len(res.layer_names_a)} layers) x "
          f"{models[1]} ({len(res.layer_names_b)} layers), debiased linear CKA over "
          f"{res.n_words} words of {res.n_sentences} sentences, 95% intervals from "
          f"{res.n_resamples} resamples of the sentences", file=sys.stderr)
    return 0


COMMANDS.update(index=cmd_index, neighbours=cmd_neighbours, stats=cmd_stats,
                compare=cmd_compare)


def _quiet_libraries() -> None:
    """No library chatter on the terminal, without importing the libraries to say so (a run
    from a traced graph never imports transformers): transformers reads its verbosity from
    the environment when first imported (its loading bars: main's Engine options)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on it)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _internal_error(e: BaseException, limit: int = 300) -> str:
    """One short line: a library's message may span lines or quote a whole input."""
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return f"ctxlens: internal error: {text if len(text) <= limit else text[:limit] + '…'}"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "dtype", "float32") != "float32":
        from engine.families.base import resolve_device

        try:
            on_cpu = resolve_device(getattr(args, "device", "auto")) == "cpu"
        except Exception:  # noqa: BLE001 - a bad --device is said by the command itself
            on_cpu = False
        if on_cpu:          # the engine keeps float32 on CPU (slow, lossy half matmuls there)
            print(f"ctxlens: --dtype {args.dtype} applies on a GPU; on the CPU this runs in "
                  "float32", file=sys.stderr)
    _quiet_libraries()
    from functools import partial

    from engine.api import Engine

    _NOTED.clear()
    try:
        _check_args(args)
        # the terminal shows the engine's progress lines and bars, not transformers' own
        return COMMANDS[args.command](args, partial(Engine, library_bars=False))
    except (EngineError, TextError) as e:
        print(f"ctxlens: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("ctxlens: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as e:
        if not _reader_gone():        # a broken pipe of something else (a socket) is an error
            print(_internal_error(e), file=sys.stderr)
            return EXIT_INTERNAL
        # `ctxlens stats ... | head -3`: the reader has what it wanted; say nothing more (and
        # point stdout at nothing so that Python's own flush at exit does not complain)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # noqa: BLE001 - the CLI promises one line, never a traceback
        print(_internal_error(e), file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
