"""Model cards: written from the training reports, and kept in step with them."""
import pytest

from lab.training import cards


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
        f"{card} is out of date: run python -m lab.training.cards")


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
    from lab.training.cards import _sense_verdict

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


def test_the_verdict_flags_a_bound_that_only_just_clears_and_the_unconfirmed_other_half():
    from lab.training.cards import _sense_verdict

    row = _distilled_row(0.0002, 0.008)
    row["senses"]["centroid_other_half"] = {"n_lemmas": 159,
                                            "top_minus_l0": {"value": 0.03, "ci": [-0.011, 0.07]}}
    text = _sense_verdict(row, 0.474)
    assert "**met**" in text and "centroid lower bound only just: +0.0002" in text
    assert "other 159 lemmas" in text and "not confirmed" in text
    row["senses"]["centroid_other_half"]["top_minus_l0"]["ci"] = [0.001, 0.07]
    assert "not confirmed" not in _sense_verdict(row, 0.474)
    # a clear bound is not called marginal
    assert "only just" not in _sense_verdict(_distilled_row(0.01, 0.01), 0.474)


def test_the_soup_stage_names_where_each_run_started_and_how_it_ran():
    from lab.training.cards import _soup_stage

    stage2 = {"heldout_ppl_forward": 116.27, "heldout_ppl_backward": 112.63}

    def run(name, start, ppl, device="cpu", weight=2.0):
        return {"from": f"training_runs/{name}", "weight": 1 / 3, "words_seen": 1_000_000,
                "heldout_ppl_forward": ppl, "heldout_ppl_backward": ppl - 4,
                "teacher": {"target": "relational", "weight": weight},
                "config": {"device": device, "threads": 1, "batch_size": 36, "lr": 5e-4},
                "init": {"heldout_ppl_forward": start}}

    runs = [run("a-out", 116.27, 115.7), run("g-out", 116.27, 118.1, "cuda", 4.0),
            run("c-out", 118.1, 117.5)]
    soup = {"heldout_ppl_forward": 113.8, "heldout_ppl_backward": 110.5,
            "soup": {"ingredients": runs}}
    text = _soup_stage(soup, stage2)
    lines = {ln.split(" | ")[0].strip("| "): ln for ln in text.splitlines() if ln.startswith("| ")}
    assert "| stage 2 |" in lines["a-out"] and "CPU, 1 thread, float32" in lines["a-out"]
    assert "| stage 2 |" in lines["g-out"] and "GPU" in lines["g-out"] and "x 4" in lines["g-out"]
    assert "| g-out |" in lines["c-out"]          # started from the GPU run's export
    assert "each weighted 1/3" in text and "113.8 / 110.5" in text
    assert "the best, a-out: 115.7 / 111.7" in text
