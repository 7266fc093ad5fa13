"""Model cards: written from the training reports, and kept in step with them."""
import pytest

from engine.training import cards


def _report(losses):
    return {"history": [{"step": i, "words": 1000 * i, "heldout_loss": x}
                        for i, x in enumerate(losses)]}


def test_a_loss_that_keeps_falling_is_not_called_flat():
    assert not cards._flat(_report([6.0 - 0.01 * i for i in range(100)]))


def test_a_loss_that_levels_off_is_flat_despite_evaluation_noise():
    # Falls, then wobbles around 5.33: single evaluations dip below the level, the trend does not.
    losses = [7.0 - 0.05 * i for i in range(34)] + [5.33 + (0.02 if i % 2 else -0.02) for i in range(66)]
    assert cards._flat(_report(losses))


def test_too_short_a_history_is_never_flat():
    assert not cards._flat(_report([5.0, 5.0, 5.0]))


@pytest.mark.parametrize("model_id", sorted(cards.CARDS))
def test_the_shipped_card_is_what_its_training_report_gives(model_id):
    card = cards.MODELS / model_id / "MODEL_CARD.md"
    assert card.read_text() == cards.render(model_id), (
        f"{card} is out of date: run python -m engine.training.cards")


def _lm_report(ppl, max_words, train_losses):
    return {"heldout_ppl_token": ppl, "config": {"max_words": str(max_words)},
            "history": [{"train_loss": x} for x in train_losses]}


def test_the_extension_note_says_whether_the_further_words_helped():
    before = _lm_report(198.9, 6_000_000, [5.0])
    assert "lowered" in cards._change(before, _lm_report(166.8, 18_000_000, [4.9, 4.5]))
    worse = cards._change(before, _lm_report(210.0, 18_000_000, [4.6, 4.2, 4.0]))
    assert "raised" in worse and "over-fit" in worse and "4.00" in worse
    # A worse held-out number without a lower training loss is not called over-fitting.
    assert "over-fit" not in cards._change(before, _lm_report(210.0, 18_000_000, [5.2, 5.1]))


def _distilled_row(centroid_lo: float, pairs_lo: float, pairs_top: float = 0.6) -> dict:
    def diff(lo):
        return {"value": lo + 0.03, "ci": [lo, lo + 0.06]}

    return {"senses": {"centroid": [0.37, 0.42, 0.40], "pairs": [0.56, 0.58, pairs_top],
                       "contrasts": {"centroid": {"top_minus_l0": diff(centroid_lo)},
                                     "pairs": {"top_minus_l0": diff(pairs_lo)}}},
            "pos": [0.85, 0.90, 0.89]}


def test_the_elmo_card_reads_its_verdict_off_the_numbers():
    from engine.training.cards import _sense_verdict

    text = _sense_verdict(_distilled_row(-0.001, 0.004), 0.474)
    assert "**not met**" in text and "the centroid interval reaches below zero" in text
    assert "pairs interval" not in text
    assert "the first biLSTM layer is the best of the three for word senses" in text
    assert "0.474 on centroid" in text
    assert "**met**" in _sense_verdict(_distilled_row(0.003, 0.004), 0.5)
    # both intervals above zero but top-layer pairs at 55% or below: still not met
    low = _sense_verdict(_distilled_row(0.003, 0.004, pairs_top=0.55), 0.5)
    assert "**not met**" in low and "pair accuracy, 0.550, is not above 0.55" in low
    both = _sense_verdict(_distilled_row(-0.01, -0.01), 0.5)
    assert "the centroid and pairs intervals reach below zero" in both
