"""The Ray path's ordering, without a cluster: sentences go to the actors shortest first within
each commit block, and the driver gives back exactly the local engine's blocks and row order."""
import numpy as np
import pytest

from engine.corpus.ray_embed import _gather, work_order


def _rows_for(ids, n_words, layers=(0, 1)) -> dict:
    """Rows as embed_rows makes them for these sentences in this order: per sentence, per
    layer, per word position."""
    sid, lay, pos = [], [], []
    for i in ids:
        for layer in layers:
            sid += [i] * n_words[i]
            lay += [layer] * n_words[i]
            pos += range(n_words[i])
    return {"sentence_id": np.asarray(sid, np.int64), "layer": np.asarray(lay, np.int16),
            "position": np.asarray(pos, np.int32),
            "vector": np.asarray(sid, np.float32)[:, None] * 10 + np.asarray(pos)[:, None]}


def _batches(order, n_words, cut):
    """The actors' outputs in work order, cut every `cut` input sentences (as map_batches
    does, across commit blocks)."""
    flat = [i for block in order for i in block]
    return [_rows_for(flat[lo:lo + cut], n_words) for lo in range(0, len(flat), cut)]


def test_work_order_sorts_each_block_by_length_and_keeps_blocks_in_sentence_order():
    texts = ["a b c d e f", "a", "a b c", "a b", "a b c d", "a b c d e f g h", "x"]
    order = work_order(range(1, 7), texts, commit_sentences=4)
    assert order == [[1, 3, 2, 4], [6, 5]]          # ids 1-4 by length, then 5-6 by length
    assert [max(b) for b in order] == [4, 6]


@pytest.mark.parametrize("cut", [1, 3, 7, 64])
def test_gather_gives_the_local_engines_blocks_and_row_order(cut):
    rng = np.random.default_rng(cut)
    n = 23
    n_words = {i: int(rng.integers(0, 6)) for i in range(n)}   # some sentences have no words
    n_words[22] = 0                                           # the very last one too
    texts = ["w " * n_words[i] for i in range(n)]
    order = work_order(range(n), texts, commit_sentences=5)
    got = list(_gather(iter(_batches(order, n_words, cut)), [max(b) for b in order],
                       [len(b) for b in order]))
    assert [k for _, k in got] == [5, 5, 5, 5, 3]
    for (rows, _), lo in zip(got, range(0, n, 5)):
        want = _rows_for(range(lo, min(lo + 5, n)), n_words)
        for key in want:
            assert np.array_equal(rows[key], want[key]), (cut, lo, key)
