"""`ctxlens predict`: the likeliest words for a blank, the next or the previous word, as
JSON; one text from a flag or a file of them."""
from __future__ import annotations

import sys

from engine.cli.inputs import read_lines
from engine.cli.options import ablate_args, ablated_fields, model_args
from engine.cli.report import EXIT_USAGE, progress, to_json
from engine.errors import EngineError
from engine.text import TextError

PREDICT_KINDS = ("masked", "next", "previous")


def add(sub) -> None:
    pr = sub.add_parser("predict", help="top-k masked / next / previous word as JSON")
    model_args(pr)
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
    ablate_args(pr)
    pr.set_defaults(run=cmd_predict)


def _predict_one(engine, model: str, kind: str, text: str, top_k: int, sides: str,
                 rescore: bool = False, ablate: str | None = None, ablate_mode: str = "zero"):
    off = {"ablate": ablate, "ablate_mode": ablate_mode}
    if kind == "masked":
        return engine.predict_masked(model, text, top_k=top_k, sides=sides, rescore=rescore,
                                     **off)
    if rescore:
        raise EngineError("--rescore re-ranks a masked LM's fillers of a [MASK]; it does not "
                          "apply to next- or previous-word predictions")
    if kind == "next":
        return engine.predict_next(model, text, top_k=top_k, **off)
    return engine.predict_previous(model, text, top_k=top_k, **off)


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
    pred = _predict_one(engine, args.model, kind, text, args.top_k, args.sides, args.rescore,
                        args.ablate, args.ablate_mode)
    print(to_json(pred.as_json()))
    if args.ablate:       # stdout stays the candidates' list; what was off is said here
        spec = ablated_fields(engine, args.model, args.ablate, args.ablate_mode)["ablated"]
        print(f"ctxlens: with {spec} knocked out ({args.ablate_mode})", file=sys.stderr)
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
    todo = [(n, ln.strip()) for n, ln in enumerate(read_lines(args.input), 1) if ln.strip()]
    if not todo:
        raise EngineError(f"input file {args.input} holds no texts")
    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0)
    engine.adapter(args.model)      # a model that cannot load is one error, not one per line
    # a bad --ablate is one error too, before any line runs
    ablated = ablated_fields(engine, args.model, args.ablate, args.ablate_mode)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    errors = 0
    try:
        with progress(len(todo), "text", f"predict {args.model}", "predicted") as step:
            for n, text in todo:
                row: dict = {"line": n, "text": text}
                try:
                    pred = _predict_one(engine, args.model, args.kind, text, args.top_k,
                                        args.sides, args.rescore, args.ablate,
                                        args.ablate_mode)
                    row.update(kind=pred.kind, method=pred.method, **ablated,
                               candidates=pred.as_json())
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
