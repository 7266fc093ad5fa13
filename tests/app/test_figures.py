"""Figure builders: data in, figure out."""
import numpy as np

from app import attention_figures, figures


def _lines(fig):
    return [t for tr in fig.data if tr.mode == "lines" for t in tr.text if t][::2]


def test_head_view_draws_one_line_per_weight_above_one_percent():
    att = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.795, 0.005]], np.float32)
    fig = attention_figures.head_view(["a", "b", "c"], att)
    assert sorted(_lines(fig)) == sorted(["a → a: 1.000", "b → a: 0.500", "b → b: 0.500",
                                          "c → a: 0.200", "c → b: 0.795"])
    assert len(fig.data) <= 8 + 2           # binned traces + two token columns


def test_head_view_focus_keeps_only_lines_touching_the_token():
    att = np.full((4, 4), 0.25, np.float32)
    lines = _lines(attention_figures.head_view(list("wxyz"), att, focus=1))
    assert lines and all(l.startswith("x →") or "→ x" in l for l in lines)
    assert len(lines) == 4 + 3               # from x to all four, to x from the other three


def test_projection_scatter_has_a_trace_per_sense_and_panel_on_one_x_scale():
    coords = np.random.default_rng(0).normal(size=(4, 2))
    fig = figures.projection_scatter([("layer 0", coords), ("layer 3", coords * 2)],
                                     ["a", "b", "a", "b"], ["s1", "s2", "s3", "s4"])
    assert len(fig.data) == 4
    assert fig.layout.xaxis2.matches == "x"
    assert [t.text for t in fig.layout.annotations] == ["layer 0", "layer 3"]


def test_coinciding_points_of_different_senses_say_so_and_points_carry_their_numbers():
    """An exported baseline panel showed one dot "×7" in one sense's colour: a slide read
    "everything is sport". The mark now names the senses under it, and every point its
    sentence number (the chart had none: which dot is which sentence?)."""
    coords = np.zeros((4, 2))
    coords[3] = 1.0
    fig = figures.projection_scatter([("char CNN", coords)], ["animal", "sport", "sport", "x"],
                                     ["s1", "s2", "s3", "s4"], overlaps=[[[0, 1, 2]]],
                                     numbers=[1, 2, 5, 7])
    mark = [t for t in fig.data if t.name == "same vector"][0]
    assert list(mark.text) == ["×3: 2 sport, 1 animal"]
    shown = {n for t in fig.data if t.name != "same vector" for n in t.texttemplate}
    assert shown == {"", "7"}               # the three under the mark would print as one blot
    apart = figures.projection_scatter([("L3", coords * np.arange(4)[:, None])],
                                       ["a", "b", "b", "x"], ["s"] * 4, numbers=[1, 2, 5, 7])
    assert {n for t in apart.data for n in t.texttemplate} == {"1", "2", "5", "7"}
    same = figures.projection_scatter([("L0", coords)], ["a"] * 4, ["s"] * 4,
                                      overlaps=[[[0, 1, 2]]])
    assert list([t for t in same.data if t.name == "same vector"][0].text) == ["×3"]


def test_attention_grid_places_every_head_of_every_layer():
    att = np.random.default_rng(0).random((3, 2, 4, 4))
    z = np.array(attention_figures.attention_grid(att).data[0].z, dtype=float)
    assert z.shape == (3 * 5, 2 * 5)
    assert np.allclose(z[5:9, 5:9], att[1, 1])


def test_repeated_tokens_keep_their_own_heatmap_rows():
    tokens = ["the", "bat", "saw", "the", "cat"]
    fig = figures.matrix_heatmap(np.eye(5), tokens, tokens, "t", "attention")
    assert len(set(fig.data[0].x)) == 5 and len(set(fig.data[0].y)) == 5
    assert [x.replace("\u200b", "") for x in fig.data[0].x] == tokens


def test_hover_text_keeps_quotes_and_escapes_markup():
    """Brown's dialogue showed '&quot;That's Johnny&quot;' in the Corpus page's hover: plotly
    does not read html.escape's &quot;."""
    from app.figures import bold_word

    text = bold_word('"That\'s Johnny", sighed the bank <a href="x">president</a>', "bank")
    assert text.startswith('"That\'s Johnny", sighed the <b>bank</b> &lt;a href="x"&gt;')
    assert "&quot;" not in text and "<a" not in text


def test_model_cka_heatmap_writes_each_interval_in_its_cell_while_the_cells_are_few():
    from app.figures import MAX_CELL_TEXT, model_cka_heatmap

    cka, low, high = np.full((3, 2), 0.5), np.full((3, 2), 0.4), np.full((3, 2), 0.6)
    fig = model_cka_heatmap(cka, low, high, ["a0", "a1", "a2"], ["b0", "b1"], "A", "B")
    trace = fig.data[0]
    assert np.asarray(trace.z).shape == (3, 2) and np.asarray(trace.customdata).shape == (3, 2, 2)
    assert trace.text[2][1] == "0.50<br>[0.40, 0.60]" and "95% CI" in trace.hovertemplate
    n = MAX_CELL_TEXT + 1
    deep = model_cka_heatmap(np.zeros((3, n)), np.zeros((3, n)), np.zeros((3, n)),
                             ["a0", "a1", "a2"], [f"b{i}" for i in range(n)], "A", "B")
    assert deep.data[0].text is None and "95% CI" in deep.data[0].hovertemplate


def test_the_neuron_views_titles_have_no_axis_numbers_under_them():
    """"keys k" and "q ⊙ k" stood where the query strip's dimension numbers are drawn: every
    subplot title of the lower row sits in the gap under the query strip, so that strip's
    x axis draws no numbers there."""
    import numpy as np

    n, dims = 4, 8
    fig = attention_figures.neuron_view(["a", "b", "c", "d"], np.ones(dims), np.ones((n, dims)),
                                        np.ones((n, dims)), np.ones(n), np.ones(n) / n, 0, "t")
    layout = fig.layout
    strip = fig.get_subplot(1, 1)
    low, _ = strip.yaxis.domain
    lower_titles = [a for a in layout.annotations if a.text in ("keys k", "q ⊙ k")]
    assert len(lower_titles) == 2
    for title in lower_titles:
        assert title.y <= low + 1e-9            # under the strip, above the lower row
    assert strip.xaxis.showticklabels is False
