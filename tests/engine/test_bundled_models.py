"""The real bundled models through the Engine: minilm-l6 (BERT family) and smollm2-135m (GGUF).

Slow: they load ~90 MB checkpoints; the first SmolLM2 load also dequantises its GGUF (~30-45 s)
into the ctxlens cache, which later loads reuse.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from engine.api import Engine
from engine.errors import UnsupportedPrediction
from engine.registry import availability, load_registry

pytestmark = pytest.mark.slow

MONEY = ["I deposited my paycheck at the bank this morning.",
         "After the robbery, the bank hired more security guards for its vault.",
         "To get a mortgage loan, she went to the bank downtown."]
# GPT reads left to right, so the river sense is made clear before "bank".
RIVER = ["We had a picnic on the grassy river bank near the water.",
         "The fisherman waded across the stream and climbed the muddy bank.",
         "Reeds and willows grew thickly along the river bank."]


def require(model_id: str) -> str:
    entry = load_registry()[model_id]
    if availability(entry) != "bundled":
        pytest.skip(f"{model_id} is not installed ({entry.source}); run `make install`")
    return model_id


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(device="cpu")


def sense_margins(engine: Engine, model_id: str) -> np.ndarray:
    """Per layer: mean cosine of same-sense "bank" pairs minus mean cosine of cross-sense pairs."""
    encs = engine.encode(model_id, MONEY + RIVER)
    vecs = np.stack([e.word_vectors("mean")[:, e.words.index("bank")] for e in encs], axis=1)
    vecs /= np.linalg.norm(vecs, axis=-1, keepdims=True)          # (layers+1, 6, dim)
    cos = vecs @ vecs.transpose(0, 2, 1)
    sense = np.array([0, 0, 0, 1, 1, 1])
    same = (sense[:, None] == sense[None, :]) & ~np.eye(6, dtype=bool)
    cross = sense[:, None] != sense[None, :]
    return cos[:, same].mean(axis=1) - cos[:, cross].mean(axis=1)


def test_minilm_separates_bank_senses_in_upper_layers(engine):
    margins = sense_margins(engine, require("minilm-l6"))
    assert margins.shape == (7,)
    assert (margins[4:] > 0.03).all(), margins
    assert margins[4:].min() > margins[0]      # layer 0 sees almost no context


def test_minilm_aligns_wordpiece_tokens_to_words(engine):
    enc, = engine.encode(require("minilm-l6"), ["The riverbank was unbelievably muddy."], attentions=True)
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]"
    for w, word in enumerate(enc.words):
        pieces = [enc.tokens[i] for i in enc.word_tokens(w)]
        assert "".join(p.removeprefix("##") for p in pieces) == word.lower()
    assert len(enc.word_tokens(enc.words.index("unbelievably"))) > 1
    assert enc.attentions.shape == (6, 12, len(enc.tokens), len(enc.tokens))


def test_minilm_has_no_masked_lm_head(engine):
    with pytest.raises(UnsupportedPrediction, match="no masked-LM head"):
        engine.predict_masked(require("minilm-l6"), "The [MASK] raised its rates.")


def test_smollm2_gguf_conversion_is_cached_and_reused(tmp_path, monkeypatch):
    """In an empty cache the first load converts the GGUF (once) and says so; the next load
    reads the converted copy and converts nothing. The conversion here copies the real one's
    output from the usual cache (where the other tests here load SmolLM2) instead of spending
    ~30 s dequantising again."""
    import shutil

    from engine.families import gpt
    from engine.registry import cache_dir

    model_id = require("smollm2-135m")
    Engine(device="cpu").adapter(model_id, progress=False)    # converted in the usual cache
    done, = (p.parent for p in (cache_dir() / "converted").glob("smollm2-135m/*/config.json"))
    converted = []

    def convert(src_dir, gguf_file, dest, progress=True):
        converted.append(gguf_file)
        shutil.copytree(done, dest, dirs_exist_ok=True)

    monkeypatch.setattr(gpt, "convert_gguf", convert)
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path / "cache"))
    first = Engine(device="cpu").adapter(model_id, progress=False)
    assert first.gguf_cache_hit is False and len(converted) == 1
    second = Engine(device="cpu").adapter(model_id, progress=False)
    assert second.gguf_cache_hit is True and len(converted) == 1
    assert [p.name for p in (tmp_path / "cache" / "converted" / "smollm2-135m").iterdir()] \
        == [done.name]


def test_smollm2_predicts_paris_after_the_capital_of_france(engine):
    pred = engine.predict_next(require("smollm2-135m"), "The capital of France is", top_k=5)
    assert pred.candidates[0].token.strip() == "Paris"
    assert pred.candidates[0].prob > 0.3


def test_smollm2_logit_lens_last_layer_agrees_with_next_word(engine):
    model_id = require("smollm2-135m")
    lens = engine.logit_lens(model_id, "The capital of France is")
    pred = engine.predict_next(model_id, "The capital of France is", top_k=1)
    assert lens.top_probs.shape == (31, len(lens.tokens))
    assert lens.top_tokens[-1][-1] == pred.candidates[0].token
    assert lens.top_probs[-1, -1] == pytest.approx(pred.candidates[0].prob, rel=1e-4)


def test_smollm2_separates_bank_senses_in_upper_layers(engine):
    margins = sense_margins(engine, require("smollm2-135m"))
    assert margins.shape == (31,)
    assert abs(margins[0]) < 1e-6          # Llama has no position embedding: layer 0 is context-free
    assert (margins[-6:] > 0.03).all(), margins


def test_smollm2_names_the_byte_pieces_of_a_character_it_splits(engine):
    """"银" is three byte tokens in SmolLM2; each alone decodes to U+FFFD, so the attention
    page drew three rows labelled "�"."""
    enc = engine.encode(require("smollm2-135m"), ["银行 is the word for bank 🙂 ."])[0]
    assert enc.tokens[:4] == ("银 (1/3)", "银 (2/3)", "银 (3/3)", "行")
    assert not any("\ufffd" in t for t in enc.tokens)
    assert " 🙂" in enc.tokens and enc.words[0] == "银行"
    assert enc.token_to_word[:4].tolist() == [0, 0, 0, 0]


def test_smollm2_candidates_that_are_byte_pieces_can_be_told_apart(engine):
    """After "我喜欢吃" SmolLM2's likeliest next tokens are pieces of characters: the CLI listed
    four identical "\ufffd"."""
    pred = engine.predict_next(require("smollm2-135m"), "我喜欢吃", top_k=5)
    pieces = [c.token for c in pred.candidates if "\ufffd" in c.token]
    assert pieces and all(re.fullmatch(r"\ufffd+ \(byte piece, token \d+\)", p) for p in pieces)
    assert len(set(c.token for c in pred.candidates)) == 5
