"""`ctxlens components`: each attention head's and feed-forward block's direct effect on the
next word's logit (direct logit attribution, engine/components/dla.py), as an NPZ or JSON."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from engine.cli.options import model_args
from engine.cli.report import emit_json
from engine.errors import EngineError

SUFFIXES = (".npz", ".json")


def add(sub) -> None:
    c = sub.add_parser("components", help="each head's and feed-forward block's direct effect "
                       "on the next word's logit (a pre-norm decoder)")
    model_args(c)
    c.add_argument("--text", required=True, help="a text that ends before the word")
    c.add_argument("--target", required=True, help="the next word whose logit is split (its "
                   "first token when it takes several)")
    c.add_argument("--contrast", help="a foil: split logit(target) − logit(contrast)")
    c.add_argument("--output", required=True, help="output .npz: heads [layers, heads], mlp "
                   "[layers], embed, rest (biases), logit (heads.sum() + mlp.sum() + embed + "
                   "rest), tokens, and the strings model, target, contrast, logit_means; or "
                   ".json with the same fields")
    c.set_defaults(run=cmd_components)


def cmd_components(args, engine_cls) -> int:
    out = Path(args.output)
    if out.suffix not in SUFFIXES:
        raise EngineError(f"--output must end in .npz or .json (got {args.output})")
    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0)
    c = engine.components(args.model, args.text, args.target, args.contrast)
    strings = {"model": args.model, "target": c.target, "contrast": c.contrast or "",
               "logit_means": c.logit_means}
    if out.suffix == ".json":
        emit_json({**strings, "tokens": list(c.tokens), "heads": c.heads.tolist(),
                   "mlp": c.mlp.tolist(), "embed": c.embed, "rest": c.rest,
                   "logit": c.logit}, str(out))
    else:
        np.savez(out, heads=c.heads, mlp=c.mlp, embed=np.float64(c.embed),
                 rest=np.float64(c.rest), logit=np.float64(c.logit), tokens=np.array(c.tokens),
                 **{k: np.array(v) for k, v in strings.items()})
    top = np.unravel_index(np.abs(c.heads).argmax(), c.heads.shape)
    print(f"wrote {out}: {c.heads.shape[0]} layers x {c.heads.shape[1]} heads; logit "
          f"{c.logit:.4g} ({c.logit_means}); largest head {top[0] + 1}.{top[1] + 1} "
          f"({c.heads[top]:+.4g})", file=sys.stderr)
    return 0
