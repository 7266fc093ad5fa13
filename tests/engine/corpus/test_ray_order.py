"""The Ray path's work order, without a cluster: sentences go to the actors shortest first within
each commit block."""

from engine.corpus.ray_embed import work_order


def test_work_order_sorts_each_block_by_length_and_keeps_blocks_in_sentence_order():
    texts = ["a b c d e f", "a", "a b c", "a b", "a b c d", "a b c d e f g h", "x"]
    order = work_order(range(1, 7), texts, commit_sentences=4)
    assert order == [[1, 3, 2, 4], [6, 5]]          # ids 1-4 by length, then 5-6 by length
    assert [max(b) for b in order] == [4, 6]
