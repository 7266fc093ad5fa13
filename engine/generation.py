"""Generation for any decoder: greedy or seeded sampling with the key/value cache, and for
each generated token its probability, entropy, alternatives and rank at every layer by the
logit lens (Ecco's "rankings"; nostalgebraist 2020). Attention between generated and existing
tokens comes from one forward of the whole sequence, on demand (generation_attention).

Decoding: the prompt runs once (its cache kept), then one forward per new token on that token
alone. Greedy takes the argmax of the model's logits, as `model.generate(do_sample=False)`.
Sampling draws `torch.multinomial(softmax(logits / T), 1, generator=g)` with a torch.Generator
on the model's device seeded once with `seed` (never the global RNG): the same draws
`model.generate(do_sample=True, temperature=T, top_k=0, top_p=1.0)` makes after
`torch.manual_seed(seed)` on the CPU, as long as nothing else consumes the global RNG.
Stops after an end-of-sequence token (kept as the last token; `stopped == "eos"`) or after
`max_tokens` tokens.
"""
from __future__ import annotations

import math
import secrets

from engine.errors import EngineError, UnsupportedPrediction
from engine.generation_result import Generation, GenerationAttention
from engine.text import WordText

# The one cap on tokens per generation: each step keeps its logits ([vocabulary] float32) and
# hidden states, and the attention view squares prompt + generated tokens.
MAX_GENERATED_TOKENS = 200
# Sampling's bounds where a user types them (the CLI): the temperatures the app's Generation
# page takes (far below 0.05, logits / T overflow to inf and the softmax is NaN: 1e-45); seeds
# from 0 to the largest that generate draws itself when given none (SEED_BITS), so that a drawn
# seed typed back repeats its draw (the app's seed box stops at 2**31 - 1).
TEMPERATURES = (0.05, 5.0)
SEED_BITS = 63
MAX_SEED = 2 ** SEED_BITS - 1


def generate(adapter, prompt: WordText | str, max_tokens: int, sample: bool = False,
             temperature: float = 1.0, seed: int | None = None, top_k: int = 5,
             layer_ranks: bool = True) -> Generation:
    """Continue `prompt` by up to `max_tokens` tokens (module docstring: how). An empty prompt
    starts from the model's start token (its BOS, or the <|endoftext|> it was trained with
    between documents), and is refused for a model that has none. `temperature` and `seed`
    are read only when `sample`. `layer_ranks=False` skips the logit lens: it projects every
    layer's state through the vocabulary (SmolLM2: 30 x [tokens, 49,152]), about half as long
    again as the decoding itself on a CPU."""
    _check_decoder(adapter)
    _check_request(max_tokens, sample, temperature, top_k, seed)
    if sample and seed is None:
        seed = secrets.randbits(SEED_BITS)  # recorded in the result, so a draw can be repeated
    return adapter.generate(prompt, max_tokens, sample, temperature, seed, top_k, layer_ranks)


def generation_attention(adapter, gen: Generation) -> GenerationAttention:
    """Attention maps over prompt + generated tokens [layers, heads, n, n], from one forward of
    the whole sequence under eager attention (the maps the model computes; the decoding loop
    runs SDPA and keeps none). Refused when the maps would pass the engine's attention budget
    (layers x heads x n² float32, hf.forward.ATTENTION_BUDGET_BYTES)."""
    _check_decoder(adapter)
    return adapter.generation_attention(gen)


def _check_decoder(adapter) -> None:
    from engine.families.base import Generative

    if not isinstance(adapter, Generative):
        raise UnsupportedPrediction(f"{adapter.info.model_id} is not a decoder: generation "
                                    "needs a left-to-right LM with an output head")


def _check_request(max_tokens: int, sample: bool, temperature: float, top_k: int,
                   seed: int | None = None) -> None:
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise EngineError(f"ask for at least 1 token to generate (got {max_tokens})")
    if max_tokens > MAX_GENERATED_TOKENS:
        raise EngineError(f"at most {MAX_GENERATED_TOKENS} tokens per generation "
                          f"(asked for {max_tokens})")
    low, high = TEMPERATURES
    if sample and not (isinstance(temperature, (int, float)) and math.isfinite(temperature)
                       and low <= temperature <= high):
        # below 0.05 the softmax of float32 logits overflows into inf/nan probabilities
        raise EngineError(f"sampling needs a temperature from {low:g} to {high:g} "
                          f"(got {temperature})")
    if sample and seed is not None and not (isinstance(seed, int) and 0 <= seed <= MAX_SEED):
        raise EngineError(f"the seed is a whole number from 0 to {MAX_SEED} (got {seed})")
    if not isinstance(top_k, int) or top_k < 1:
        raise EngineError(f"top_k must be at least 1 (got {top_k})")
