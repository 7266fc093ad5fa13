"""ELMo family: reference numerics, character ids, stateless batching, LSTM implementations,
checkpoint round trips, LM predictions and the scalar mix."""
from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch

from engine.families.elmo import adapter as elmo
from engine.errors import ModelUnavailable, UnsupportedPrediction
from engine.families.base import LoadOptions
from engine.families.elmo.chars import batch_char_ids, sentence_char_ids, word_char_ids
from engine.families.elmo.folder import gives_of_dir
from engine.families.elmo.modules import ElmoBiLm
from engine.families.elmo.reference import compare_with_fixture
from engine.families.elmo.weights import load_allennlp, save_allennlp, tf_arrays
from engine.text import from_words, split_words
from tests.zoo import ELMO_OPTIONS, ELMO_VOCAB

torch.set_num_threads(1)
CPU = LoadOptions(device="cpu")


@pytest.fixture
def tiny_dir(zoo, tmp_path):
    return zoo.copy("elmo", tmp_path / "tiny-elmo", seed=3)


@pytest.fixture
def tiny(zoo):
    return elmo.load("tiny", zoo.path("elmo", seed=3), CPU, progress=False)


# -- reference numerics ------------------------------------------------------------------

def _fixture_batches(d):
    sentences = json.loads((d / "sentences.json").read_text())
    expected = []
    for k in range(3):
        with h5py.File(d / f"lm_embeddings_{k}.hdf5", "r") as f:
            # forward and backward halves side by side = the usual [forward; backward]
            expected.append([np.concatenate(list(f[str(i)][...]), axis=-1) for i in range(10)])
    for i in range(10):
        yield [sentences[k][i].split() for k in range(3)], [expected[k][i] for k in range(3)]


@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_top_layer_matches_bilm_tf_with_states_carried_across_batches(elmo_fixture_dir, impl):
    result = compare_with_fixture(elmo_fixture_dir, impl=impl)
    print(f"\n{result}")
    assert result.n_values == sum(e.size for _, batch in _fixture_batches(elmo_fixture_dir)
                                  for e in batch)
    # atol 1e-6 with numpy's default rtol (1e-7): the fixture is float32 output of TensorFlow,
    # whose own rounding reaches ~1.1e-6 on values of magnitude ~3 (a float64 run of the same
    # weights is 1.14e-6 away from it at worst)
    assert result.within_tolerance
    # AllenNLP's port checks numpy.allclose(atol=1e-6), i.e. with rtol 1e-5: far looser
    assert result.max_abs_diff < 1.5e-6


def test_fixture_numbers_depend_on_the_carried_state(elmo_fixture_dir):
    bilm = load_allennlp(elmo_fixture_dir, progress=False)
    batches = list(_fixture_batches(elmo_fixture_dir))
    words, expected = batches[1]
    with torch.no_grad():  # batch 1 from zero states instead of batch 0's final states
        out = bilm(torch.from_numpy(batch_char_ids(words)))
    actual = out.layers[2, 0, 1:1 + len(words[0])].numpy()
    assert np.abs(actual - expected[0]).max() > 1e-3


def test_fixture_layout_is_written_back_unchanged(elmo_fixture_dir, tmp_path):
    bilm = load_allennlp(elmo_fixture_dir, progress=False)
    save_allennlp(bilm, tmp_path / "copy")
    with h5py.File(elmo_fixture_dir / "lm_weights.hdf5", "r") as ref, \
            h5py.File(tmp_path / "copy" / "weights.hdf5", "r") as ours:
        names = []
        ref.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        assert sorted(names) == sorted(n for n, _ in tf_arrays(bilm))
        for n in names:
            assert ref[n].shape == ours[n].shape, n
            np.testing.assert_array_equal(ref[n][...], ours[n][...], err_msg=n)


# -- character ids -----------------------------------------------------------------------

def test_sentence_boundaries_are_single_marker_characters_shifted_by_one():
    ids = sentence_char_ids(["a"])
    # <S>: begin-of-word 258, <S> 256, end-of-word 259, then padding 260; all +1
    assert ids[0, :4].tolist() == [259, 257, 260, 261]
    assert ids[-1, :4].tolist() == [259, 258, 260, 261]
    assert ids[1, :4].tolist() == [259, ord("a") + 1, 260, 261]
    assert set(ids[:, 4:].ravel().tolist()) == {261}


def test_words_are_utf8_bytes_between_word_markers():
    ids = word_char_ids("né")
    assert ids[:5].tolist() == [259, ord("n") + 1, 0xC3 + 1, 0xA9 + 1, 260]


def test_long_words_are_truncated_so_both_markers_fit():
    ids = word_char_ids("x" * 80, max_chars=50)
    assert ids.shape == (50,)
    assert ids[0] == 259 and ids[49] == 260
    assert (ids[1:49] == ord("x") + 1).all()


def test_batch_padding_rows_are_all_zero():
    ids = batch_char_ids([["a", "b", "c"], ["d"]])
    assert ids.shape == (2, 5, 50)
    assert (ids[1, 3:] == 0).all() and (ids[1, :3] > 0).all()


# -- stateless, batch independent encoding -------------------------------------------------

def test_same_sentence_twice_gives_identical_vectors(tiny):
    text = split_words("The bank of the river is steep .")
    first = tiny.encode([text])[0].hidden_states
    again = tiny.encode([split_words("Money is a bank thing"), text])[1].hidden_states
    second = tiny.encode([text])[0].hidden_states
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, again, atol=1e-6, rtol=0)


def test_vectors_do_not_depend_on_batch_mates(tiny):
    text = split_words("the river bank .")
    alone = tiny.encode([text])[0].hidden_states
    mates = [split_words("a much longer sentence about money , banks , rivers and more ."),
             split_words("short"), text, split_words("the bank of the river is a bank .")]
    together = tiny.encode(mates, batch_size=4)[2].hidden_states
    np.testing.assert_allclose(together, alone, atol=1e-6, rtol=0)


def test_backward_lm_starts_at_each_sentence_own_end(tiny):
    # the backward half at the last word sees only </S>: it must not change when a longer
    # batch mate pads this sentence
    text = split_words("bank of")
    bilm = tiny.bilm
    P = bilm.options.proj_dim
    padded = tiny.layers([text.words, ["a"] * 12])[0]
    alone = tiny.layers([text.words])[0]
    np.testing.assert_allclose(padded[1:, -1, P:], alone[1:, -1, P:], atol=1e-6, rtol=0)


def test_encoding_has_words_as_tokens_and_three_named_layers(tiny):
    enc = tiny.encode([split_words("Rivers flow .")])[0]
    assert enc.family == "elmo" and enc.tokens == ("Rivers", "flow", ".")
    assert enc.token_to_word.tolist() == [0, 1, 2] and enc.attentions is None
    assert enc.hidden_states.shape == (3, 3, 2 * ELMO_OPTIONS["lstm"]["projection_dim"])
    assert enc.layer_names == ("char CNN", "biLSTM 1", "biLSTM 2")
    assert (tiny.info.n_layers, tiny.info.n_heads, tiny.info.dim) == (2, 0, 12)


def test_layer0_is_context_free_and_duplicated(tiny):
    a = tiny.encode([split_words("the bank of the river")])[0].hidden_states
    b = tiny.encode([split_words("money in the bank")])[0].hidden_states
    np.testing.assert_array_equal(a[0, 1], b[0, 3])          # "bank" in both sentences
    np.testing.assert_array_equal(a[0, :, :6], a[0, :, 6:])  # [x; x]
    assert np.abs(a[2, 1] - b[2, 3]).max() > 1e-4             # upper layers see context


# -- the two LSTM implementations, training ------------------------------------------------

def test_fast_and_reference_lstm_give_the_same_outputs_and_states():
    bilm = ElmoBiLm.from_options(ELMO_OPTIONS, seed=5, init_scale=0.5)
    sentences = [["w"] * n for n in (7, 1, 12, 3, 12, 5)]
    ids = torch.from_numpy(batch_char_ids(sentences))
    with torch.no_grad():
        fast = bilm(ids, impl="fast")
        ref = bilm(ids, impl="reference")
        fast2 = bilm(ids, state=fast.state, impl="fast")
        ref2 = bilm(ids, state=ref.state, impl="reference")
    for a, b in [(fast.layers, ref.layers), (fast2.layers, ref2.layers),
                 (fast2.state[0], ref2.state[0]), (fast2.state[1], ref2.state[1])]:
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, rtol=0)
    assert (fast.layers[:, 1, 3:] == 0).all()  # nothing beyond a sentence's end


def test_lm_outputs_are_trainable_from_random_init():
    bilm = ElmoBiLm.from_options(ELMO_OPTIONS, seed=1)
    ids = torch.from_numpy(batch_char_ids([["a", "b"], ["c", "d", "e"]]))
    fwd, bwd, mask = bilm.lm_outputs(ids)
    assert fwd.shape == bwd.shape == (2, 5, 6) and mask.sum().item() == 9
    (fwd.pow(2).sum() + bwd.pow(2).sum()).backward()
    no_grad = [n for n, p in bilm.named_parameters() if p.grad is None or not p.grad.any()]
    assert no_grad == []
    assert not bilm.char_cnn.char_embedding.weight.grad[0].any()  # padding row stays zero


def test_fast_and_reference_lstm_give_the_same_gradients():
    ids = torch.from_numpy(batch_char_ids([["w"] * 6, ["x", "y"], ["z"] * 4]))
    grads = {}
    for impl in ("fast", "reference"):
        bilm = ElmoBiLm.from_options(ELMO_OPTIONS, seed=2, init_scale=0.5)
        fwd, bwd, _ = bilm.lm_outputs(ids, impl=impl)
        (fwd.sin().sum() + bwd.cos().sum()).backward()
        grads[impl] = {n: p.grad for n, p in bilm.named_parameters()}
    for name, g in grads["fast"].items():
        torch.testing.assert_close(g, grads["reference"][name], atol=1e-5, rtol=1e-5)


def test_skip_connection_adds_layer1_to_the_top_lstm_output():
    ids = torch.from_numpy(batch_char_ids([["a", "bank", "."], ["rivers"]]))
    options = json.loads(json.dumps(ELMO_OPTIONS))
    with_skip = ElmoBiLm.from_options(options, seed=4, init_scale=0.5)
    options["lstm"]["use_skip_connections"] = False
    without = ElmoBiLm(options)
    without.load_state_dict(with_skip.state_dict())
    with torch.no_grad():
        a, b = with_skip(ids).layers, without(ids).layers
    torch.testing.assert_close(a[2] - b[2], a[1], atol=1e-6, rtol=0)
    assert torch.equal(a[1], b[1])


def test_tanh_char_cnn_activation_is_applied():
    ids = torch.from_numpy(batch_char_ids([["bank"]]))
    options = json.loads(json.dumps(ELMO_OPTIONS))
    relu = ElmoBiLm.from_options(options, seed=4, init_scale=0.5)
    options["char_cnn"]["activation"] = "tanh"
    tanh = ElmoBiLm(options)
    tanh.load_state_dict(relu.state_dict())
    x = tanh.char_cnn.char_embedding(ids[0]).transpose(1, 2)
    pooled = torch.tanh(tanh.char_cnn.convs[0](x).max(dim=-1).values)
    assert pooled.min() < 0   # relu would clip these at 0
    with torch.no_grad():
        assert not torch.allclose(relu(ids).layers[0], tanh(ids).layers[0])


def test_dropout_acts_in_training_mode_only():
    bilm = ElmoBiLm.from_options(ELMO_OPTIONS, seed=1, dropout=0.5)
    ids = torch.from_numpy(batch_char_ids([["a", "b", "c"]]))
    with torch.no_grad():
        train = [bilm.train()(ids).layers for _ in range(2)]
        evals = [bilm.eval()(ids).layers for _ in range(2)]
    assert not torch.equal(train[0][1:], train[1][1:])
    assert torch.equal(evals[0], evals[1])


def test_default_init_starts_highways_near_identity():
    bilm = ElmoBiLm.from_options(ELMO_OPTIONS, seed=1)
    for hw in bilm.char_cnn.highways:
        assert torch.all(hw.carry.bias == -2.0)   # bilm-tf: transform gate mostly closed
    assert not bilm.char_cnn.char_embedding.weight[0].any()


# -- checkpoints ---------------------------------------------------------------------------

def test_export_then_load_round_trips_exactly(tiny_dir, tmp_path):
    first = load_allennlp(tiny_dir, progress=False)
    again = load_allennlp(save_allennlp(first, tmp_path / "again"), progress=False)
    for (name, a), (_, b) in zip(first.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name
    with h5py.File(tiny_dir / "weights.hdf5") as f1, \
            h5py.File(tmp_path / "again" / "weights.hdf5") as f2:
        for name, _ in tf_arrays(first):
            np.testing.assert_array_equal(f1[name][...], f2[name][...], err_msg=name)


def test_directory_with_a_single_differently_named_hdf5_loads(tiny_dir):
    (tiny_dir / "weights.hdf5").rename(tiny_dir / "model.hdf5")
    assert elmo.load("renamed", tiny_dir, CPU, progress=False).info.dim == 12


def test_directory_with_ambiguous_weight_files_is_refused(tiny_dir):
    (tiny_dir / "weights.hdf5").rename(tiny_dir / "a.hdf5")
    (tiny_dir / "b.hdf5").write_bytes((tiny_dir / "a.hdf5").read_bytes())
    with pytest.raises(ModelUnavailable, match="exactly one"):
        elmo.load("ambiguous", tiny_dir, CPU, progress=False)


def test_engine_encodes_a_configured_model_directory(zoo, model_dir):
    from engine.api import Engine

    path = zoo.copy("elmo", model_dir / "my-elmo", seed=2)
    encs = Engine(device="cpu").encode(str(path), ["The bank of the river .", "Money !"])
    assert [e.family for e in encs] == ["elmo", "elmo"]
    assert encs[0].hidden_states.shape == (3, 6, 12) and encs[1].words == ("Money", "!")


# -- LM predictions --------------------------------------------------------------------------

def _manual_probs(adapter, h):
    w, b, _ = adapter.softmax
    return torch.softmax(w.double() @ torch.from_numpy(h).double() + b.double(), 0).numpy()


@pytest.mark.parametrize("kind", ["next", "previous"])
def test_lm_predictions_rank_vocab_words_from_the_right_direction(tiny, kind):
    text = split_words("the bank of the river")
    pred = getattr(tiny, f"predict_{kind}")(text, top_k=5)
    probs = [c.prob for c in pred.candidates]
    assert pred.kind == kind and len(probs) == 5
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-9
    assert all(c.token in ELMO_VOCAB for c in pred.candidates)
    top = tiny.layers([text.words])[0][-1]
    h = top[-1, :6] if kind == "next" else top[0, 6:]   # forward at last, backward at first
    expected = _manual_probs(tiny, h)
    assert pred.candidates[0].token == ELMO_VOCAB[int(expected.argmax())]
    assert pred.candidates[0].prob == pytest.approx(float(expected.max()), abs=1e-9)
    # the unknown-word marker, when listed, is said to be one (11 words in the tiny vocab)
    every = getattr(tiny, f"predict_{kind}")(text, top_k=len(ELMO_VOCAB))
    assert "<UNK>" in [c.token for c in every.candidates]
    assert every.method.endswith("; <UNK> is any word outside its 11-word vocabulary")
    assert ("<UNK>" in [c.token for c in pred.candidates]) == ("<UNK>" in pred.method)


def test_predictions_need_the_softmax_companion(zoo):
    path = zoo.path("elmo", with_softmax=False)
    # what the registry says before it loads: its encoder's views, none of the LM's
    assert not {"fill_blank", "next_word"} & gives_of_dir(path).capabilities
    adapter = elmo.load("bare", path, CPU, progress=False)
    text = from_words(["the", "bank"])
    for call in (adapter.predict_next, adapter.predict_previous):
        with pytest.raises(UnsupportedPrediction, match="no LM softmax"):
            call(text)
    with pytest.raises(UnsupportedPrediction, match="no LM softmax"):
        adapter.predict_masked(from_words(["the", "[MASK]"]))


def test_logit_lens_is_unsupported(tiny):
    with pytest.raises(UnsupportedPrediction, match="logit lens"):
        tiny.logit_lens(split_words("the bank"))


def _expected_fill(tiny, words: list[str], blank: int, sides: str) -> np.ndarray:
    """P(w | left, right) ∝ P_fwd(w | left) P_bwd(w | right), computed from the biLM's top
    layer by hand: forward half at the word before the blank (<S> at the start), backward
    half at the word after it (</S> at the end); markers excluded."""
    from engine.families.elmo.chars import batch_char_ids

    ids = batch_char_ids([words], tiny.bilm.options.max_chars)
    top = tiny.bilm(torch.from_numpy(ids)).layers[-1][0].detach().numpy()   # <S> .. </S>
    logp = np.log(_manual_probs(tiny, top[blank, :6]))
    if sides == "both":
        logp = logp + np.log(_manual_probs(tiny, top[blank + 2, 6:]))
    p = np.exp(logp - logp.max())
    p[[ELMO_VOCAB.index(w) for w in ("<S>", "</S>", "<UNK>")]] = 0
    return p / p.sum()


@pytest.mark.parametrize("sides", ["both", "left"])
@pytest.mark.parametrize("sentence", ["the [MASK] of the river", "[MASK] bank is money",
                                      "the river bank [MASK]"])
def test_fill_blank_multiplies_forward_and_backward_lm(tiny, sentence, sides):
    text = split_words(sentence)
    pred = tiny.predict_masked(text, top_k=4, sides=sides)
    expected = _expected_fill(tiny, list(text.words), text.mask_indices[0], sides)
    assert pred.kind == "masked" and len(pred.candidates) == 4
    assert [c.token for c in pred.candidates] == [ELMO_VOCAB[i] for i in np.argsort(-expected)[:4]]
    for c in pred.candidates:
        assert c.prob == pytest.approx(float(expected[ELMO_VOCAB.index(c.token)]), abs=1e-9)
    assert not {"<S>", "</S>", "<UNK>"} & {c.token for c in pred.candidates}


def test_fill_blank_reads_the_right_side_only_when_asked(tiny):
    a, b = split_words("the [MASK] of the river"), split_words("the [MASK] is money .")
    left = [tiny.predict_masked(t, sides="left").candidates for t in (a, b)]
    both = [tiny.predict_masked(t, sides="both").candidates for t in (a, b)]
    # same left context: the right side is not read (equal up to float rounding: the sentence
    # lengths differ, so the LSTM's batched matmuls are blocked differently)
    assert [c.token for c in left[0]] == [c.token for c in left[1]]
    assert [c.prob for c in left[0]] == pytest.approx([c.prob for c in left[1]], rel=1e-6)
    assert both[0] != both[1]


# -- scalar mix ------------------------------------------------------------------------------

def test_uniform_scalar_mix_is_the_mean_of_the_layers():
    layers = np.random.default_rng(0).normal(size=(3, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(elmo.scalar_mix(layers), layers.mean(axis=0), atol=1e-6)
    mix = elmo.ScalarMix(3)
    np.testing.assert_allclose(mix(torch.from_numpy(layers)).detach().numpy(),
                               layers.mean(axis=0), atol=1e-6)


def test_scalar_mix_weights_are_a_softmax_times_gamma():
    layers = np.stack([np.full((2, 2), v, np.float32) for v in (1.0, 10.0, 100.0)])
    s = np.log([1.0, 2.0, 3.0])  # softmax -> 1/6, 2/6, 3/6
    expected = 2.0 * (1 / 6 * 1 + 2 / 6 * 10 + 3 / 6 * 100)
    np.testing.assert_allclose(elmo.scalar_mix(layers, s, gamma=2.0), expected, rtol=1e-6)
    mix = elmo.ScalarMix(3, s=s.tolist(), gamma=2.0)
    out = mix(list(torch.from_numpy(layers)))
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-6)
    out.sum().backward()
    assert mix.s.grad is not None and mix.s.grad.abs().sum() > 0


def test_scalar_mix_rejects_a_wrong_number_of_weights():
    with pytest.raises(ValueError, match="one weight per layer"):
        elmo.scalar_mix(np.zeros((3, 2, 2)), s=[0.0, 1.0])
