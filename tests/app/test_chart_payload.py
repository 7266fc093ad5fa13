"""#47: no chart sends the browser more than ui.MAX_CHART_MB; a longer one is one line instead.
Streamlit refuses a message over server.maxMessageSize after the script has run, as an
exception box no page guard can catch, so the size is judged before the chart is sent."""
import json

import numpy as np
import plotly.io as pio
import pytest

from app import attention_figures, figures, ui
from tests.app.helpers import messages, no_failures, page

RNG = np.random.default_rng(0)


def _maps(*shape) -> np.ndarray:
    a = np.tril(RNG.random(shape) ** 8)
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)


def _labels(n: int) -> list[str]:
    return [f"word{i}" for i in range(n)]


@pytest.mark.parametrize("build", [
    lambda: attention_figures.head_view(_labels(200), _maps(200, 200), None, "head view"),
    lambda: attention_figures.head_view_heads(_labels(120), _maps(9, 120, 120), 3, "every head"),
    lambda: figures.matrix_heatmap(_maps(300, 300), _labels(300), _labels(300), "map", "a"),
    lambda: attention_figures.attention_grid(_maps(6, 12, 40, 40)),
    lambda: figures.layer_animation([(f"layer {i}", RNG.random((300, 2))) for i in range(7)],
                                    ["a", "b"] * 150, ["a hover text"] * 300, "morph"),
], ids=["head view", "every head", "heatmap", "model view", "animation"])
def test_the_size_estimate_is_within_a_factor_of_two_of_the_json_sent(build):
    fig = build()
    sent = len(pio.to_json(fig, validate=False))
    assert sent / 2 <= ui.chart_bytes(fig) <= 2 * sent


def test_the_largest_model_view_drawn_fits_in_a_chart():
    """SmolLM2-135M's 30 layers x 9 heads at the most tokens the model view takes."""
    layers, heads = 30, 9
    t = int((attention_figures.MODEL_VIEW_MAX_CELLS / (layers * heads)) ** 0.5)
    cap = attention_figures.MODEL_VIEW_MAX_CELLS
    assert attention_figures.attention_grid_cells(layers, heads, t) <= cap
    fig = attention_figures.attention_grid(_maps(layers, heads, t, t))
    assert len(pio.to_json(fig, validate=False)) <= ui.MAX_CHART_MB * 2**20


@pytest.mark.usefixtures("tiny_engine")
def test_a_chart_over_the_limit_is_one_line_and_not_sent(monkeypatch):
    monkeypatch.setattr(ui, "MAX_CHART_MB", 0.001)          # about 1 KB
    at = page("attention").run()
    no_failures(at)
    sent = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    data = [sum(len(json.dumps(trace[name])) for trace in fig["data"]
                for name in ui.DATA_FIELDS if name in trace) for fig in sent]
    assert all(n <= 2 * 1024 for n in data), data       # what is sent is layout, not data
    notes = [i for i in messages(at)["info"] if "too large to send to the browser" in i]
    assert notes and all(n.count("\n") == 0 for n in notes)
    # the server's own limit counts too: a chart may take half of it
    monkeypatch.setattr(ui, "MAX_CHART_MB", 32)
    monkeypatch.setattr(ui.st, "get_option", lambda name: 0.002)   # 2 KB
    assert ui.chart_limit() == 1000
