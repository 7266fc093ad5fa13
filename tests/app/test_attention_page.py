"""Attention page with the real engine on tiny random checkpoints: the tiny BERT has [CLS]/[SEP],
the tiny GPT-2 is causal; every plotted map is checked against Engine().encode directly."""
import numpy as np
import pytest

from engine.analysis import attention as att
from engine.api import Engine
from engine.families import FAMILIES
from tests.app.helpers import (figure, figures, messages, no_failures, page, set_sentences,
                               title)
from tests.zoo import HEADS, LAYERS

pytestmark = pytest.mark.usefixtures("tiny_engine")
FIRST = "Your mouse likes cheese."      # the mouse preset's first sentence, shown by default


def _heatmap(at, name):
    return next(f for f in figures(at) if title(f).startswith(name)
                and f["data"][0]["type"] == "heatmap")


def _bert(at, m):
    return at.radio(key="att_model").set_value(m.bert).run()


def _encoding(model_id):
    return Engine().encode(model_id, [FIRST], attentions=True)[0]


def test_one_head_heatmap_is_the_engines_map_with_rows_summing_to_one(tiny_engine):
    m = tiny_engine
    at = _bert(page("attention").run(), m)
    no_failures(at)
    enc = _encoding(m.bert)
    heat = _heatmap(at, f"{m.bert}, layer 1, head 1")
    z = np.array(heat["data"][0]["z"])
    assert np.allclose(z, enc.attentions[0, 0], atol=1e-6)
    assert z.shape == (7, 7) and np.allclose(z.sum(1), 1.0, atol=1e-5)
    assert [x.replace("\u200b", "") for x in heat["data"][0]["x"]] == list(enc.tokens)
    assert heat["data"][0]["x"][0] == "[CLS]"
    lines = figure(at, f"{m.bert}, layer 1, head 1")   # the head view comes first
    drawn = [t for tr in lines["data"] if tr["mode"] == "lines" for t in tr["text"] if t]
    assert any(t.startswith("[CLS] → ") for t in drawn)


def test_hiding_special_tokens_drops_cls_and_sep_and_renormalises(tiny_engine):
    m = tiny_engine
    at = _bert(page("attention").run(), m)
    at.toggle(key="att_hide").set_value(True).run()
    no_failures(at)
    heat = _heatmap(at, f"{m.bert}, layer 1, head 1")
    assert "[CLS]" not in heat["data"][0]["x"] and "[SEP]" not in heat["data"][0]["x"]
    z = np.array(heat["data"][0]["z"])
    inner = _encoding(m.bert).attentions[0, 0, 1:-1, 1:-1]
    assert z.shape == (5, 5) and np.allclose(z.sum(1), 1.0, atol=1e-5)
    assert np.allclose(z, inner / inner.sum(1, keepdims=True), atol=1e-5)


def test_average_over_heads_replaces_the_head_choice(tiny_engine):
    m = tiny_engine
    at = _bert(page("attention").run(), m)
    at.toggle(key="att_average").set_value(True).run()
    no_failures(at)
    heat = _heatmap(at, f"{m.bert}, layer 1, mean of heads")
    mean = _encoding(m.bert).attentions[0].mean(axis=0)
    assert np.allclose(heat["data"][0]["z"], mean, atol=1e-6)


def test_model_view_statistics_and_rollout_are_drawn(tiny_engine):
    at = page("attention").run()
    no_failures(at)
    grid = [f for f in figures(at) if f["layout"].get("xaxis", {}).get("ticktext", [""])[0] == "head 1"]
    assert grid, "model view missing"
    enc = _encoding(tiny_engine.gpt)                       # the GPT is the first model offered
    prev = np.array(figure(at, "Previous-token score")["data"][0]["z"])
    assert prev.shape == (LAYERS, HEADS)
    stats = att.head_stats(enc.attentions, enc.special_mask, FAMILIES[enc.family].left_to_right)
    assert np.allclose(prev, stats.previous_token, atol=1e-6)
    roll = np.array(figure(at, "Rollout to layer 1")["data"][0]["z"])
    assert np.allclose(roll, att.rollout(enc.attentions)[0], atol=1e-6)
    assert np.allclose(roll.sum(1), 1.0, atol=1e-5)
    assert np.allclose(np.triu(roll, 1), 0.0)   # causal model: rollout stays causal


def test_elmo_is_said_to_have_no_attention_and_shows_layer_contributions(tiny_engine):
    at = page("attention").run()
    assert any("has no attention" in i for i in messages(at)["info"])
    shares = figure(at, f"{tiny_engine.elmo}: layer contributions")
    plotted = np.array([tr["y"] for tr in shares["data"]])
    norms = np.linalg.norm(_encoding(tiny_engine.elmo).word_vectors("mean"), axis=2)
    assert np.allclose(plotted, norms / norms.sum(axis=0), atol=1e-5)
    assert np.allclose(plotted.sum(axis=0), 1.0, atol=1e-5)


def test_a_layer_from_the_url_beyond_the_model_is_clamped():
    at = page("attention")
    at.query_params["att_layer"] = "99"
    at.run()
    no_failures(at)
    assert at.slider(key="att_layer").value == LAYERS


def test_switching_model_resets_a_token_focus_that_no_longer_exists(tiny_engine):
    m = tiny_engine
    at = _bert(page("attention").run(), m)
    at.selectbox(key="att_focus").set_value("6: [SEP]").run()
    no_failures(at)
    drawn = {t for tr in figure(at, f"{m.bert}, layer 1, head 1")["data"]
             if tr["mode"] == "lines" for t in tr["text"] if t}
    assert drawn and all("[SEP]" in t for t in drawn)      # only lines from or to the focus
    at.radio(key="att_model").set_value(m.gpt).run()
    no_failures(at)
    assert at.selectbox(key="att_focus").value == "(all)"


def test_every_head_in_its_own_colour_with_a_legend_entry_per_head(tiny_engine):
    m = tiny_engine
    at = _bert(page("attention").run(), m)
    at.toggle(key="att_every_head").set_value(True).run()
    no_failures(at)
    fig = figure(at, f"{m.bert}, layer 1, every head")
    lines = [tr for tr in fig["data"] if tr["mode"] == "lines"]
    legend = [tr["name"] for tr in lines if tr.get("showlegend")]
    assert legend == [f"head {h}" for h in range(1, HEADS + 1)]     # counted from 1, as layers
    colours = {tr["name"]: tr["line"]["color"] for tr in lines}
    assert len(set(colours.values())) == HEADS          # one colour per head
    enc = _encoding(m.bert)
    strong = {(h, i, j) for h, i, j in zip(*np.nonzero(enc.attentions[0] >= 0.05))}
    segments = sum(tr["x"].count(None) for tr in lines)     # one None after each line
    assert segments == len(strong)


@pytest.mark.parametrize("which", ["bert", "gpt"])
def test_neuron_view_shows_the_scores_whose_softmax_is_the_heads_map(tiny_engine, which):
    m = tiny_engine
    at = page("attention").run()
    at.radio(key="att_model").set_value(getattr(m, which)).run()
    at.selectbox(key="att_query").set_value(at.selectbox(key="att_query").options[2]).run()
    no_failures(at)
    fig = figure(at, f"{getattr(m, which)}, layer 1, head 1: neuron view")
    enc = _encoding(getattr(m, which))
    attention_bars = fig["data"][4]["x"]
    assert np.allclose(attention_bars, enc.attentions[0, 0, 2], atol=1e-5)
    keys = np.array(fig["data"][1]["z"])
    assert keys.shape[0] == len(enc.tokens)
    if which == "gpt":       # a causal model cannot look ahead: those scores are -inf
        assert fig["data"][3]["text"][3:] == ["−∞"] * (len(enc.tokens) - 3)


def test_a_link_restores_the_model_the_head_average_and_hidden_special_tokens(tiny_engine):
    """A copied link came back as the first model with both toggles off."""
    m = tiny_engine
    at = _bert(page("attention").run(), m)
    at.toggle(key="att_average").set_value(True).run()
    at.toggle(key="att_hide").set_value(True).run()
    no_failures(at)
    link = {k: at.query_params[k] for k in ("att_model", "att_average", "att_hide")}
    again = page("attention")
    again.query_params.update({k: v[0] if isinstance(v, list) else v for k, v in link.items()})
    again.run()
    no_failures(again)
    assert again.radio(key="att_model").value == m.bert
    assert again.toggle(key="att_average").value and again.toggle(key="att_hide").value
    heat = _heatmap(again, f"{m.bert}, layer 1, mean of heads")["data"][0]
    assert "[CLS]" not in heat["x"] and len(heat["x"]) == 5


def test_a_negative_sentence_in_the_link_shows_the_first():
    at = page("attention")
    at.query_params["att_sentence"] = "-1"
    at.run()
    no_failures(at)
    assert at.selectbox(key="att_sentence").value == 0


def test_the_exported_settings_number_the_head_as_the_page_does(tiny_engine, monkeypatch):
    """The titles say "head 1" for the first head; the settings file beside them said 0."""
    from app import export

    seen = {}
    real = export.figure_downloads

    def record(fig, name, table=None, settings=None, **kwargs):
        seen[name] = settings
        return real(fig, name, table, settings, **kwargs)

    monkeypatch.setattr(export, "figure_downloads", record)
    at = _bert(page("attention").run(), tiny_engine)
    no_failures(at)
    heads = {s["head"] for s in seen.values() if s and "head" in s}
    assert heads == {1} and figure(at, f"{tiny_engine.bert}, layer 1, head 1")


RIVERBANK = "We sat on the riverbank."      # the tiny BERT splits it: river ##bank


def _words_page(tiny_engine):
    at = page("attention").run()
    set_sentences(at, [RIVERBANK, "The bank closed."], "bank").run()
    return _bert(at, tiny_engine)


def test_the_word_view_merges_a_split_word_into_one_entry(tiny_engine, monkeypatch):
    from app import export

    m = tiny_engine
    enc = Engine().encode(m.bert, [RIVERBANK], attentions=True)[0]
    assert ("river", "##bank") == enc.tokens[5:7]
    exported = {}
    real = export.figure_downloads

    def record(fig, name, table=None, settings=None, arrays=None):
        exported[name] = (table, settings, arrays)
        return real(fig, name, table, settings, arrays)

    monkeypatch.setattr(export, "figure_downloads", record)
    at = _words_page(m)
    at.radio(key="att_units").set_value("Words").run()
    no_failures(at)
    heat = _heatmap(at, f"{m.bert}, layer 1, head 1, words")["data"][0]
    labels = [x.replace("\u200b", "") for x in heat["x"]]
    assert labels == ["[CLS]", *enc.words, "[SEP]"] and "riverbank" in labels
    z = np.array(heat["z"])
    words = att.word_attention(enc.attentions, enc.token_to_word, len(enc.words))
    assert np.allclose(z, words[0, 0], atol=1e-6) and np.allclose(z.sum(1), 1.0, atol=1e-5)
    assert figure(at, f"{m.bert}, layer 1, head 1, words")        # the head view follows
    assert any("stay per token" in c.value for c in at.caption)
    table, settings, _ = exported["head-heatmap"]
    assert list(table["row_token"]) == labels and settings["units"] == "words"
    npz = exported["model-view"][2]
    assert np.allclose(npz["word_attentions"], words, atol=1e-6)
    assert npz["word_labels"].tolist() == labels
    # rollout stays per token
    assert len(figure(at, "Rollout to layer 1")["data"][0]["x"]) == len(enc.tokens)
    assert exported["rollout"][1]["units"] == "tokens"
    at.toggle(key="att_hide").set_value(True).run()
    heat = _heatmap(at, f"{m.bert}, layer 1, head 1, words")["data"][0]
    assert [x.replace("\u200b", "") for x in heat["x"]] == list(enc.words)
    assert np.allclose(np.array(heat["z"]).sum(1), 1.0, atol=1e-5)


def test_a_link_opens_the_word_view(tiny_engine):
    at = page("attention")
    at.query_params.update(att_units="Words", att_model=tiny_engine.bert)
    at.run()
    no_failures(at)
    assert at.radio(key="att_units").value == "Words"
    assert _heatmap(at, f"{tiny_engine.bert}, layer 1, head 1, words")


def test_a_sentence_too_long_for_the_model_view_says_so_in_one_line(tiny_engine, monkeypatch):
    """#47: a 600-token sentence on SmolLM2-135M made the model view a 519 MB message that
    Streamlit refused with an exception box; the other views still draw its maps."""
    from app import attention_figures as app_figures

    monkeypatch.setattr(app_figures, "MODEL_VIEW_MAX_CELLS", 100)
    at = page("attention").run()
    no_failures(at)
    n = len(_encoding(tiny_engine.gpt).tokens)
    cells = LAYERS * HEADS * n ** 2
    said = [i for i in messages(at)["info"] if "too long for the model view" in i]
    assert len(said) == 1 and f"{cells:,} cells" in said[0] and "at most 100" in said[0]
    assert not [f for f in figures(at)
                if f["layout"].get("xaxis", {}).get("ticktext", [""])[0] == "head 1"]
    assert _heatmap(at, f"{tiny_engine.gpt}, layer 1, head 1")
    assert figure(at, "Rollout to layer 1") and figure(at, "Previous-token score")


def test_a_view_that_fails_is_one_line_and_the_views_after_it_still_draw(tiny_engine,
                                                                        monkeypatch):
    from app import attention_figures as app_figures

    def broken(*args, **kwargs):
        raise RuntimeError("no grid today\nsecond line")

    monkeypatch.setattr(app_figures, "attention_grid", broken)
    at = page("attention").run()
    assert not at.exception
    assert [e.value for e in at.error] == ["Something went wrong (RuntimeError): no grid today"]
    assert figure(at, "Rollout to layer 1") and figure(at, "Previous-token score")


def _tabs_place(at) -> int:
    return next(i for i, node in at.main.children.items()
                if getattr(node, "type", "") == "tab_container")


def test_the_views_keep_their_place_once_the_models_are_ready(tiny_engine):
    """The run that loads a model draws a progress box above the views, the runs after it do
    not: the tabs came one place higher, and Streamlit drew them anew, on the first tab (the
    view the user had chosen went to the back, as the knock-out browser test saw)."""
    from app import engine_access

    engine = engine_access.get_engine()
    models = (tiny_engine.elmo, tiny_engine.gpt, tiny_engine.bert)
    for m in models:
        engine._adapters.pop(m, None)
    at = page("attention")
    at.query_params.update(sentences="A mouse ran past the sleeping cat.", target="mouse")
    at.run()
    no_failures(at)
    assert all(engine.is_loaded(m) for m in models)       # this run loaded them
    first = _tabs_place(at)
    at.run()
    no_failures(at)
    assert _tabs_place(at) == first
