"""embed_rows, the one function the local engine and every Ray actor run: its column arrays
against the engine's word vectors taken one word at a time."""
import numpy as np
import pytest

from engine.api import Engine
from engine.corpus.embed import embed_rows
from engine.text import split_words
from tests.engine.corpus.test_index import _corpus, tiny  # noqa: F401 - the fixture


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rows_are_every_word_at_every_chosen_layer_in_sentence_layer_position_order(
        tiny, dtype):  # noqa: F811
    sentences = _corpus(30, seed=3) + ["bank", "the old river bank was near the water ."]
    ids = list(range(100, 100 + len(sentences)))
    layers = [2, 0]
    engine = Engine(cache_size=0)
    rows = embed_rows(engine, tiny, ids, sentences, layers, "mean", 4, vector_dtype=dtype)

    want = {"sentence_id": [], "position": [], "layer": [], "word": [], "key": [], "vector": []}
    for sid, text in zip(ids, sentences):
        enc = engine.encode_words(tiny, [split_words(text)])[0]
        wv = enc.word_vectors("mean")
        for layer in layers:
            for pos, word in enumerate(enc.words):
                want["sentence_id"].append(sid)
                want["position"].append(pos)
                want["layer"].append(layer)
                want["word"].append(word)
                want["key"].append(word.lower())
                want["vector"].append(wv[layer, pos])
    assert rows["sentence_id"].dtype == np.int64 and rows["position"].dtype == np.int32
    assert rows["layer"].dtype == np.int16 and rows["vector"].dtype == dtype
    for key in ("sentence_id", "position", "layer"):
        assert rows[key].tolist() == want[key], key
    assert list(rows["word"]) == want["word"] and list(rows["key"]) == want["key"]
    # batched and one at a time agree to float rounding; the float16 cast rounds to nearest
    expect = np.asarray(want["vector"], np.float32)
    got = rows["vector"].astype(np.float32)
    tol = 1e-5 if dtype == np.float32 else 1e-3 * max(1.0, float(np.abs(expect).max()))
    assert np.abs(got - expect).max() <= tol


def test_no_sentences_give_empty_columns(tiny):  # noqa: F811
    rows = embed_rows(Engine(cache_size=0), tiny, [], [], [0, 1])
    assert all(len(v) == 0 for v in rows.values())
    assert rows["vector"].dtype == np.float16
