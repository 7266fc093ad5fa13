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
