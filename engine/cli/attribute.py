"""`ctxlens attribute`: why a model predicts a word — each word's attribution by one of the
methods of engine/attribution/methods.py (gradient × input, integrated gradients, occlusion,
...), with its faithfulness, as JSON (docs/attribution.md)."""
from __future__ import annotations

import sys

from engine.attribution.methods import METHODS
from engine.cli.options import ablate_args, ablated_fields, model_args
from engine.cli.report import emit_json


def add(sub) -> None:
    at = sub.add_parser("attribute", help="why a word is predicted: each input word's "
                        "attribution, with its faithfulness, as JSON")
    model_args(at)
    g = at.add_mutually_exclusive_group(required=True)
    g.add_argument("--text", help='a text with one [MASK], e.g. "He sat on the [MASK] of the '
                   'river ." (a masked LM: its head; a GPT or ELMo: its filled blank)')
    g.add_argument("--next", help="a text that ends before the word (a GPT or ELMo: its "
                   "next-word prediction)")
    g.add_argument("--previous", help="a text that starts after the word (ELMo's backward LM)")
    at.add_argument("--target", required=True, help="the word to explain (any word, not only "
                    "the top prediction)")
    at.add_argument("--contrast", help="a foil: explain log p(target) − log p(contrast), "
                    '"why target rather than contrast"')
    at.add_argument("--method", choices=tuple(METHODS), default="ig",
                    help="; ".join(f"{m.name}: {m.label}" + (" (default)" if m.name == "ig"
                                                           else "") for m in METHODS.values()))
    at.add_argument("--steps", type=int, help="IG's first number of steps (default 32; raised "
                    "until the completeness gap is at most 1%% of f(x) − f(baseline))")
    at.add_argument("--output", help="write the JSON here, not to stdout")
    ablate_args(at)
    at.set_defaults(run=cmd_attribute)


def cmd_attribute(args, engine_cls) -> int:
    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0)
    kind, text = next((k, t) for k, t in (("masked", args.text), ("next", args.next),
                                          ("previous", args.previous)) if t is not None)
    att = engine.attribute(args.model, text, args.target, args.contrast, method=args.method,
                           kind=kind, steps=args.steps, ablate=args.ablate,
                           ablate_mode=args.ablate_mode)
    emit_json({"model": args.model, "kind": kind,
               **ablated_fields(engine, args.model, args.ablate, args.ablate_mode),
               **att.to_json(), "f_means": att.f_means,
               "absent": att.absent, **({"baseline": att.baseline, "converged": att.converged}
                                        if att.converged is not None else {})}, args.output)
    if att.converged is False:
        print(f"ctxlens: integrated gradients did not converge: the completeness gap is "
              f"{att.completeness_gap:.3g} after {att.steps} steps, more than 1% of "
              f"f(x) − f(baseline) = {att.f - att.f_baseline:.3g}", file=sys.stderr)
    return 0
