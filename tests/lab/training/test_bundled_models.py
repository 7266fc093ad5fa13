"""The bundled models trained by ctxlens load through engine.api.Engine and behave like trained
models: each assertion below fails for a randomly initialised model of the same shape.

Held-out sentences: tests/lab/training/data/brown_heldout_sample.txt (40 sentences from the 25
held-out Brown documents, never seen in training).
"""
from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from engine.api import Engine
from engine.registry import ASSETS, load_registry

pytestmark = pytest.mark.slow
SAMPLE = Path(__file__).parent / "data" / "brown_heldout_sample.txt"


def _sentences() -> list[str]:
    return SAMPLE.read_text().splitlines()


def _shuffled(sentence_words: list[list[str]], seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    out = []
    for words in sentence_words:
        w = list(words)
        rng.shuffle(w)
        out.append(w)
    return out


def _need(model_id: str) -> None:
    if not (ASSETS / "models" / model_id).exists():
        pytest.skip(f"{model_id} is not trained yet (python -m lab.training.*)")


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(device="cpu")


def test_registry_makes_the_trained_elmo_the_default_elmo():
    from engine.registry import default_model
    _need("elmo-brown")
    assert default_model("elmo", load_registry()) == "elmo-brown"


def _elmo_forward_nll(adapter, sentences: list[list[str]]) -> float:
    """Mean forward-LM NLL per word (and </S>) over the engine-loaded biLM and LM softmax."""
    from engine.families.elmo.chars import batch_char_ids

    index = {w: i for i, w in enumerate(adapter.softmax.vocab)}
    unk = index["<UNK>"]
    total, n = 0.0, 0
    with torch.no_grad():
        for words in sentences:
            fwd, _, _ = adapter.bilm.lm_outputs(torch.from_numpy(batch_char_ids([words])))
            targets = torch.tensor([index.get(w, unk) for w in words] + [index["</S>"]])
            logits = fwd[0, :-1].float() @ adapter.softmax.weight.float().T + adapter.softmax.bias.float()
            total += float(torch.nn.functional.cross_entropy(logits, targets, reduction="sum"))
            n += len(targets)
    return total / n


def test_elmo_forward_lm_prefers_heldout_sentences_to_their_words_shuffled(engine):
    _need("elmo-brown")
    adapter = engine.adapter("elmo-brown", progress=False)
    words = [engine.encode("elmo-brown", [s])[0].words for s in _sentences()[:20]]
    real, shuffled = _elmo_forward_nll(adapter, words), _elmo_forward_nll(adapter, _shuffled(words))
    assert real < shuffled - 0.5
    assert math.exp(real) < 0.2 * len(adapter.softmax.vocab)


def _words(pred) -> list[str]:
    # <UNK> stands for every rare word at once, so it is often the single most likely "word"
    return [c.token for c in pred.candidates if c.token != "<UNK>"]


def test_elmo_backward_lm_puts_a_determiner_before_a_noun(engine):
    _need("elmo-brown")
    before = _words(engine.predict_previous("elmo-brown", "river.", top_k=6))
    assert {"the", "a", "his"} & set(before[:3]), before


def test_elmo_forward_lm_starts_a_clause_after_said_that(engine):
    _need("elmo-brown")
    after = _words(engine.predict_next("elmo-brown", "The jury said that", top_k=6))
    assert {"the", "he", "it", "a", "they"} & set(after[:3]), after


def test_elmo_does_not_expect_a_determiner_right_after_one(engine):
    _need("elmo-brown")
    pred = engine.predict_next("elmo-brown", "He walked into the", top_k=8)
    after = _words(pred)
    assert not {"the", "a", "an", "of", ".", ","} & set(after[:5]), after
    # and it is confident about the words it does expect (a random model is near uniform)
    vocab_size = len(engine.adapter("elmo-brown", progress=False).softmax.vocab)
    best = max(c.prob for c in pred.candidates if c.token != "<UNK>")
    assert best > 20 / vocab_size


def _gpt_nll(adapter, texts: list[str]) -> float:
    tok, model = adapter.tokenizer, adapter.model
    total, n = 0.0, 0
    with torch.no_grad():
        for t in texts:
            ids = torch.tensor([tok(t)["input_ids"]])
            out = model(input_ids=ids, labels=ids)
            total += float(out.loss) * (ids.shape[1] - 1)
            n += ids.shape[1] - 1
    return total / n


def test_gpt_perplexity_on_heldout_text_is_below_the_same_words_shuffled(engine):
    _need("gpt-brown")
    adapter = engine.adapter("gpt-brown", progress=False)
    sents = _sentences()[:20]
    shuffled = [" ".join(w) for w in _shuffled([s.split() for s in sents])]
    real, mixed = _gpt_nll(adapter, sents), _gpt_nll(adapter, shuffled)
    assert math.exp(real) < 0.5 * math.exp(mixed)


def test_gpt_continues_a_subject_with_punctuation_or_function_words(engine):
    _need("gpt-brown")
    pred = engine.predict_next("gpt-brown", "The jury", top_k=5)
    top = [c.token.strip() for c in pred.candidates]
    assert len({",", ".", "of", "and", "in", "to", "said", "was", "had"} & set(top)) >= 3, top
    after_the = engine.predict_next("gpt-brown", "He said that the", top_k=3)
    # after a determiner: a word first (Brown's scare quotes, ' "', may follow in the top 3)
    words = [c.token.strip().isalpha() for c in after_the.candidates]
    assert words[0] and sum(words) >= 2, after_the.candidates


# the ten most frequent Brown tokens (lower-cased): what a masked LM learns first
BROWN_TOP10 = {"the", ",", ".", "of", "and", "to", "a", "in", "that", "is"}


# Verb forms a reader would put in "she ___ to the store." (a unigram-plateau model offers
# the , . of and; a random one, arbitrary pieces)
SLOT_VERBS = {"went", "go", "goes", "came", "come", "comes", "got", "get", "ran", "run", "walked",
              "returned", "drove", "moved", "turned", "hurried", "rushed", "have", "had", "has",
              "be", "was", "were", "is", "are", "used", "wanted", "tried", "seemed", "began",
              "started", "ought", "played", "stayed", "sat", "stood", "lived", "worked"}


def _verb_mass(engine, text: str) -> float:
    pred = engine.predict_masked("bert-brown-mlm", text, top_k=300)
    return sum(c.prob for c in pred.candidates if c.token in SLOT_VERBS)


def test_bert_masked_lm_is_selectable_and_puts_verbs_in_verb_slots_not_noun_slots(engine):
    # a model that ignores context (random, or on the unigram plateau) gives every slot the same
    # distribution, so the verb mass would not depend on the slot
    _need("bert-brown-mlm")
    assert "masked_lm" in engine.resolved("bert-brown-mlm").capabilities
    verb_slots = [_verb_mass(engine, t) for t in ("she [MASK] to the store.",
                                                  "the children [MASK] in the garden.")]
    noun_slots = [_verb_mass(engine, t) for t in ("he sat on the bank of the [MASK].",
                                                  "she drank a cup of [MASK].",
                                                  "they opened the [MASK] and left.")]
    assert min(verb_slots) > 0.05 and min(verb_slots) > 10 * max(noun_slots), (verb_slots, noun_slots)


PUNCT = {".", ",", ";", ":", "!", "?", '"', "'", "(", ")", "-", "--", "[SEP]", "[CLS]"}


def test_bert_puts_content_words_above_punctuation_after_bank_of_the(engine):
    """The issue's check: a random model ranks tokens about uniformly; a unigram-plateau model
    puts "," "." "the" on top; a trained masked LM wants a noun after "the bank of the"."""
    _need("bert-brown-mlm")
    pred = engine.predict_masked("bert-brown-mlm", "he sat on the bank of the [MASK].", top_k=10)
    tokens = [c.token for c in pred.candidates]
    content = [t for t in tokens if t.isalpha() and t not in BROWN_TOP10 and len(t) > 2]
    first_punct = next((i for i, t in enumerate(tokens) if t in PUNCT), len(tokens))
    assert tokens[0] not in PUNCT | BROWN_TOP10, tokens
    assert len(content) >= 5 and first_punct >= 3, tokens


def test_bert_fills_the_same_mask_differently_in_different_contexts(engine):
    _need("bert-brown-mlm")
    a = engine.predict_masked("bert-brown-mlm", "she [MASK] to the store yesterday.", top_k=5)
    b = engine.predict_masked("bert-brown-mlm", "the [MASK] of the committee said no.", top_k=5)
    top_a, top_b = [c.token for c in a.candidates], [c.token for c in b.candidates]
    # a context-blind (unigram) model gives the same list twice
    assert len(set(top_a) & set(top_b)) <= 2, (top_a, top_b)


def test_bert_pseudo_perplexity_on_heldout_is_far_below_uniform(engine):
    _need("bert-brown-mlm")
    adapter = engine.adapter("bert-brown-mlm", progress=False)
    tok, model = adapter.tokenizer, adapter.model
    mask_id = tok.mask_token_id
    total, n = 0.0, 0
    with torch.no_grad():
        for s in _sentences()[:10]:
            ids = torch.tensor(tok(s)["input_ids"])
            pos = torch.arange(1, len(ids) - 1)
            x = ids.repeat(len(pos), 1)
            x[torch.arange(len(pos)), pos] = mask_id
            logp = model(input_ids=x).logits[torch.arange(len(pos)), pos].float().log_softmax(-1)
            total -= float(logp[torch.arange(len(pos)), ids[pos]].sum())
            n += len(pos)
    # a randomly initialised model sits near len(tok) (uniform); a unigram model far below
    assert math.exp(total / n) < 0.25 * len(tok)


def test_bert_engine_feeds_exactly_the_ids_the_trainer_trained_on(engine):
    """The served tokenizer must add [CLS]/[SEP] as lab/training/bert.py does (pad_chunks,
    pseudo_perplexity): [CLS] + pieces + [SEP]. The first export had an empty template."""
    from engine.families.hf import tokens
    from engine.text import to_word_text
    from lab.training.bert import BROWN_SPECIALS, pad_chunks

    _need("bert-brown-mlm")
    adapter = engine.adapter("bert-brown-mlm", progress=False)
    for s in _sentences()[:5] + ["The [MASK] sat on the mat ."]:
        served = tokens.tokenize(adapter.tokenizer, adapter.spell_mask(to_word_text(s)),
                             adapter.max_tokens).input_ids
        pieces = adapter.tokenizer(s, add_special_tokens=False)["input_ids"]
        trained = pad_chunks([pieces], len(pieces) + 2, BROWN_SPECIALS)[0].tolist()
        assert list(served) == trained, s
