"""Generation by a causal LM (engine/generation.py: the request's checks and bounds, the same
for every decoder; the module docstring there says how decoding and sampling go). The GPT
adapter takes this as a mixin (base.Generative): the prompt's tokens, the decoding loop with
the key/value cache, each step's numbers, the logit lens's ranks and the attention maps of
the whole sequence read the model, its tokenizer, final norm and head, which only the family
knows."""
from __future__ import annotations

import numpy as np

from engine.errors import EngineError
from engine.families.hf import forward, tokens
from engine.families.hf.tokens import TokenizedText
from engine.generation_result import Generation, GenerationAttention
from engine.text import WordText, to_word_text


class Generating:
    """GPTAdapter.generate, stop_ids and generation_attention (base.Generative)."""

    def generate(self, prompt: WordText | str, max_tokens: int, sample: bool,
                 temperature: float, seed: int | None, top_k: int,
                 layer_ranks: bool) -> Generation:
        """engine.generation.generate, its request checked and its seed drawn."""
        import torch

        text, prompt_ids = _prompt_ids(self, prompt)
        if len(prompt_ids) + max_tokens > self.max_tokens:
            raise EngineError(f"the prompt has {len(prompt_ids)} tokens and {max_tokens} more "
                              f"would pass this model's {self.max_tokens} positions: ask for at "
                              f"most {max(self.max_tokens - len(prompt_ids), 0)} tokens or "
                              "shorten the prompt")
        with torch.inference_mode():
            lens = layer_ranks and self.info.has_logit_lens
            ids, logits, states, sampled = _decode(self, prompt_ids, max_tokens,
                                                   temperature if sample else None, seed, lens)
            chosen = torch.tensor(ids, device=logits.device)
            prob, entropy, top_ids, top_probs, own_rank = _step_stats(logits, chosen, top_k)
            ranks = _layer_ranks(self, states, chosen, own_rank) if lens else None
        return _result(self, text, prompt_ids, ids, prob, entropy, top_ids, top_probs, ranks,
                       sample, temperature, seed, sampled)

    def stop_ids(self) -> set[int]:
        return _eos_ids(self)

    def generation_attention(self, gen: Generation) -> GenerationAttention:
        return _attention(self, gen)


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


def _attention(adapter, gen: Generation) -> GenerationAttention:
    """Attention maps over prompt + generated tokens [layers, heads, n, n], from one forward of
    the whole sequence under eager attention (the maps the model computes; the decoding loop
    runs SDPA and keeps none). Refused when the maps would pass the engine's attention budget
    (layers x heads x n² float32, hf.forward.ATTENTION_BUDGET_BYTES)."""
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
