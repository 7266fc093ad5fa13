"""Every common encoder and decoder architecture, every view, offline: tiny random checkpoints
(tests/zoo.py) served from a model folder and as hub ids out of a temporary Hugging Face
cache, each view checked against the model's own outputs as transformers computes them.

Each test writes what it saw into OBSERVED (architecture -> view -> cell) once its checks have
passed; the last test renders docs/models.md's architecture matrix from those cells, so the
docs say what this run observed, not what someone marked."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from engine.analysis.attention import word_attention
from engine.api import Engine
from engine.errors import UnsupportedPrediction
from tests.zoo import ARCHITECTURES, DECODERS, ENCODERS, NEURON_VIEW_REFUSED, VIEWS, \
    WRITE_MATRIX_ENV, into_hub_cache, matrix_markdown, write_matrix

# architecture -> view (zoo.VIEWS, or "tokenizer") -> what the test of that cell saw
OBSERVED: dict[str, dict[str, str]] = {name: {} for name in ARCHITECTURES}
FAILED = "✗ (its test failed)"


def observing(name: str, view: str) -> None:
    """Marks the cell failed until the test that checks it records what it saw at its end:
    a test that stops half-way leaves a ✗ in the rendered matrix, not the last run's mark."""
    OBSERVED[name][view] = FAILED


def observed(name: str, view: str, cell: str) -> None:
    OBSERVED[name][view] = cell

S = "She sat on the river bank and watched the water."
MASKED = "She sat on the river [MASK] and watched the water."


@pytest.fixture(scope="module")
def served(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    hub = tmp_path_factory.mktemp("hf-hub")
    folders = {}
    for name in ARCHITECTURES:
        folders[name] = zoo.copy(f"arch:{name}", root / name)
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

    auto = AutoModelForMaskedLM if engine.family_name(model_id) == "bert" else AutoModelForCausalLM
    model = auto.from_pretrained(folder, attn_implementation="eager").eval()
    adapter = engine.adapter(model_id)
    from engine.families.hf import tokens
    from engine.text import to_word_text

    t = tokens.tokenize(adapter.tokenizer, adapter.spell_mask(to_word_text(text)), 512)
    ids = torch.tensor([t.input_ids])
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, output_attentions=True)
    return out, t


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_config_decides_the_family_by_mechanism(served, name):
    engine, folders = served
    for view in (VIEWS[0], "checkpoint", "tokenizer"):
        observing(name, view)
    expected = ("bert", "masked_lm") if name in ENCODERS else ("gpt", "next_word")
    for model_id in (folders[name], f"tiny-zoo/{name}"):
        entry = engine.resolved(model_id)
        assert entry.family == expected[0] and expected[1] in entry.capabilities
        # the neuron view's refusal is known from the config, before anything loads
        assert ("query_key" in entry.cannot) == (name in NEURON_VIEW_REFUSED)
    observed(name, VIEWS[0], "✓")
    # the matrix names the model class and the tokenizer as the engine loaded them
    adapter = engine.adapter(folders[name])
    observed(name, "checkpoint", type(adapter.model).__name__)
    tok = adapter.tokenizer
    pieces = tok.get_vocab()
    kind = ("wordpiece" if type(tok.backend_tokenizer.model).__name__ == "WordPiece" else
            "byte" if any(p.startswith("\u0120") for p in pieces) else
            "meta" if any(p.startswith("\u2581") for p in pieces) else "other")
    observed(name, "tokenizer", kind)


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_hidden_states_of_every_layer_and_a_subset(served, name):
    engine, folders = served
    observing(name, VIEWS[1])
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
    observed(name, VIEWS[1], "✓")


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_attention_maps_are_the_models_own(served, name):
    engine, folders = served
    observing(name, VIEWS[2])
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
    observed(name, VIEWS[2], "✓")


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_neuron_view_rebuilds_attention_from_query_and_key(served, name):
    engine, folders = served
    observing(name, VIEWS[3])
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
    observed(name, VIEWS[3], "— (relative positions: said why)" if name in NEURON_VIEW_REFUSED
             else "✓")


# the vocabulary row of a whole word, as each tokenizer kind spells it ("bank", "Ġbank", "▁bank")
WORD_START = {"wordpiece": "", "byte": "\u0120", "meta": "\u2581"}


def share_gaps(pred) -> list[float]:
    """log(share of the first candidate / share of each): a ranking's shares are a softmax of
    its scores over the whole pool, so these are score differences whatever the pool held."""
    return [math.log(pred.candidates[0].prob / c.prob) for c in pred.candidates]


def pseudo_log_likelihood(model, ids: torch.Tensor, pos: int, word_id: int, head_logp,
                          specials: set[int], mask_id: int) -> float:
    """Salazar et al. 2020 by hand: the head's log-probability of the word at the blank, plus
    each other token's log-probability with that token masked and the word in the blank."""
    filled = ids.clone()
    filled[pos] = word_id
    others = [i for i, t in enumerate(ids.tolist()) if i != pos and t not in specials]
    batch = filled.repeat(len(others), 1)
    for row, i in enumerate(others):
        batch[row, i] = mask_id
    with torch.no_grad():
        logp = model(input_ids=batch).logits.float().log_softmax(-1)
    return float(head_logp[word_id]) + sum(float(logp[row, i, filled[i]])
                                           for row, i in enumerate(others))


@pytest.mark.parametrize("name", list(ENCODERS))
def test_masked_predictions_and_rescore_from_any_masked_lm_head(served, name):
    from transformers import AutoModelForMaskedLM

    engine, folders = served
    observing(name, VIEWS[4])
    out, t = own_outputs(folders[name], MASKED, engine, folders[name])
    tok = engine.adapter(folders[name]).tokenizer
    pos = t.input_ids.index(tok.mask_token_id)
    probs = torch.softmax(out.logits[0, pos], -1)
    pred = engine.predict_masked(folders[name], MASKED, top_k=3)
    assert pred.candidates[0].prob == pytest.approx(float(probs.max()), abs=1e-5)
    ranked = engine.predict_masked(folders[name], MASKED, top_k=3, rescore=True)
    assert len(ranked.candidates) == 3 and ranked.ranked_among <= 30
    assert all(c.token.isalpha() for c in ranked.candidates)      # whole words, no pieces
    # --rescore ranks by each sentence's pseudo-log-likelihood, worked out here with the
    # model's own head (the head's probability alone would give other gaps)
    model = AutoModelForMaskedLM.from_pretrained(folders[name],
                                                 attn_implementation="eager").eval()
    head = out.logits[0, pos].float().log_softmax(-1)
    ids = torch.tensor(t.input_ids)
    pll = [pseudo_log_likelihood(
        model, ids, pos, tok.convert_tokens_to_ids(WORD_START[ENCODERS[name][1]] + c.token),
        head, set(tok.all_special_ids), tok.mask_token_id) for c in ranked.candidates]
    np.testing.assert_allclose(share_gaps(ranked), [pll[0] - p for p in pll], atol=1e-3)
    observed(name, VIEWS[4], "✓")


@pytest.mark.parametrize("name", list(DECODERS))
def test_a_decoder_fills_a_blank_ranked_by_the_sentence_each_word_makes(served, name):
    """A GPT's filled blank: its candidates' shares are those of the log-probability of the
    whole sentence each makes, worked out here with transformers (a ranking by the left context
    alone, or by the candidate's own tokens, gives other gaps). The tiny checkpoints' 96
    positions hold no fill-in-the-blank prompt, so their candidates come from the left side."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    engine, folders = served
    observing(name, VIEWS[4])
    fill = engine.predict_masked(folders[name], MASKED, top_k=3)
    assert len(fill.candidates) == 3 and "re-ranked by the whole sentence" in fill.method
    tok = AutoTokenizer.from_pretrained(folders[name])
    model = AutoModelForCausalLM.from_pretrained(folders[name]).eval()

    def log_prob(sentence: str) -> float:
        ids = tok(sentence)["input_ids"]
        with torch.no_grad():
            logp = model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)
        return float(sum(logp[i - 1, ids[i]] for i in range(1, len(ids))))

    whole = [log_prob(MASKED.replace("[MASK]", c.token)) for c in fill.candidates]
    np.testing.assert_allclose(share_gaps(fill), [whole[0] - w for w in whole], atol=1e-3)
    observed(name, VIEWS[4], "✓ (re-ranked)")


@pytest.mark.parametrize("name", list(ENCODERS))
def test_an_encoder_says_it_has_no_next_word_or_logit_lens(served, name):
    engine, folders = served
    observing(name, VIEWS[5])
    with pytest.raises(UnsupportedPrediction):
        engine.predict_next(folders[name], S, top_k=1)
    with pytest.raises(UnsupportedPrediction):
        engine.logit_lens(folders[name], S)
    observed(name, VIEWS[5], "—")


@pytest.mark.parametrize("name", list(DECODERS))
def test_logit_lens_top_layer_is_the_models_own_prediction(served, name):
    engine, folders = served
    observing(name, VIEWS[5])
    out, _ = own_outputs(folders[name], S, engine, folders[name])
    lens = engine.logit_lens(folders[name], S)
    own = torch.softmax(out.logits[0].float(), -1).max(-1).values.numpy()
    np.testing.assert_allclose(lens.top_probs[-1], own, atol=1e-5)
    nxt = engine.predict_next(f"tiny-zoo/{name}", S, top_k=1)
    assert nxt.candidates[0].prob == pytest.approx(float(
        torch.softmax(out.logits[0, -1].float(), -1).max()), abs=1e-5)
    observed(name, VIEWS[5], "✓")


@pytest.mark.parametrize("name", ["gemma2", "mistral", "modernbert"])
def test_query_key_npz_rebuilds_soft_capped_and_windowed_attention(served, name, tmp_path):
    """The NPZ of `ctxlens attention --query-key` carries what the scores are made of for a
    soft-capped (Gemma-2), sliding-window (Mistral) or local-attention (ModernBERT) model:
    softmax(cap(q·kᵀ × scale)) over the allowed keys is the model's own map."""
    from engine import cli

    engine, folders = served
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


def test_the_docs_show_the_matrix_these_tests_observed():
    """docs/models.md's architecture × view table is rendered from OBSERVED, the cells the
    tests above recorded in this run (last in the file, so that they have run: each file runs
    on one worker). `python -m tests.zoo` runs this file and writes the table it renders;
    the README links to the page."""
    from pathlib import Path

    missing = [f"{name}: {view}" for name in ARCHITECTURES for view in (*VIEWS, "tokenizer")
               if view not in OBSERVED[name]]
    if missing:
        pytest.skip(f"{len(missing)} cells were not checked in this run ({missing[0]}, ...): "
                    "the matrix needs the whole of tests/engine/test_architectures.py")
    root = Path(__file__).resolve().parents[2]
    if os.environ.get(WRITE_MATRIX_ENV):
        write_matrix(root / "docs" / "models.md", OBSERVED)
    assert matrix_markdown(OBSERVED) in (root / "docs" / "models.md").read_text()
    assert "docs/models.md" in (root / "README.md").read_text()
