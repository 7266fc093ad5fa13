"""bench/attribution.py's summaries of per-sentence numbers, on made-up numbers worked out by
hand; the views of results/attribution.json."""
from __future__ import annotations

import math

import numpy as np

from bench.attribution import kendall, load_sentences, mean_ci, row_on_words, summarise
from bench.attribution_speed import LONG_SENTENCE, median_ci
from bench.attribution_views import beats_random, faithfulness_view, speed_view, weak


def test_mean_ci_averages_the_finite_values_and_brackets_the_mean():
    s = mean_ci([1.0, 2.0, 3.0, 6.0, None, float("nan")])
    assert s["n"] == 4 and s["mean"] == 3.0
    lo, hi = s["ci"]
    assert 1.0 <= lo < 3.0 < hi <= 6.0


def test_mean_ci_of_nothing_is_none():
    assert mean_ci([None, float("nan")]) == {"mean": None, "ci": None, "n": 0}


def test_kendall_counts_concordant_pairs():
    # pairs of (1,3,2,4) against (1,2,3,4): 5 concordant, 1 discordant -> (5 - 1) / 6
    assert math.isclose(kendall(np.array([1, 2, 3, 4.]), np.array([1, 3, 2, 4.])), 4 / 6)
    assert kendall(np.array([1, 2, 3.]), np.array([3, 2, 1.])) == -1.0
    assert math.isnan(kendall(np.array([1, 1, 1.]), np.array([1, 2, 3.])))


def test_an_attention_row_is_summed_onto_words_without_special_tokens():
    words = row_on_words(np.array([0.1, 0.2, 0.3, 0.4]), np.array([-1, 0, 0, 1]), 2)
    assert np.allclose(words, [0.5, 0.4])


def test_median_ci_of_five_runs():
    s = median_ci([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s["median"] == 3.0
    assert 1.0 <= s["ci"][0] <= 3.0 <= s["ci"][1] <= 5.0


def _sentence(comp, suff, rc, rs, tau):
    m = {"comprehensiveness": comp, "sufficiency": suff, "random_comprehensiveness": rc,
         "random_sufficiency": rs}
    return {"maps": {"ig": m, "occlusion": m}, "tau": {"ig": tau}}


def test_summarise_gives_means_and_the_paired_difference_from_random():
    per = [_sentence(3.0, 1.0, 1.0, 2.0, 0.2), _sentence(5.0, 0.0, 2.0, 3.0, 0.4)]
    s = summarise(per)
    ig = s["ig"]
    assert ig["comprehensiveness"]["mean"] == 4.0 and ig["sufficiency"]["mean"] == 0.5
    assert ig["comprehensiveness_minus_random"]["mean"] == 2.5   # (2 + 3) / 2
    assert ig["random_minus_sufficiency"]["mean"] == 2.0          # (1 + 3) / 2
    assert math.isclose(ig["tau_with_occlusion"]["mean"], 0.3)
    assert "tau_with_occlusion" not in s["occlusion"]
    assert beats_random(ig) == "yes, both"       # every resample of 2 and 3 (1 and 3) is > 0


def test_a_map_no_better_than_random_is_said_so():
    per = [_sentence(1.0, 2.0, 2.0, 1.0, 0.0), _sentence(2.0, 2.0, 1.0, 2.0, 0.0)]
    assert beats_random(summarise(per)["ig"]) == "no"


def test_the_view_has_a_row_per_model_and_map():
    per = [_sentence(3.0, 1.0, 1.0, 2.0, 0.2), _sentence(5.0, 0.0, 2.0, 3.0, 0.4)]
    r = {"model": "m", "kind": "masked", "n_sentences": 2, "ig_steps_cap": None,
         "ig_converged": 2, "ig_relative_gap": mean_ci([0.001, 0.002]),
         "summary": summarise(per)}
    v = faithfulness_view({"faithfulness": [r]})
    assert [row[2] for row in v.tables[0].rows] == ["integrated gradients", "occlusion"]


def test_the_sentences_each_have_one_blank():
    sentences = load_sentences()
    assert len(sentences) >= 40
    assert all(s.count("[MASK]") == 1 and len(s.split("[MASK]")[0].split()) >= 4
               for s in sentences)


def test_weak_agreement_is_judged_by_the_whole_interval():
    assert weak({"mean": 0.1, "ci": [0.0, 0.3]}) == "yes"
    assert weak({"mean": -0.7, "ci": [-0.8, -0.6]}) == "yes (opposite ranking)"
    assert weak({"mean": 0.5, "ci": [0.3, 0.7]}) == "unclear"
    assert weak({"mean": 0.7, "ci": [0.6, 0.8]}) == "no"


def test_the_long_sentence_is_127_words_with_the_blank_the_61st():
    words = LONG_SENTENCE.split()
    assert len(words) == 127 and words.index("[MASK]") == 60 and words.count("[MASK]") == 1


def test_the_memory_table_gives_the_peak_over_a_plain_forward_against_its_target():
    run = {"seconds": 1.0, "peak_mb": 1000.0, "process_peak_mb": 1300.0}
    mem = {"model": "m", "n_words": 127, "blank_word": 61, "tokens": 93, "steps": 32,
           "rows_per_gradient_pass": 1, "rows_per_forward_pass": 9, "memory_target": 1.5,
           "plain": run, "ig": {**run, "seconds": 90.0, "peak_mb": 1600.0},
           "peak_over_plain": 1.6}
    table = speed_view({"memory": mem}).tables[0]
    assert table.rows[0][3:] == ["1.60×", "≤ 1.5×", "no"]
    assert table.rows[1][2] == "1000 MB"
    mem = {**mem, "peak_over_plain": 1.1}
    assert speed_view({"memory": mem}).tables[0].rows[0][-1] == "yes"

