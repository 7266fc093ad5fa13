"""`ctxlens patch`: activation patching — f of a corrupted run with each layer × position cell
of one site taken from the clean run (engine/components/patching.py), written as .npz
(Patching.arrays: `patched` [rows, tokens], `restored`, `clean`, `corrupt`, `tokens`, `rows`,
...) or as one JSON object."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from engine.cli import inputs
from engine.cli.options import model_args
from engine.cli.report import emit_json
from engine.components.result import SITES
from engine.errors import EngineError
from engine.families import family

FORMATS = (".npz", ".json")


def add(sub) -> None:
    pa = sub.add_parser("patch", help="activation patching: how much of the clean prediction "
                        "each layer × position cell restores in a corrupted run")
    model_args(pa)
    pa.add_argument("--clean", required=True, help="the clean text (a decoder: it ends where "
                    "the word comes; a masked LM: it holds one [MASK])")
    g = pa.add_mutually_exclusive_group(required=True)
    g.add_argument("--corrupt", help="the corrupted text, of the same token length")
    g.add_argument("--noise", help="words of the clean text (space separated, as they stand "
                   "together) whose input embeddings get Gaussian noise of 3 × the embeddings' "
                   "std (Meng et al. 2022)")
    pa.add_argument("--seeds", type=int, default=5, help="noise draws averaged (default 5)")
    pa.add_argument("--target", required=True, help="the word whose log-probability is f")
    pa.add_argument("--contrast", help="a foil: f = log p(target) − log p(contrast)")
    pa.add_argument("--site", choices=SITES, default="residual",
                    help="residual (rows: embeddings + each block's output), attention (each "
                    "attention output projection's input) or mlp (each feed-forward output)")
    pa.add_argument("--kind", choices=("next", "masked"), default=None,
                    help="next (a decoder; the default for one) or masked (a masked LM; the "
                    "default for one)")
    pa.add_argument("--output", required=True, help="output .npz or .json")
    pa.set_defaults(run=cmd_patch)


def check_output(path: str) -> Path:
    out = Path(path)
    if out.suffix not in FORMATS:
        raise EngineError(f"--output must end in .npz or .json (got {path})")
    if not out.parent.exists():
        raise EngineError(f"output folder {out.parent} does not exist")
    return out


def cmd_patch(args, engine_cls) -> int:
    for flag in ("clean", "corrupt", "noise", "target", "contrast"):
        if getattr(args, flag) is not None:
            inputs._check_text_arg(f"--{flag}", getattr(args, flag))
    out = check_output(args.output)
    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0)
    # a masked LM is patched on its blank, any other model on its next word
    masked_lm = "masked_lm" in family(engine.family_name(args.model)).capabilities
    kind = args.kind or ("masked" if masked_lm else "next")
    p = engine.patch(args.model, args.clean, args.corrupt, args.target, args.contrast,
                     site=args.site, kind=kind, noise_words=args.noise, seeds=args.seeds)
    fields = dict(model=p.model_id, kind=p.kind, site=p.site, target=p.target,
                  contrast=p.contrast or "", f_means=p.f_means, corruption=p.corruption)
    if out.suffix == ".json":
        emit_json({**fields, "tokens": list(p.tokens), "clean": p.clean, "corrupt": p.corrupt,
                   "patched": p.patched.tolist()}, str(out))
    else:
        np.savez(out, **p.arrays())         # the arrays the app's NPZ holds, by the same names
    print(f"wrote {out}: {p.site} patching, {p.patched.shape[0]} rows x "
          f"{p.patched.shape[1]} tokens; f clean {p.clean:.3f}, corrupted {p.corrupt:.3f}",
          file=sys.stderr)
    if p.restore_note:
        print(f"ctxlens: {p.restore_note}", file=sys.stderr)
    return 0
