import numpy as np

from lab.training.bigram import KneserNeyBigram


def test_kneser_ney_distributions_sum_to_one_even_for_unseen_contexts():
    kn = KneserNeyBigram.fit([[0, 1, 2, 1, 2, 3], [0, 2, 1]], vocab_size=6)
    for v in range(6):
        assert abs(kn.next_distribution(v).sum() - 1) < 1e-9
    np.testing.assert_allclose(kn.prob(np.array([1, 5]), np.array([2, 4])),
                               [kn.next_distribution(1)[2], kn.next_distribution(5)[4]])


def test_kneser_ney_prefers_the_training_order_over_a_shuffle():
    rng = np.random.default_rng(0)
    seqs = [list(range(10)) for _ in range(20)]
    kn = KneserNeyBigram.fit(seqs, vocab_size=10)
    ordered, n = kn.nll([list(range(10))])
    shuffled, _ = kn.nll([list(rng.permutation(10))])
    assert ordered / n < 0.5 * shuffled / n


def test_masked_baseline_uses_both_neighbours():
    kn = KneserNeyBigram.fit([[0, 1, 2], [0, 3, 4]] * 10, vocab_size=5)
    # after 0 both 1 and 3 are equally likely; the right neighbour 2 settles it
    _, n, correct = kn.masked_nll([0, 1, 2], [1])
    assert n == 1 and correct == 1
