"""BERT family adapter on tiny random checkpoints built here (WordPiece tokenizer, 2 layers)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from engine.api import Engine
from engine.errors import EngineError, ModelUnavailable, UnsupportedPrediction
from engine.families.base import Adapter
from engine.families.bert import with_mask_token
from engine.text import split_words
from tests.zoo import BERT_SENTENCES, DIM, HEADS, LAYERS

SENTENCES = list(BERT_SENTENCES)


@pytest.fixture
def bert_mlm(zoo, model_dir: Path) -> str:
    return str(zoo.copy("bert", model_dir / "bert-mlm"))


@pytest.fixture
def bert_plain(zoo, model_dir: Path) -> str:
    return str(zoo.copy("bert", model_dir / "bert-plain", masked_lm=False))


def test_encoding_shapes_follow_the_config(bert_mlm):
    engine = Engine(device="cpu")
    assert isinstance(engine.adapter(bert_mlm), Adapter)
    enc, = engine.encode(bert_mlm, [SENTENCES[0]], attentions=True)
    n_tokens = len(enc.tokens)
    assert enc.hidden_states.shape == (LAYERS + 1, n_tokens, DIM)
    assert enc.attentions.shape == (LAYERS, HEADS, n_tokens, n_tokens)
    assert enc.hidden_states.dtype == np.float32 and enc.attentions.dtype == np.float32
    assert enc.layer_names == ("embeddings", "layer 1", "layer 2")
    assert enc.family == "bert"


def test_cls_and_sep_map_to_no_word_and_each_word_decodes_back(bert_mlm):
    text = SENTENCES[2]
    enc, = Engine(device="cpu").encode(bert_mlm, [text])
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]"
    assert enc.token_to_word[0] == -1 and enc.token_to_word[-1] == -1
    for w, word in enumerate(enc.words):
        pieces = [enc.tokens[i] for i in enc.word_tokens(w)]
        assert "".join(p.removeprefix("##") for p in pieces) == word.lower()
    assert [enc.tokens[i] for i in enc.word_tokens(enc.words.index("riverbank"))] == \
        ["river", "##bank"]


def test_pooling_first_mean_last_differ_for_a_multi_token_word(bert_mlm):
    enc, = Engine(device="cpu").encode(bert_mlm, [SENTENCES[2]])
    w = enc.words.index("playing")
    first, last = enc.word_tokens(w)[[0, -1]]
    assert last == first + 1                      # play ##ing
    pooled = {p: enc.word_vectors(p)[:, w] for p in ("first", "mean", "last")}
    np.testing.assert_allclose(pooled["first"], enc.hidden_states[:, first])
    np.testing.assert_allclose(pooled["last"], enc.hidden_states[:, last])
    np.testing.assert_allclose(pooled["mean"], (pooled["first"] + pooled["last"]) / 2,
                               rtol=1e-5, atol=1e-6)
    assert not np.allclose(pooled["first"][1:], pooled["last"][1:])


def test_attention_rows_sum_to_one(bert_mlm):
    enc, = Engine(device="cpu").encode(bert_mlm, [SENTENCES[1]], attentions=True)
    np.testing.assert_allclose(enc.attentions.sum(-1), 1.0, atol=1e-5)
    assert (enc.attentions >= 0).all()


def test_vectors_do_not_depend_on_the_rest_of_the_batch(bert_mlm, model_dir):
    short = "The bank raised rates."
    alone, = Engine(device="cpu").encode(bert_mlm, [short], attentions=True)
    batched = Engine(device="cpu").encode(bert_mlm, SENTENCES[1:] + [short], batch_size=8,
                                          attentions=True)[-1]
    assert len(batched.tokens) == len(alone.tokens)
    np.testing.assert_allclose(batched.hidden_states, alone.hidden_states, atol=1e-5)
    np.testing.assert_allclose(batched.attentions, alone.attentions, atol=1e-5)


def test_batches_keep_the_order_of_the_texts(bert_mlm):
    texts = [SENTENCES[1], "The bank.", SENTENCES[0], "Rates."]
    batched = Engine(device="cpu").encode(bert_mlm, texts, batch_size=2)
    assert [e.text for e in batched] == texts
    for text, enc in zip(texts, batched):
        alone, = Engine(device="cpu").encode(bert_mlm, [text])
        np.testing.assert_allclose(enc.hidden_states, alone.hidden_states, atol=1e-5)


def test_long_texts_get_smaller_batches_under_the_attention_budget(monkeypatch):
    from engine.families.hf import forward, tokens

    def text(n):
        return tokens.TokenizedText(split_words("x"), tuple(range(n)), ("x",) * n, np.zeros(n))

    monkeypatch.setattr(forward, "ATTENTION_BUDGET_BYTES", 3 * 100 * 100)
    groups = forward.batches([text(100), text(10), text(100), text(100), text(12)], 16, 1)
    assert groups == [[1, 4, 0], [2, 3]]       # at most 3 texts of 100 tokens per batch


def test_saved_checkpoint_gives_the_same_states_as_the_model_in_memory(zoo, model_dir):
    from transformers import AutoModel, AutoTokenizer

    path = zoo.copy("bert", model_dir / "bert-mlm")
    enc, = Engine(device="cpu").encode(str(path), [SENTENCES[0]])
    model = AutoModel.from_pretrained(path).eval()
    ids = AutoTokenizer.from_pretrained(path)(SENTENCES[0], return_tensors="pt")
    with torch.no_grad():
        states = model(**ids, output_hidden_states=True).hidden_states
    np.testing.assert_allclose(enc.hidden_states, torch.stack(states)[:, 0].numpy(), atol=1e-5)


def test_masked_prediction_is_best_first_and_matches_the_mlm_head(zoo, model_dir):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    path = zoo.copy("bert", model_dir / "bert-mlm")
    text = "She sat on the river [MASK] and watched the water."
    pred = Engine(device="cpu").predict_masked(str(path), text, top_k=5)
    probs = [c.prob for c in pred.candidates]
    assert pred.kind == "masked" and len(probs) == 5
    assert probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-6

    tok = AutoTokenizer.from_pretrained(path)
    ids = tok(text, return_tensors="pt")
    pos = ids.input_ids[0].tolist().index(tok.mask_token_id)
    with torch.no_grad():
        logits = AutoModelForMaskedLM.from_pretrained(path)(**ids).logits[0, pos]
    p = torch.softmax(logits, -1)
    assert pred.candidates[0].token == tok.convert_ids_to_tokens(int(p.argmax()))
    assert pred.candidates[0].prob == pytest.approx(float(p.max()), rel=1e-5)


def test_model_without_mlm_head_refuses_masked_prediction(bert_plain):
    engine = Engine(device="cpu")
    assert "fill_blank" not in engine.resolved(bert_plain).capabilities   # known before it loads
    with pytest.raises(UnsupportedPrediction, match="no masked-LM head"):
        engine.predict_masked(bert_plain, "The [MASK] raised its rates.")
    enc, = engine.encode(bert_plain, [SENTENCES[0]])     # still gives every layer
    assert enc.hidden_states.shape[0] == LAYERS + 1


def test_bert_refuses_next_word_and_logit_lens(bert_mlm):
    engine = Engine(device="cpu")
    with pytest.raises(UnsupportedPrediction, match=r"cannot predict the next word \(put "
                                                    r"\[MASK\].*models that can: .*smollm2-135m"):
        engine.predict_next(bert_mlm, "The bank")
    with pytest.raises(UnsupportedPrediction):
        engine.logit_lens(bert_mlm, "The bank")


def test_text_longer_than_the_position_embeddings_is_refused(bert_mlm):
    with pytest.raises(EngineError, match="its cap is 64"):
        Engine(device="cpu").encode(bert_mlm, [" ".join(["bank"] * 70)])


def test_path_outside_the_model_dirs_is_refused(zoo, model_dir):
    elsewhere = zoo.path("bert")            # the zoo's folder is no configured model directory
    assert model_dir not in elsewhere.parents
    with pytest.raises(ModelUnavailable, match="is not a model folder inside the configured model directories"):
        Engine(device="cpu").encode(str(elsewhere), [SENTENCES[0]])


def test_mask_word_is_respelled_with_the_tokenizers_mask_token():
    wt = split_words("A [MASK] sat on the [MASK].")
    out = with_mask_token(wt, "<mask>")
    assert out.text == "A <mask> sat on the <mask>."
    assert out.words == wt.words
    assert [out.text[s:e] for s, e in out.spans] == ["A", "<mask>", "sat", "on", "the",
                                                      "<mask>", "."]


def test_rescoring_ranks_whole_words_by_the_filled_sentences_pseudo_likelihood(zoo, model_dir):
    """Checked against a plain reading of Salazar et al.: the full MLM forward pass over every
    filled sentence with each other token masked in turn (no head-only shortcut, no batching)."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from engine.families import bert

    path = zoo.copy("bert", model_dir / "bert-mlm")
    text = "She sat on the river [MASK] and watched the water."
    pred = Engine(device="cpu").predict_masked(str(path), text, top_k=4, rescore=True)
    assert pred.kind == "masked" and len(pred.candidates) == 4
    assert "pseudo-log-likelihood" in pred.method

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForMaskedLM.from_pretrained(path).eval()
    ids = tok(text, return_tensors="pt").input_ids[0]
    pos = ids.tolist().index(tok.mask_token_id)
    words = [i for i, p in enumerate(tok.convert_ids_to_tokens(list(range(len(tok)))))
             if p.isalpha()]
    with torch.no_grad():
        head = model(input_ids=ids[None]).logits[0, pos].log_softmax(-1)
        cands = sorted(words, key=lambda i: -float(head[i]))[:bert.RESCORE_CANDIDATES]
        pll = {}
        for c in cands:
            filled = ids.clone()
            filled[pos] = c
            total = 0.0
            for i in range(1, len(ids) - 1):            # [CLS] and [SEP] are not scored
                x = filled.clone()
                x[i] = tok.mask_token_id
                total += float(model(input_ids=x[None]).logits[0, i].log_softmax(-1)[filled[i]])
            pll[c] = total
    best = sorted(pll, key=lambda c: -pll[c])[:4]
    assert [c.token for c in pred.candidates] == tok.convert_ids_to_tokens(best)
    scores = torch.tensor([pll[c] for c in cands], dtype=torch.float64)
    share = torch.softmax(scores, 0)[[cands.index(c) for c in best]]
    assert [c.prob for c in pred.candidates] == pytest.approx(share.tolist(), abs=1e-4)
    assert all(c.token.isalpha() for c in pred.candidates)


def test_rescored_probabilities_do_not_depend_on_how_many_are_listed(zoo, model_dir,
                                                                     monkeypatch):
    """They are shares among the head's RESCORE_CANDIDATES words; asking for more than those
    used to widen the pool and lower every listed word's probability (minilm-l6-mlm, "side":
    0.564 at 5, 0.536 at 40). The tiny vocabulary has 19 whole words: a pool of 6 here."""
    from engine.families import bert

    monkeypatch.setattr(bert, "RESCORE_CANDIDATES", 6)
    path = zoo.copy("bert", model_dir / "bert-mlm")
    engine = Engine(device="cpu")
    text = "She sat on the river [MASK] and watched the water."
    few = engine.predict_masked(str(path), text, top_k=3, rescore=True)
    many = engine.predict_masked(str(path), text, top_k=15, rescore=True)
    assert len(many.candidates) == 6 and "top 6 words" in many.method and many.ranked_among == 6
    assert engine.predict_masked(str(path), text, top_k=15).ranked_among == 0     # the whole vocabulary
    assert many.candidates[:3] == few.candidates
    assert sum(c.prob for c in many.candidates) == pytest.approx(1.0)


def test_rescoring_is_for_masked_lms_only(zoo, model_dir):
    gpt = str(zoo.copy("causal:gpt2", model_dir / "gpt"))
    with pytest.raises(UnsupportedPrediction, match="needs a masked LM.*bert-base-uncased"):
        Engine(device="cpu").predict_masked(gpt, "the [MASK] of the river", rescore=True)
