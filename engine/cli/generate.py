"""`ctxlens generate`: a decoder's continuation of a prompt, token by token, with each step's
probability, entropy, alternatives and the chosen token's rank at every layer, as JSON."""
from __future__ import annotations

from engine.cli.options import model_args
from engine.cli.report import emit_json


def add(sub) -> None:
    ge = sub.add_parser("generate", help="continue a prompt with a decoder: each token with "
                        "its probability, entropy, alternatives and rank per layer, as JSON")
    model_args(ge)
    ge.add_argument("--text", required=True, help="the prompt")
    ge.add_argument("--tokens", type=int, default=20,
                    help="how many tokens to generate at most (default 20; stops early at "
                    "the model's end-of-text token)")
    ge.add_argument("--sample", action="store_true",
                    help="sample from softmax(logits / temperature) instead of taking the "
                    "likeliest token (greedy, default)")
    ge.add_argument("--temperature", type=float, default=1.0,
                    help="with --sample: the softmax temperature (default 1.0)")
    ge.add_argument("--seed", type=int, help="with --sample: the random seed (default: a new "
                    "one, written to the JSON so the draw can be repeated)")
    ge.add_argument("--top-k", type=int, default=5,
                    help="alternatives listed per step (default 5)")
    ge.add_argument("--output", help="write the JSON here, not to stdout")
    ge.set_defaults(run=cmd_generate)


def cmd_generate(args, engine_cls) -> int:
    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0)
    gen = engine.generate(args.model, args.text, args.tokens, sample=args.sample,
                          temperature=args.temperature, seed=args.seed, top_k=args.top_k)
    emit_json(gen.to_json(), args.output)
    return 0
