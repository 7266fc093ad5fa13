"""`ctxlens generate`: a decoder's continuation of a prompt, token by token, with each step's
probability, entropy, alternatives and the chosen token's rank at every layer, as JSON."""
from __future__ import annotations

from engine.cli.options import model_args
from engine.cli.report import ECHO_CHARS, emit_json
from engine.errors import EngineError
from engine.generation import MAX_SEED, TEMPERATURES


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


def check_sampling(args) -> None:
    """With --sample, a temperature and seed within engine.generation's bounds: a temperature
    near 0 ends in a NaN softmax inside torch, a seed past 64 bits in torch's OverflowError,
    and a negative one is no seed that generate draws. Greedy decoding reads neither."""
    if not args.sample:
        return
    lo, hi = TEMPERATURES
    if not lo <= args.temperature <= hi:            # NaN too
        raise EngineError(f"--temperature is from {lo:g} to {hi:g} (got {args.temperature:g})")
    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:
        got = str(args.seed)
        if len(got) > ECHO_CHARS:
            got = f"{got[:ECHO_CHARS]}…, {len(got):,} digits"
        raise EngineError(f"--seed is a whole number from 0 to {MAX_SEED} (got {got})")


def cmd_generate(args, engine_cls) -> int:
    check_sampling(args)
    engine = engine_cls(device=args.device, dtype=args.dtype, cache_size=0)
    gen = engine.generate(args.model, args.text, args.tokens, sample=args.sample,
                          temperature=args.temperature, seed=args.seed, top_k=args.top_k)
    emit_json(gen.to_json(), args.output)
    return 0
