"""Every common encoder and decoder architecture, every view, offline: tiny random checkpoints
(tests/arch_zoo.py) served from a model folder and as hub ids out of a temporary Hugging Face
cache, each view checked against the model's own outputs as transformers computes them."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.analysis.attention import word_attention
from engine.api import Engine
from engine.errors import UnsupportedPrediction
from tests.arch_zoo import ARCHITECTURES, DECODERS, ENCODERS, NEURON_VIEW_REFUSED, \
    into_hub_cache, matrix_markdown, save_arch

S = "She sat on the river bank and watched the water."
MASKED = "She sat on the river [MASK] and watched the water."


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    hub = tmp_path_factory.mktemp("hf-hub")
    folders = {}
    for name in ARCHITECTURES:
        folders[name] = save_arch(name, root / name)
        into_hub_cache(folders[name], hub, f"tiny-zoo/{name}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXLENS_MODEL_DIRS", str(root))
        mp.setenv("HF_HUB_CACHE", str(hub))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("CTXLENS_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield Engine(device="cpu"), {k: str(v) for k, v in folders.items()}


def own_outputs(folder: str, text: str, engine: Engine, model_id: str):
    """transformers' own hidden states, attention maps and logits for the tokens ctxlens
    feeds the model (eager attention, so that the maps exist)."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForMaskedLM if engine.family(model_id) == "bert" else AutoModelForCausalLM
    model = auto.from_pretrained(folder, attn_implementation="eager").eval()
    adapter = engine.adapter(model_id)
    from engine.families import hf_common as hf
    from engine.text import to_word_text

    t = hf.tokenize(adapter.tokenizer, adapter.prepare(to_word_text(text)), 512)
    ids = torch.tensor([t.input_ids])
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, output_attentions=True)
    return out, t


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_config_decides_the_family_by_mechanism(zoo, name):
    engine, folders = zoo
    expected = ("bert", "masked-lm") if name in ENCODERS else ("gpt", "both-sides")
    assert (engine.family(folders[name]), engine.fills_blank(folders[name])) == expected
    assert (engine.family(f"tiny-zoo/{name}"), engine.fills_blank(f"tiny-zoo/{name}")) == expected


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_hidden_states_of_every_layer_and_a_subset(zoo, name):
    engine, folders = zoo
    out, t = own_outputs(folders[name], S, engine, folders[name])
    enc = engine.encode(folders[name], [S])[0]
    own = torch.stack(out.hidden_states)[:, 0].numpy()
    assert enc.hidden_states.shape == own.shape
    np.testing.assert_allclose(enc.hidden_states, own, atol=1e-4)
    top = enc.hidden_states.shape[0] - 1
    for layers in ([0], [1, 0], [top]):      # stopping early, out of order, the top
        sub = engine.encode(folders[name], [S], layers=layers)[0]
        np.testing.assert_allclose(sub.hidden_states, enc.hidden_states[layers], atol=1e-5)
    # the same checkpoint as a hub id out of the local cache gives the same vectors
    hub = engine.encode(f"tiny-zoo/{name}", [S])[0]
    np.testing.assert_allclose(hub.hidden_states, enc.hidden_states, atol=1e-6)


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_attention_maps_are_the_models_own(zoo, name):
    engine, folders = zoo
    out, _ = own_outputs(folders[name], S, engine, folders[name])
    enc = engine.encode(folders[name], [S], attentions=True)[0]
    np.testing.assert_allclose(enc.attentions, torch.stack(out.attentions)[:, 0].numpy(),
                               atol=1e-5)
    # merged to the shared words, whatever the tokenizer's pieces: one entry per word and per
    # special token, every row still a distribution
    words = word_attention(enc.attentions, enc.token_to_word, len(enc.words))
    n_special = int((enc.token_to_word < 0).sum())
    assert words.shape[-1] == len(enc.words) + n_special
    np.testing.assert_allclose(words.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_neuron_view_rebuilds_attention_from_query_and_key(zoo, name):
    engine, folders = zoo
    enc = engine.encode(folders[name], [S], attentions=True)[0]
    n_layers, n_heads, n_tok, _ = enc.attentions.shape
    for layer in range(1, n_layers + 1):
        if name in NEURON_VIEW_REFUSED:
            with pytest.raises(UnsupportedPrediction, match=NEURON_VIEW_REFUSED[name]):
                engine.query_key(folders[name], S, layer)
            continue
        qk = engine.query_key(folders[name], S, layer)
        assert qk.queries.shape[:2] == (n_heads, n_tok)
        rows = np.array([[qk.attention(h, i) for i in range(n_tok)] for h in range(n_heads)])
        np.testing.assert_allclose(rows, enc.attentions[layer - 1], atol=1e-4)


@pytest.mark.parametrize("name", list(ENCODERS))
def test_masked_predictions_and_rescore_from_any_masked_lm_head(zoo, name):
    engine, folders = zoo
    out, t = own_outputs(folders[name], MASKED, engine, folders[name])
    tok = engine.adapter(folders[name]).tokenizer
    pos = t.input_ids.index(tok.mask_token_id)
    probs = torch.softmax(out.logits[0, pos], -1)
    pred = engine.predict_masked(folders[name], MASKED, top_k=3)
    assert pred.candidates[0].prob == pytest.approx(float(probs.max()), abs=1e-5)
    ranked = engine.predict_masked(folders[name], MASKED, top_k=5, rescore=True)
    assert len(ranked.candidates) == min(5, ranked.pool) and ranked.pool <= 30
    assert all(c.token.isalpha() for c in ranked.candidates)      # whole words, no pieces
    assert sum(c.prob for c in ranked.candidates) <= 1 + 1e-9


@pytest.mark.parametrize("name", list(DECODERS))
def test_logit_lens_top_layer_is_the_models_own_prediction(zoo, name):
    engine, folders = zoo
    out, _ = own_outputs(folders[name], S, engine, folders[name])
    lens = engine.logit_lens(folders[name], S)
    own = torch.softmax(out.logits[0].float(), -1).max(-1).values.numpy()
    np.testing.assert_allclose(lens.top_probs[-1], own, atol=1e-5)
    fill = engine.predict_masked(folders[name], MASKED, top_k=3)
    assert fill.method.startswith("top") and len(fill.candidates) == 3
    nxt = engine.predict_next(f"tiny-zoo/{name}", S, top_k=1)
    assert nxt.candidates[0].prob == pytest.approx(float(
        torch.softmax(out.logits[0, -1].float(), -1).max()), abs=1e-5)


def test_the_docs_show_the_tested_matrix():
    """docs/models.md's architecture × view table is the one these tests check (regenerate with
    `python -m tests.arch_zoo`); the README links to it."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert matrix_markdown() in (root / "docs" / "models.md").read_text()
    assert "docs/models.md" in (root / "README.md").read_text()


@pytest.mark.parametrize("name", ["gemma2", "mistral", "modernbert"])
def test_query_key_npz_rebuilds_soft_capped_and_windowed_attention(zoo, name, tmp_path):
    """The NPZ of `ctxlens attention --query-key` carries what the scores are made of for a
    soft-capped (Gemma-2), sliding-window (Mistral) or local-attention (ModernBERT) model:
    softmax(cap(q·kᵀ × scale)) over the allowed keys is the model's own map."""
    from engine import cli

    engine, folders = zoo
    long = " ".join([S] * 2)        # past the tiny sliding windows (8 tokens)
    out = tmp_path / "a.npz"
    assert cli.main(["attention", "--model", folders[name], "--text", long, "--output",
                     str(out), "--query-key", "--device", "cpu"]) == 0
    z = np.load(out)
    s = np.einsum("lhqd,lhkd->lhqk", z["query"].astype(np.float64), z["key"]) \
        * z["scale"][:, None, None, None]
    cap = z["softcap"][:, None, None, None]
    s = np.where(np.isnan(cap), s, np.tanh(s / np.where(np.isnan(cap), 1, cap)) * cap)
    s = np.where(z["allowed"][:, None], s, -np.inf)
    rebuilt = np.exp(s - s.max(-1, keepdims=True))
    rebuilt /= rebuilt.sum(-1, keepdims=True)
    assert not z["allowed"].all()                 # the window or the causal order is there
    np.testing.assert_allclose(rebuilt, z["attentions"], atol=1e-4)
    if name == "gemma2":
        assert np.all(z["softcap"] == 2.0)
