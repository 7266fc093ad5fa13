"""Generation (engine/generation.py) on the tiny random decoders of the architecture matrix
(tests/zoo.py), each checked against transformers itself: model.generate's tokens, a plain
forward over the prompt and the tokens generated so far, a seeded multinomial written here."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from engine.api import Engine
from engine.errors import EngineError, UnsupportedPrediction
from engine.families.gpt import final_norm
from engine.families.hf.tokens import readable_tokens
from engine.generation import MAX_GENERATED_TOKENS, generate, generation_attention
from engine.text import to_word_text
from tests.zoo import DECODERS, POS

PROMPT = "She sat on the river bank and"
N = 12


@pytest.fixture(scope="module")
def served(zoo, tmp_path_factory):
    """Engine-loaded adapters and the folders of every tiny decoder (and one encoder)."""
    root = tmp_path_factory.mktemp("gen-zoo")
    folders = {name: str(zoo.copy(f"arch:{name}", root / name)) for name in [*DECODERS, "bert"]}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXLENS_MODEL_DIRS", str(root))
        mp.setenv("CTXLENS_CACHE", str(tmp_path_factory.mktemp("cache")))
        engine = Engine(device="cpu")
        yield {name: engine.adapter(f, progress=False) for name, f in folders.items()}, folders


def own_model(folder: str):
    """The checkpoint as transformers loads it, apart from the engine's copy (eager attention,
    so that its maps exist)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()


def own_logits(model, ids) -> torch.Tensor:
    """The model's logits [T, V] for the whole sequence, no cache."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([list(ids)])).logits[0].float()


def hf_generate(model, gen, n: int, eos, **kw) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([list(gen.prompt_ids)]), max_new_tokens=n,
                             eos_token_id=sorted(eos), pad_token_id=0, **kw)
    return out[0, len(gen.prompt_ids):].tolist()


@pytest.mark.parametrize("name", list(DECODERS))
def test_greedy_tokens_equal_model_generate(served, name):
    adapters, folders = served
    gen = generate(adapters[name], PROMPT, N)
    ref = hf_generate(own_model(folders[name]), gen, N, adapters[name].stop_ids(),
                      do_sample=False)
    assert list(gen.token_ids) == ref
    assert gen.stopped == ("eos" if len(ref) < N else "max_tokens")


@pytest.mark.parametrize("name", ["gpt2", "llama", "gemma2"])
def test_step_numbers_equal_a_plain_forward_on_the_prefix(served, name):
    """prob, entropy and top at step i are the softmax of the model's logits after
    prompt + tokens 0..i-1, run whole without a cache (Gemma-2: soft-capped logits)."""
    adapters, folders = served
    model = own_model(folders[name])
    gen = generate(adapters[name], PROMPT, N, top_k=4)
    for i, tid in enumerate(gen.token_ids):
        logp = torch.log_softmax(own_logits(model, gen.context_ids(i))[-1], -1)
        p = logp.exp()
        assert gen.prob[i] == pytest.approx(float(p[tid]), abs=1e-5)
        assert gen.entropy[i] == pytest.approx(float(-(p * logp).sum()), abs=1e-4)
        top_p, top_ids = torch.topk(p, 4)
        np.testing.assert_allclose(gen.top_probs[i], top_p.numpy(), atol=1e-5)
        assert gen.top_ids[i].tolist() == top_ids.tolist()
        assert gen.top_tokens[i] == readable_tokens(adapters[name].tokenizer, top_ids.tolist())
    assert gen.sampled_prob is None


def rank_bounds(logits: torch.Tensor, tid: int, eps: float = 1e-4) -> tuple[int, int]:
    """The chosen token's rank, allowing for float noise between a cached and a whole run:
    scores within eps of the chosen one may fall either side."""
    x = logits[tid]
    return int((logits > x + eps).sum()) + 1, int((logits > x - eps).sum()) + 1


@pytest.mark.parametrize("name", ["gpt2", "llama", "gemma2"])
def test_layer_ranks_are_the_logit_lens_rank_at_every_layer(served, name):
    """Below the top: the layer's hidden state through the final norm and the head (and
    Gemma-2's cap), computed here; the top layer: the rank in the model's own logits."""
    adapters, folders = served
    model = own_model(folders[name])
    norm, head = final_norm(model), model.get_output_embeddings()
    cap = getattr(model.config, "final_logit_softcapping", None)
    gen = generate(adapters[name], PROMPT, N)
    n_layers = model.config.num_hidden_layers
    assert gen.layer_ranks.shape == (len(gen.token_ids), n_layers + 1)
    assert len(gen.layer_names) == n_layers + 1
    for i, tid in enumerate(gen.token_ids):
        with torch.no_grad():
            out = model(input_ids=torch.tensor([list(gen.context_ids(i))]),
                        output_hidden_states=True)
            for layer in range(n_layers):
                lens = head(norm(out.hidden_states[layer][0, -1])).float()
                lens = torch.tanh(lens / cap) * cap if cap else lens
                lo, hi = rank_bounds(lens, tid)
                assert lo <= gen.layer_ranks[i, layer] <= hi, (i, layer)
        lo, hi = rank_bounds(out.logits[0, -1].float(), tid)
        assert lo <= gen.layer_ranks[i, -1] <= hi
    assert (gen.layer_ranks[:, -1] == 1).all()          # greedy: the model's own top token
    assert (gen.layer_ranks[:, :-1] > 1).any()          # and the lower layers are read apart


def test_without_a_logit_lens_the_steps_are_the_same_and_ranks_absent(served, monkeypatch):
    from dataclasses import replace

    adapter = served[0]["llama"]
    full = generate(adapter, PROMPT, 5)
    quick = generate(adapter, PROMPT, 5, layer_ranks=False)
    assert quick.layer_ranks is None and quick.token_ids == full.token_ids
    np.testing.assert_array_equal(quick.prob, full.prob)
    monkeypatch.setattr(adapter, "info", replace(adapter.info, has_logit_lens=False))
    no_lens = generate(adapter, PROMPT, 5)
    assert no_lens.layer_ranks is None
    assert all(s["layer_ranks"] is None for s in no_lens.to_json()["steps"])


def test_the_first_step_is_the_next_word_prediction(served):
    adapters, _ = served
    gen = generate(adapters["llama"], PROMPT, 1, top_k=5)
    pred = adapters["llama"].predict_next(to_word_text(PROMPT), top_k=5)
    np.testing.assert_allclose(gen.top_probs[0], [c.prob for c in pred.candidates], atol=1e-6)


def test_each_new_token_runs_alone_on_the_cache(served):
    """One forward over the prompt, then one per new token with that token only (the last
    token is chosen, never run)."""
    adapters, _ = served
    adapter = adapters["gpt2"]
    lengths: list[int] = []
    hook = adapter.model.register_forward_pre_hook(
        lambda m, args, kw: lengths.append(kw["input_ids"].shape[1]), with_kwargs=True)
    try:
        gen = generate(adapter, PROMPT, 6)
    finally:
        hook.remove()
    assert lengths == [len(gen.prompt_ids)] + [1] * (len(gen.token_ids) - 1)


def hand_sampled(model, prompt_ids, n: int, temperature: float, seed: int) -> list[int]:
    """The documented draw, written out: softmax(logits / T) of a whole-sequence forward, one
    torch.multinomial per token from a torch.Generator seeded once."""
    g = torch.Generator().manual_seed(seed)
    ids = list(prompt_ids)
    for _ in range(n):
        p = torch.softmax(own_logits(model, ids)[-1] / temperature, -1)
        ids.append(int(torch.multinomial(p, 1, generator=g)))
    return ids[len(prompt_ids):]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_seeded_sampling_is_the_documented_multinomial(served, name):
    adapters, folders = served
    model = own_model(folders[name])
    gen = generate(adapters[name], PROMPT, N, sample=True, temperature=1.5, seed=7)
    assert gen.stopped == "max_tokens"      # these seeds draw no end token on these models
    assert list(gen.token_ids) == hand_sampled(model, gen.prompt_ids, N, 1.5, 7)
    # model.generate draws the same from the global RNG with no top-k / top-p filter
    torch.manual_seed(7)
    assert list(gen.token_ids) == hf_generate(model, gen, N, adapters[name].stop_ids(), do_sample=True, temperature=1.5, top_k=0, top_p=1.0)
    for i, tid in enumerate(gen.token_ids):
        logits = own_logits(model, gen.context_ids(i))[-1]
        assert gen.sampled_prob[i] == pytest.approx(
            float(torch.softmax(logits / 1.5, -1)[tid]), abs=1e-5)
        assert gen.prob[i] == pytest.approx(float(torch.softmax(logits, -1)[tid]), abs=1e-5)


def test_a_seed_repeats_its_draw_and_other_seeds_differ(served):
    adapter = served[0]["gpt2"]
    runs = [generate(adapter, PROMPT, N, sample=True, temperature=2.0, seed=s).token_ids
            for s in (1, 1, 2, 3)]
    assert runs[0] == runs[1]
    assert runs[2] != runs[0] and runs[3] != runs[0]
    before = torch.random.get_rng_state()
    drawn = generate(adapter, PROMPT, 3, sample=True)
    assert drawn.seed is not None           # recorded, so the draw can be repeated
    assert generate(adapter, PROMPT, 3, sample=True, seed=drawn.seed).token_ids == \
        drawn.token_ids
    assert torch.equal(torch.random.get_rng_state(), before)      # the global RNG untouched


def test_generation_stops_after_an_end_token(served, monkeypatch):
    adapter = served[0]["gpt2"]
    free = generate(adapter, PROMPT, N)
    assert free.stopped == "max_tokens" and len(free.token_ids) == N
    end = free.token_ids[3]
    first = free.token_ids.index(end)
    monkeypatch.setattr(adapter.model.generation_config, "eos_token_id", end)
    stopped = generate(adapter, PROMPT, N)
    assert stopped.stopped == "eos"
    assert stopped.token_ids == free.token_ids[:first + 1]      # the end token is kept


def test_an_empty_prompt_starts_from_the_start_token(served):
    adapters, _ = served
    llama, gpt2 = adapters["llama"], adapters["gpt2"]
    assert generate(llama, "", 3).prompt_ids == (llama.tokenizer.bos_token_id,)  # its own BOS
    assert generate(gpt2, "  ", 3).prompt_ids == (gpt2._start_id,)     # the document start


def test_bad_requests_are_refused_in_one_line(served, monkeypatch):
    adapters, _ = served
    gpt2 = adapters["gpt2"]
    cases = [(dict(max_tokens=0), "at least 1 token"),
             (dict(max_tokens=-3), "at least 1 token"),
             (dict(max_tokens=10_000), f"at most {MAX_GENERATED_TOKENS} tokens"),
             (dict(max_tokens=MAX_GENERATED_TOKENS + 1), f"at most {MAX_GENERATED_TOKENS}"),
             (dict(max_tokens=3, sample=True, temperature=0), "temperature from 0.05 to 5"),
             (dict(max_tokens=3, sample=True, temperature=-1.0), "temperature from 0.05"),
             (dict(max_tokens=3, sample=True, temperature=math.nan), "temperature from 0.05"),
             # issue 66 L6, for the Engine as for the CLI: 1e-45 overflowed the softmax
             (dict(max_tokens=3, sample=True, temperature=1e-45), "temperature from 0.05"),
             (dict(max_tokens=3, sample=True, temperature=50.0), "temperature from 0.05"),
             (dict(max_tokens=3, sample=True, seed=-1), "seed is a whole number from 0"),
             (dict(max_tokens=3, sample=True, seed=10 ** 23), "seed is a whole number from 0"),
             (dict(max_tokens=3, top_k=0), "top_k must be at least 1"),
             (dict(max_tokens=POS), "pass this model's 96 positions: ask for at most")]
    for kw, line in cases:
        with pytest.raises(EngineError, match=line) as err:
            generate(gpt2, PROMPT, **kw)
        assert "\n" not in str(err.value)
    assert generate(gpt2, PROMPT, 2, temperature=0).stopped   # greedy ignores the temperature
    with pytest.raises(EngineError, match="its cap is 96"):
        generate(gpt2, " ".join(["bank"] * 120), 2)
    with pytest.raises(UnsupportedPrediction, match="not a decoder"):
        generate(adapters["bert"], PROMPT, 2)
    monkeypatch.setitem(gpt2.__dict__, "_start_id", None)   # a model without a start token
    with pytest.raises(EngineError, match="no start token"):
        generate(gpt2, "", 2)


def test_contexts_read_back_as_the_ids_an_attribution_explains(served):
    adapters, _ = served
    for name in ("gpt2", "llama"):
        tok = adapters[name].tokenizer
        gen = generate(adapters[name], PROMPT, N)
        assert gen.contexts[0] == PROMPT
        assert all(c.startswith(PROMPT) for c in gen.contexts)
        assert all((PROMPT + gen.text).startswith(c) for c in gen.contexts)
        # each the one before and one more token (a lone space piece may add no character)
        assert all(b.startswith(a) for a, b in zip(gen.contexts, gen.contexts[1:]))
        for i, c in enumerate(gen.contexts):
            assert gen.context_round_trips[i] == (tuple(tok(c)["input_ids"]) ==
                                                  gen.context_ids(i))
        assert gen.context_round_trips[0]


def test_attention_over_prompt_and_generated_is_the_models_own(served, monkeypatch):
    adapters, folders = served
    gen = generate(adapters["llama"], PROMPT, 5)
    att = generation_attention(adapters["llama"], gen)
    n = len(gen.prompt_ids) + len(gen.token_ids)
    assert att.attentions.shape == (2, 4, n, n) and att.n_prompt == len(gen.prompt_ids)
    with torch.no_grad():
        out = own_model(folders["llama"])(
            input_ids=torch.tensor([list(gen.prompt_ids + gen.token_ids)]),
            output_attentions=True)
    np.testing.assert_allclose(att.attentions, torch.stack(out.attentions)[:, 0].numpy(),
                               atol=1e-5)
    monkeypatch.setattr("engine.families.hf.forward.ATTENTION_BUDGET_BYTES", 1000)
    with pytest.raises(EngineError, match="generate fewer tokens"):
        generation_attention(adapters["llama"], gen)


def test_json_holds_the_cli_keys_per_step(served):
    adapter = served[0]["gpt2"]
    greedy = json.loads(json.dumps(generate(adapter, PROMPT, 4, top_k=3).to_json()))
    assert {"tokens", "text", "steps", "stopped", "prompt_tokens"} <= set(greedy)
    assert len(greedy["steps"]) == len(greedy["tokens"]) == 4
    step = greedy["steps"][0]
    assert {"prob", "entropy", "top", "layer_ranks"} <= set(step)
    assert "sampled_prob" not in step and len(step["top"]) == 3
    assert len(step["layer_ranks"]) == len(greedy["layer_names"]) == 3
    drawn = generate(adapter, PROMPT, 4, sample=True, temperature=0.7, seed=5).to_json()
    assert drawn["decoding"] == {"method": "sampling", "temperature": 0.7, "seed": 5}
    assert all("sampled_prob" in s for s in drawn["steps"])


@pytest.mark.slow
def test_smollm2_greedy_tokens_equal_model_generate():
    from engine.registry import availability, load_registry

    if availability(load_registry()["smollm2-135m"]) != "bundled":
        pytest.skip("smollm2-135m is not installed; run `make install`")
    adapter = Engine(device="cpu").adapter("smollm2-135m", progress=False)
    gen = generate(adapter, "The bank raised its interest rates because", 24)
    with torch.no_grad():
        ref = adapter.model.generate(torch.tensor([list(gen.prompt_ids)]), do_sample=False,
                                     max_new_tokens=24, pad_token_id=adapter.pad_id)
    assert list(gen.token_ids) == ref[0, len(gen.prompt_ids):].tolist()
    assert (gen.layer_ranks[:, -1] == 1).all() and gen.layer_ranks.shape[1] == 31
