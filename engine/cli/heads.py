"""`ctxlens heads`: how much one prediction needs each attention head — f's drop when the head
alone is knocked out, Michel et al.'s gradient estimate of it, and their rank correlation
(engine/components/importance.py), as JSON or NPZ."""
from __future__ import annotations

import math
import sys

from engine.cli.options import model_args
from engine.cli.report import emit_json
from engine.errors import EngineError

HEAD_KINDS = ("masked", "next")
FORMATS = (".json", ".npz")


def add(sub) -> None:
    hp = sub.add_parser("heads", help="each attention head's importance for one prediction "
                        "(knocked out one at a time, and the gradient estimate) as JSON or NPZ")
    model_args(hp)
    hp.add_argument("--text", required=True, help='a text with one [MASK] (--kind masked) or '
                    'a text that ends before the word (--kind next)')
    hp.add_argument("--target", required=True, help="the word whose log-probability f is")
    hp.add_argument("--contrast", help="a foil: f = log p(target) − log p(contrast)")
    hp.add_argument("--kind", choices=HEAD_KINDS, default="masked",
                    help="masked (default): the blank's filler; next: the next word")
    hp.add_argument("--output", help="a .json or .npz file (default: JSON to stdout)")
    hp.set_defaults(run=cmd_heads)


def cmd_heads(args, engine_cls) -> int:
    out = args.output
    if out and not out.lower().endswith(FORMATS):
        raise EngineError(f"--output must end in .json or .npz, not {out!r}")
    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0)
    hi = engine.head_importance(args.model, args.text, args.target, args.contrast, args.kind)
    fields = {"model": args.model, "kind": hi.kind, "target": hi.target,
              "contrast": hi.contrast, "f": hi.f, "f_means": hi.f_means,
              "knocked_means": "f − f with that head alone zeroed, [layer][head] from 1",
              "gradient_means": "|∂f/∂ξ_h| for a gate ξ_h = 1 on the head's output "
                                "(Michel et al. 2019)",
              "spearman": hi.spearman}
    if out and out.lower().endswith(".npz"):
        import numpy as np

        np.savez(out, knocked=hi.knocked, gradient=hi.gradient,
                 **{k: np.asarray(v if v is not None else "") for k, v in fields.items()})
    else:
        emit_json({**fields, "knocked": hi.knocked.tolist(),
                   "gradient": hi.gradient.tolist()}, out)
    layers, heads = hi.knocked.shape
    # NaN when every head's drop (or gradient) is the same: no ranks to correlate
    rho = (f"{hi.spearman:.3f}" if math.isfinite(hi.spearman) else
           "none (every head's drop or gradient is the same)")
    print(f"ctxlens: {layers} layers × {heads} heads; Spearman ρ between knocked-out drop and "
          f"gradient: {rho}", file=sys.stderr)
    return 0
