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

import numpy as np

from engine.errors import EngineError, UnsupportedPrediction
from engine.generation_result import Generation, GenerationAttention
from engine.text import WordText, to_word_text

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
    import torch

    _check_decoder(adapter)
    _check_request(max_tokens, sample, temperature, top_k, seed)
    text, prompt_ids = _prompt_ids(adapter, prompt)
    if len(prompt_ids) + max_tokens > adapter.max_tokens:
        raise EngineError(f"the prompt has {len(prompt_ids)} tokens and {max_tokens} more would "
                          f"pass this model's {adapter.max_tokens} positions: ask for at most "
                          f"{max(adapter.max_tokens - len(prompt_ids), 0)} tokens or shorten "
                          "the prompt")
    if sample and seed is None:
        seed = secrets.randbits(SEED_BITS)  # recorded in the result, so a draw can be repeated
    with torch.inference_mode():
        lens = layer_ranks and adapter.info.has_logit_lens
        ids, logits, states, sampled = _decode(adapter, prompt_ids, max_tokens,
                                               temperature if sample else None, seed, lens)
        chosen = torch.tensor(ids, device=logits.device)
        prob, entropy, top_ids, top_probs, own_rank = _step_stats(logits, chosen, top_k)
        ranks = _layer_ranks(adapter, states, chosen, own_rank) if lens else None
    return _result(adapter, text, prompt_ids, ids, prob, entropy, top_ids, top_probs, ranks,
                   sample, temperature, seed, sampled)


def _check_decoder(adapter) -> None:
    from engine.families.base import Transformer

    if not (isinstance(adapter, Transformer) and adapter.own_kind == "next"):
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


def _prompt_ids(adapter, prompt: WordText | str) -> tuple[str, list[int]]:
    """The prompt as the model reads it, tokenised as predict_next tokenises it (so the first
    step is the next-word prediction of the same text), and its text as fed."""
    raw = prompt.text if isinstance(prompt, WordText) else str(prompt)
    if raw.strip():
        wt = prompt if isinstance(prompt, WordText) else to_word_text(raw)
        t, _ = adapter._input(wt)
        return wt.text.rstrip(), list(t.input_ids)
    ids = list(adapter.tokenizer("")["input_ids"])        # a tokenizer that adds a BOS gives it
    if not ids and adapter._start_id is not None:
        ids = [adapter._start_id]
    if not ids:
        raise EngineError("the prompt is empty and this model has no start token to begin "
                          "from: type a prompt")
    return "", ids


def _decode(adapter, prompt_ids: list[int], n: int, temperature: float | None,
            seed: int | None, keep_states: bool = True):
    """The decoding loop: chosen ids, the model's logits at each step [G, V] (float32), the
    hidden states of every layer at each predicting position [G, layers+1, D] (when
    `keep_states`, else None), and with sampling the probability each draw was made with
    ([G], else None)."""
    import torch

    model, device = adapter.model, adapter.device
    stop = _eos_ids(adapter)
    gen = torch.Generator(device=device).manual_seed(seed) if temperature is not None else None
    out = model(input_ids=torch.tensor([prompt_ids], device=device), use_cache=True,
                output_hidden_states=keep_states, logits_to_keep=1)
    ids, logits, states, sampled = [], [], [], []
    for step in range(n):
        row = out.logits[0, -1].float()      # the model's own logits (soft-capped where it caps)
        logits.append(row)
        if keep_states:
            states.append(torch.stack([h[0, -1] for h in out.hidden_states]))  # (L+1, D)
        if gen is None:
            nxt = int(row.argmax())
        else:
            p = torch.softmax(row / temperature, dim=-1)
            nxt = int(torch.multinomial(p, 1, generator=gen))
            sampled.append(float(p[nxt]))
        ids.append(nxt)
        if nxt in stop or step == n - 1:
            break
        out = model(input_ids=torch.tensor([[nxt]], device=device), cache=out.cache,
                    use_cache=True, output_hidden_states=keep_states)
    return (ids, torch.stack(logits), torch.stack(states) if keep_states else None,
            np.array(sampled, np.float32) if gen is not None else None)


def _eos_ids(adapter) -> set[int]:
    """The ids that end a generation: the generation config's (what model.generate stops at),
    the model config's and the tokenizer's end-of-sequence tokens."""
    found: set[int] = set()
    for source in (getattr(adapter.model, "generation_config", None), adapter.model.config,
                   adapter.tokenizer):
        tid = getattr(source, "eos_token_id", None)
        found.update([tid] if isinstance(tid, int) else (tid or []))
    return found


def _step_stats(logits, chosen, top_k: int):
    """Per step, from the model's softmax at temperature 1: the chosen token's probability,
    the entropy in nats, the top-k ids and probabilities, and the chosen token's rank."""
    import torch

    logp = torch.log_softmax(logits, dim=-1)                                   # (G, V)
    p = logp.exp()
    entropy = -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1)
    top_p, top_ids = torch.topk(p, min(top_k, p.shape[-1]), dim=-1)
    return (p.gather(-1, chosen[:, None])[:, 0], entropy, top_ids, top_p,
            _ranks(logits, chosen))


def _ranks(logits, chosen):
    """1 + how many tokens score strictly higher than the chosen one, per row."""
    return (logits > logits.gather(-1, chosen[:, None])).sum(-1) + 1


def _layer_ranks(adapter, states, chosen, own_rank):
    """The chosen token's rank at every layer [G, layers+1]: each layer's state through the
    final norm, the output head and the model's logit cap, as GPTAdapter.logit_lens reads
    them; the top layer is the model's own logits (transformers returns that state already
    normed). One layer at a time, so only [G, V] logits exist at once."""
    import torch

    cols = [_ranks(adapter._logits(adapter.head(adapter.norm(states[:, i]))), chosen)
            for i in range(states.shape[1] - 1)]
    return torch.stack(cols + [own_rank], dim=1)


def _result(adapter, text, prompt_ids, ids, prob, entropy, top_ids, top_probs, ranks,
            sample, temperature, seed, sampled) -> Generation:
    from engine.families.hf import forward, tokens

    tok = adapter.tokenizer
    readable = tokens.readable_tokens(tok, prompt_ids + ids, sequence=True)
    n_p = len(prompt_ids)
    head = tok.decode(prompt_ids, skip_special_tokens=True)
    contexts = [text + _continuation(tok, prompt_ids, head, ids[:i]) for i in range(len(ids))]
    re_read = tok(contexts)["input_ids"]
    round_trips = [list(r) == prompt_ids + ids[:i] for i, r in enumerate(re_read)]
    n_layers = ranks.shape[1] - 1 if ranks is not None else 0
    return Generation(
        adapter.info.model_id, text, tuple(prompt_ids), readable[:n_p], tuple(ids),
        readable[n_p:], _continuation(tok, prompt_ids, head, ids), _np(prob), _np(entropy),
        tuple(tokens.readable_tokens(tok, row) for row in top_ids.tolist()), _np(top_probs),
        top_ids.cpu().numpy().astype(np.int64),
        None if ranks is None else ranks.cpu().numpy().astype(np.int64),
        tuple(contexts), tuple(round_trips),
        "eos" if ids[-1] in _eos_ids(adapter) else "max_tokens",
        sample=sample, temperature=float(temperature), seed=seed if sample else None,
        sampled_prob=sampled,
        layer_names=forward.layer_names(n_layers) if ranks is not None else ())


def _continuation(tokenizer, prompt_ids: list[int], head: str, more: list[int]) -> str:
    """The decoding of `more` as it reads after the prompt (`head`: the prompt's own decoding),
    special tokens left out. Decoded together with the prompt, since SentencePiece decoders
    drop the space of a text's first piece ("▁raised" alone -> "raised")."""
    if not more:
        return ""
    full = tokenizer.decode(prompt_ids + more, skip_special_tokens=True)
    return full[len(head):] if full.startswith(head) else \
        tokenizer.decode(more, skip_special_tokens=True)


def _np(t) -> np.ndarray:
    return t.float().cpu().numpy().astype(np.float32)


def generation_attention(adapter, gen: Generation) -> GenerationAttention:
    """Attention maps over prompt + generated tokens [layers, heads, n, n], from one forward of
    the whole sequence under eager attention (the maps the model computes; the decoding loop
    runs SDPA and keeps none). Refused when the maps would pass the engine's attention budget
    (layers x heads x n² float32, hf.forward.ATTENTION_BUDGET_BYTES)."""
    from engine.families.hf import forward
    from engine.families.hf.tokens import TokenizedText

    _check_decoder(adapter)
    ids = gen.prompt_ids + gen.token_ids
    cfg = adapter.model.config
    need = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * len(ids) ** 2
    if need > forward.ATTENTION_BUDGET_BYTES:
        raise EngineError(f"attention over {len(ids)} tokens would take {need / 2**20:.0f} MB "
                          f"(budget {forward.ATTENTION_BUDGET_BYTES // 2**20} MB): generate "
                          "fewer tokens or shorten the prompt")
    # run_layers reads only the ids of a TokenizedText; these tokens map to no typed word
    seq = TokenizedText(WordText(gen.prompt + gen.text, (), ()), ids,
                        gen.prompt_tokens + gen.tokens, np.full(len(ids), -1))
    out, = forward.run_layers(adapter.encoder, [seq], adapter.pad_id, attentions=True,
                              layers=[0])
    return GenerationAttention(gen.model_id, seq.tokens, len(gen.prompt_ids), out.attentions)
