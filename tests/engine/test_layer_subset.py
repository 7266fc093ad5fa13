"""Hidden states for the layers asked only: the same numbers as a full pass, fewer blocks run.

Tiny random checkpoints (two blocks each): a BERT, a GPT-2 and a Llama (both with a final norm
that HF applies to the top layer only), and an ELMo.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.api import Engine
from engine.errors import EngineError
from engine.families.hf import tokens
from engine.families.hf.parts import hidden_state_blocks
from engine.text import to_word_text
from tests.zoo import LAYERS

TEXTS = ["She sat on the river bank and watched the water.", "The bank raised rates."]


@pytest.fixture(params=("bert", "gpt2", "llama"))
def transformer(zoo, request, model_dir: Path) -> str:
    if request.param == "bert":
        return str(zoo.copy("bert", model_dir / "b", masked_lm=False, sentences=TEXTS))
    return str(zoo.copy(f"causal:{request.param}", model_dir / request.param))


def _blocks_run(engine: Engine, model_id: str, layers) -> tuple[list, int]:
    """Encodings for TEXTS with `layers`, and how many block forwards ran."""
    adapter = engine.adapter(model_id)
    base = getattr(adapter, "encoder", None) or adapter.model.base_model
    calls = []
    handles = [b.register_forward_hook(lambda *a: calls.append(1))
               for b in hidden_state_blocks(base)]
    try:
        encs = engine.encode(model_id, TEXTS, layers=layers)
    finally:
        for h in handles:
            h.remove()
    return encs, len(calls)


@pytest.mark.parametrize("layers", [(0,), (1,), (0, 1), (1, 0), (2, 0)])
def test_asked_layers_equal_the_full_pass_and_skip_blocks_above(transformer, layers):
    engine = Engine(device="cpu", cache_size=0)
    full, full_calls = _blocks_run(engine, transformer, None)
    some, some_calls = _blocks_run(engine, transformer, layers)
    assert full_calls == LAYERS * 1          # one batch of two texts, every block once
    # blocks above the highest layer asked are not run (the top layer needs them all)
    assert some_calls == max(layers)
    for f, s in zip(full, some):
        assert s.hidden_states.shape == (len(layers),) + f.hidden_states.shape[1:]
        # the raw stream below the top: for GPT-2 / Llama NOT the final-normed top state
        np.testing.assert_allclose(s.hidden_states, f.hidden_states[list(layers)], atol=1e-6)
        assert s.layer_names == tuple(f.layer_names[i] for i in layers)
        assert s.tokens == f.tokens and (s.token_to_word == f.token_to_word).all()


def test_a_layer_past_the_top_is_a_clear_error(transformer):
    with pytest.raises(EngineError, match=f"between 0 and {LAYERS}"):
        Engine(device="cpu").encode(transformer, TEXTS, layers=(LAYERS + 1,))


def test_a_subset_is_cached_apart_from_the_full_encoding(transformer):
    engine = Engine(device="cpu")
    some, = engine.encode(transformer, TEXTS[:1], layers=(1,))
    full, = engine.encode(transformer, TEXTS[:1])
    assert some.n_layers == 1 and full.n_layers == LAYERS + 1


def test_elmo_keeps_the_layers_asked(zoo, model_dir):
    elmo = str(zoo.copy("elmo", model_dir / "e", sentences=TEXTS))
    engine = Engine(device="cpu", cache_size=0)
    full, = engine.encode(elmo, TEXTS[:1])
    some, = engine.encode(elmo, TEXTS[:1], layers=(2, 0))
    np.testing.assert_array_equal(some.hidden_states, full.hidden_states[[2, 0]])
    assert some.layer_names == (full.layer_names[2], full.layer_names[0])
    with pytest.raises(EngineError, match="between 0 and 2"):
        engine.encode(elmo, TEXTS[:1], layers=(3,))


# "riverbank" and "playing" are split into pieces by the tiny BERT (tests/zoo.py)
POOL_TEXTS = TEXTS + ["Children were playing on the riverbank.", "Yes."]


@pytest.mark.parametrize("layers", [None, (0,), (2, 0)])
@pytest.mark.parametrize("pool", ["mean", "first", "last"])
def test_word_vectors_pooled_where_the_model_runs_equal_the_encodings(transformer, layers,
                                                                      pool):
    # Engine.word_vectors pools inside the batch (on a GPU only words come back); it must give
    # what each text's Encoding.word_vectors gives, whatever shares the batch
    engine = Engine(device="cpu", cache_size=0)
    texts = [to_word_text(t) for t in POOL_TEXTS]
    ref = [e.word_vectors(pool) for e in engine.encode_words(transformer, texts, layers=layers)]
    # some word has two or more tokens, so "mean", "first" and "last" differ
    assert any(np.bincount(e.token_to_word[e.token_to_word >= 0]).max() > 1
               for e in engine.encode_words(transformer, texts))
    for batch_size in (1, 3):
        got = engine.word_vectors(transformer, texts, batch_size=batch_size, layers=layers,
                                  pool=pool)
        for r, g in zip(ref, got):
            assert g.shape == r.shape and g.dtype == np.float32
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5 * float(np.abs(r).max()))


def test_word_vectors_of_a_model_without_pooling_come_from_its_encodings(zoo, model_dir):
    elmo = str(zoo.copy("elmo", model_dir / "e", sentences=TEXTS))
    engine = Engine(device="cpu", cache_size=0)
    texts = [to_word_text(t) for t in TEXTS]
    got = engine.word_vectors(elmo, texts, layers=(2, 0), pool="last")
    for g, e in zip(got, engine.encode_words(elmo, texts)):
        np.testing.assert_array_equal(g, e.word_vectors("last")[[2, 0]])


def test_tokenize_many_ignores_padding_and_truncation_stored_in_a_tokenizer_file():
    # all-MiniLM-L6-v2's tokenizer.json pads and truncates to 128: the batch tokenizer must not
    # inherit that from the Rust backend (a long text would be cut silently)
    from tests.zoo import wordpiece_tokenizer

    plain, stored = wordpiece_tokenizer(), wordpiece_tokenizer()
    stored.backend_tokenizer.enable_truncation(max_length=5)
    stored.backend_tokenizer.enable_padding(length=12, pad_id=0)
    texts = [to_word_text(t) for t in POOL_TEXTS]
    want = tokens.tokenize_many(plain, texts, 512)
    got = tokens.tokenize_many(stored, texts, 512)
    assert [t.input_ids for t in got] == [t.input_ids for t in want]
    assert max(len(t.input_ids) for t in got) > 5
    assert all((g.token_to_word == w.token_to_word).all() for g, w in zip(got, want))


@pytest.mark.parametrize("bad, message", [
    ("The bank \ufffd raised rates.", "this model's tokenizer drops the word '\ufffd'"),
    (" ".join(["bank"] * 40), "the text has 42 tokens for this model; its cap is 32"),
])
def test_tokenize_many_checks_every_text_as_tokenize_does(bad, message):
    # tokenize_many checks a whole batch at once (too long; a word with no token); a bad text
    # anywhere in the batch gets tokenize()'s one-line error, and good texts tokenize alike
    from tests.zoo import wordpiece_tokenizer

    tok = wordpiece_tokenizer()
    texts = [to_word_text(t) for t in POOL_TEXTS]
    many = tokens.tokenize_many(tok, texts, 32)
    for t, m in zip(texts, many):
        one = tokens.tokenize(tok, t, 32)
        assert m.input_ids == one.input_ids and (m.token_to_word == one.token_to_word).all()
    with pytest.raises(EngineError) as single:
        tokens.tokenize(tok, to_word_text(bad), 32)
    assert str(single.value).startswith(message)
    for where in (0, 2, len(texts)):
        batch = texts[:where] + [to_word_text(bad)] + texts[where:]
        with pytest.raises(EngineError) as err:
            tokens.tokenize_many(tok, batch, 32)
        assert str(err.value) == str(single.value)


# torch.compile's one case in make test is GPT-2's (~20 s); Llama's (~40 s) is slow by nature
@pytest.fixture(params=("gpt2", pytest.param("llama", marks=pytest.mark.slow_by_nature)))
def causal_lm(zoo, request, model_dir: Path) -> str:
    return str(zoo.copy(f"causal:{request.param}", model_dir / request.param))


@pytest.mark.slow
def test_word_vectors_through_torch_compile_equal_the_eager_pass(causal_lm):
    # Engine(compile=True) runs batch embedding through a compiled forward (the GPU path of
    # `ctxlens embed --compile`); on the CPU the same code compiles with inductor, and the
    # vectors must be the eager ones, whatever the batch's shape (dynamic shapes: no
    # recompile may change them), while other paths (encodings, maps) stay eager. BERT:
    # tests/engine/test_cli.py compiles minilm-l6 through the CLI (compiling costs ~20 s a model)
    transformer = causal_lm
    texts = [to_word_text(t) for t in POOL_TEXTS]
    layers = (2, 0)
    eager = Engine(device="cpu", cache_size=0).word_vectors(transformer, texts, batch_size=2,
                                                             layers=layers)
    engine = Engine(device="cpu", cache_size=0, compile=True)
    for batch_size in (2, 3):
        got = engine.word_vectors(transformer, texts, batch_size=batch_size, layers=layers)
        for r, g in zip(eager, got):
            assert g.shape == r.shape and g.dtype == np.float32
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5 * float(np.abs(r).max()))
    encoder = engine.hidden_state_encoder(transformer)
    assert callable(getattr(encoder.encoder, "_ctxlens_compiled", None))
    enc = engine.encode(transformer, [TEXTS[0]], attentions=True)[0]
    assert enc.attentions is not None and np.isfinite(enc.attentions).all()
