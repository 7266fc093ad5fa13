"""The corpus commands: `ctxlens index` embeds a corpus into a vector database, `neighbours`
searches it, `stats` gives Ethayarajh's per-layer statistics over it."""
from __future__ import annotations

import argparse
import sys

from engine.cli.inputs import note_unspaced
from engine.cli.options import layers_arg, model_args
from engine.cli.report import to_json
from engine.errors import EngineError
from engine.result import POOLINGS


def add(sub) -> None:
    for add_command in (_index_args, _neighbours_args, _stats_args):
        add_command(sub)


def _index_args(sub) -> None:
    ix = sub.add_parser("index", help="embed every word of a corpus into a vector database "
                        "(resumable: run it again to continue)")
    model_args(ix)
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
    ix.set_defaults(run=cmd_index)


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
    nb.set_defaults(run=cmd_neighbours)


def _stats_args(sub) -> None:
    st_ = sub.add_parser("stats", help="Ethayarajh's per-layer statistics over an index, with "
                         "95%% intervals")
    st_.add_argument("--index", required=True)
    st_.add_argument("--sample", type=int, default=2000,
                     help="sentences drawn (seeded) for the statistics; 0: all")
    st_.add_argument("--json", action="store_true")
    st_.set_defaults(run=cmd_stats)


def cmd_index(args, engine_cls) -> int:
    from engine.corpus.index import build

    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0)
    output = args.output or brown_output(engine, args)
    m = build(args.model, args.corpus, output, layers=args.layers, pool=args.pool,
              engine_kind=args.engine, batch_size=args.batch_size, device=args.device,
              dtype=args.dtype, ray_address=args.ray_address, ray_workers=args.workers,
              commit_sentences=args.commit_sentences, replace_older=args.replace_older,
              engine=engine, on_corpus=lambda corpus: note_unspaced(corpus.sentences))
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
