"""bench/components_speed.py's view of results/components_speed.json, on made-up numbers: the
verdict against the target follows the median, and the example's heads are listed as measured."""
from __future__ import annotations

from bench.components_speed import speed_view
from bench.views import markdown


def _data(median: float) -> dict:
    t = {"median": median, "ci": [median * 0.9, median * 1.2], "runs": [median] * 3}
    row = {"threads": 2, "dla": t, "plain_forward": {**t, "median": 2 * median},
           "dla_vs_forward": 0.5, "load_average": [1.0, 3.5]}
    return {"model": "m", "text": "a b c", "n_tokens": 3, "target": "d", "runs": 3,
            "target_s": 0.5, "threads": [row, {**row, "threads": 1, "load_average": [2, 2]}],
            "example": {"text": "x is", "target": "y", "logit": 2.0, "embed": 0.5,
                        "rest": 0.0, "heads_sum": 1.0, "mlp_sum": 0.5,
                        "top_heads": [{"head": "3.2", "direct": 0.75},
                                      {"head": "1.1", "direct": -0.25}]}}


def test_the_verdict_follows_the_median_and_the_heads_are_listed():
    fast, slow = speed_view(_data(0.2)), speed_view(_data(0.8))
    assert fast.tables[0].rows[0][-1] == "yes" and slow.tables[0].rows[0][-1] == "no"
    text = markdown(fast.tables[1])
    assert "| 3.2 | +0.75 |" in text and "| 1.1 | -0.25 |" in text
    assert [r[0] for r in fast.tables[0].rows[::3]] == ["2 threads", "1 thread"]
    assert "load average reached 3.5" in fast.tables[0].note


def test_nothing_measured_is_no_table():
    assert speed_view(None).tables == []
