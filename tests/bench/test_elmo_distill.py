"""The stronger-ELMo report: the goal is judged on the intervals, not on point estimates."""
from bench import elmo_distill


def row(label, centroid_ci, pairs_ci, pairs_top, teacher=None):
    def contrast(ci):
        return {"top_minus_l0": {"value": sum(ci) / 2, "ci": list(ci)}}

    return {"label": label, "teacher": teacher, "words": 1000, "ppl": [120.0, 118.0],
            "senses": {"centroid": [0.46, 0.44, 0.47], "pairs": [0.55, 0.56, pairs_top],
                       "ci": {"centroid": [[0.4, 0.5]] * 3, "pairs": [[0.5, 0.6]] * 3},
                       "contrasts": {"centroid": contrast(centroid_ci),
                                     "pairs": contrast(pairs_ci)}}}


def test_goal_needs_both_intervals_above_zero_and_pairs_above_55_percent():
    assert elmo_distill.goal_met(row("a", (0.01, 0.1), (0.02, 0.08), 0.6))
    assert not elmo_distill.goal_met(row("b", (-0.01, 0.1), (0.02, 0.08), 0.6))   # centroid CI
    assert not elmo_distill.goal_met(row("c", (0.01, 0.1), (-0.02, 0.08), 0.6))   # pairs CI
    assert not elmo_distill.goal_met(row("d", (0.01, 0.1), (0.02, 0.08), 0.54))   # pairs < 55%


def test_report_lists_each_candidate_with_its_target_and_verdict():
    text = elmo_distill.report([
        row("brown only", (-0.1, 0.05), (-0.04, 0.07), 0.57),
        row("distilled", (0.01, 0.1), (0.02, 0.08), 0.6,
            teacher={"model": "minilm-l6", "target": "residual", "weight": 4.0})])
    lines = [line for line in text.splitlines() if line.startswith("| brown only")
             or line.startswith("| distilled")]
    assert "none (Brown LM only)" in lines[0] and lines[0].endswith("| not met | — |")
    assert "residual (4)" in lines[1] and lines[1].endswith("| met | — |")
    assert "120.0 / 118.0" in lines[1]


def test_report_shows_the_check_on_the_other_lemmas_where_measured():
    checked = row("checked", (0.01, 0.1), (0.02, 0.08), 0.6)
    checked["senses"]["centroid_other_half"] = {
        "top_minus_l0": {"value": 0.021, "ci": [-0.004, 0.047]}, "n_lemmas": 159}
    line = next(line for line in elmo_distill.report([checked]).splitlines()
                if line.startswith("| checked"))
    assert line.endswith("| met | 0.021 [-0.004, 0.047] (159 lemmas) |")
