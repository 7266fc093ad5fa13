"""`ctxlens compare`: layer x layer linear CKA between two models on the same sentences."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from engine.cli.inputs import check_model_id, check_output, check_writable_file, read_sentences
from engine.cli.options import device_args
from engine.errors import EngineError
from engine.result import POOLINGS
from engine.text import TextError


def add(sub) -> None:
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
    device_args(cm)
    cm.set_defaults(run=cmd_compare)


def _compare_inputs(args) -> tuple[list[str], list]:
    """The two model ids and the sentences (split into words) that `compare` reads, checked
    before any model loads."""
    from engine.analysis.model_cka import check_enough, check_size
    from engine.text import to_word_text

    models = [m.strip() for m in args.models.split(",")]
    if len(models) != 2 or not all(models):
        raise EngineError(f"--models takes two model ids, A,B (got {args.models!r})")
    for m in models:
        check_model_id(m)
    if args.resamples < 1 or args.sample < 0:
        raise EngineError("--resamples must be at least 1 and --sample 0 (all) or more")
    sentences = read_sentences(args.input)
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

    out = check_output(args.output)
    table = Path(args.csv) if args.csv else out.with_suffix(".csv")
    # the default table too: it is written last, after both models have run
    check_writable_file(str(table), "--csv" if args.csv else "the CSV (choose it with --csv)")
    models, texts = _compare_inputs(args)
    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0)
    for m in models:        # an unknown second model is said before the first one loads
        engine.family_name(m)
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

