"""Predictions page with the real engine on tiny random checkpoints: a GPT-2, a BERT without and
one with a masked-LM head, an ELMo with an LM softmax (tests/zoo.py). The bars must be
the engine's own predictions for the same blank."""
import numpy as np
import pytest

from app.figures import visible_token
from app.safe import safe_label
from engine.api import Engine
from tests.app.helpers import figure, figures, messages, no_failures, page
from tests.zoo import LAYERS

pytestmark = pytest.mark.usefixtures("tiny_engine")
BLANK = "Your [MASK] likes cheese."      # the mouse preset's first sentence, target masked


def _bars(fig) -> tuple[list[str], list[float]]:
    """Drawn best at the top, so the trace lists the candidates worst first."""
    bar = fig["data"][0]
    return bar["y"][::-1], bar["x"][::-1]


def _same(fig, pred) -> None:
    tokens, probs = _bars(fig)
    # drawn as plotly labels: '<UNK>' is escaped so that plotly shows it rather than reads a tag
    assert tokens == [safe_label(visible_token(c.token)) for c in pred.candidates]
    assert np.allclose(probs, [c.prob for c in pred.candidates], atol=1e-6)
    assert probs == sorted(probs, reverse=True) and all(0 < p <= 1 for p in probs)


def test_target_word_is_masked_by_default_and_three_families_answer(tiny_engine):
    m, eng = tiny_engine, Engine()
    at = page("predictions").run()
    no_failures(at)
    assert any(BLANK in md.value for md in at.text)
    nxt = figure(at, "Next word")
    assert len(nxt["data"][0]["y"]) == 8          # top k = 8 by default
    _same(nxt, eng.predict_next(m.gpt, "Your", top_k=8))
    _same(figure(at, "Forward LM"), eng.predict_next(m.elmo, "Your", top_k=8))
    _same(figure(at, "Backward LM"), eng.predict_previous(m.elmo, "likes cheese.", top_k=8))
    _same(figure(at, "Fill from both sides"), eng.predict_masked(m.gpt, BLANK, top_k=8))
    _same(figure(at, "Both LMs together"), eng.predict_masked(m.elmo, BLANK, top_k=8))
    lens = np.array(figure(at, "Top next token per layer")["data"][0]["z"])
    assert lens.shape == (LAYERS + 1, 1)          # embeddings + 2 layers, 1 prefix word
    assert np.allclose(lens, eng.logit_lens(m.gpt, "Your").top_probs, atol=1e-6)


def test_bert_without_mlm_head_says_so_and_a_masked_lm_fills_the_blank(tiny_engine):
    m = tiny_engine
    at = page("predictions").run()
    no_failures(at)
    assert any("has no masked-LM head" in c.value for c in at.caption)
    pick = at.selectbox(key="pred_bert")
    assert m.bert not in pick.options and m.bert_mlm in pick.options
    pick.set_value(m.bert_mlm).run()
    no_failures(at)
    assert at.sidebar.selectbox(key="model_bert").value == m.bert   # the sidebar is left alone
    masked = figure(at, "Masked LM")
    assert len(masked["data"][0]["x"]) == 8
    _same(masked, Engine().predict_masked(m.bert_mlm, BLANK, top_k=8))


def test_masking_the_first_word_leaves_no_prefix_for_gpt():
    at = page("predictions").run()
    [b for b in at.selectbox if b.label == "Word to mask"][0].set_value(0).run()
    no_failures(at)
    assert any("no words on that side" in i for i in messages(at)["info"])
    assert any("no prefix" in i for i in messages(at)["info"])


def test_top_k_slider_sets_the_number_of_candidates(tiny_engine):
    at = page("predictions").run()
    at.slider(key="top_k").set_value(4).run()
    nxt = figure(at, "Next word")
    assert len(nxt["data"][0]["y"]) == 4
    _same(nxt, Engine().predict_next(tiny_engine.gpt, "Your", top_k=4))


def test_editing_the_sentence_resets_the_masked_word_to_its_target():
    at = page("predictions").run()
    words = [b for b in at.selectbox if b.label == "Word to mask"][0]
    words.set_value(3).run()                        # "cheese." in "Your mouse likes cheese."
    assert any("Your mouse likes [MASK]" in md.value for md in at.text)
    lines = at.sidebar.text_area(key="sentences").value.splitlines()
    lines[0] = "The mouse ran ."                    # same line, three words, target at 1
    at.sidebar.text_area(key="sentences").set_value("\n".join(lines)).run()
    no_failures(at)
    assert any("The [MASK] ran ." in md.value for md in at.text)


def test_a_text_value_in_an_int_widget_key_is_read_as_its_type():
    """The '>=' str/int TypeError of issue #18 item 1: a page key holding text where an int
    belongs broke every page; url_key now gives each key its declared type."""
    at = page("predictions")
    at.session_state["pred_sentence"] = "1"
    at.session_state["top_k"] = "nonsense"
    at.run()
    no_failures(at)
    assert at.session_state["pred_sentence"] == 1 and at.session_state["top_k"] == 8


def test_the_rescore_toggle_redraws_the_masked_lm_with_the_re_ranked_fill(tiny_engine):
    m = tiny_engine
    at = page("predictions").run()
    at.selectbox(key="pred_bert").set_value(m.bert_mlm).run()
    assert at.toggle(key="pred_rescore").value is False
    at.toggle(key="pred_rescore").set_value(True).run()
    no_failures(at)
    masked = figure(at, "Masked LM, re-ranked")
    _same(masked, Engine().predict_masked(m.bert_mlm, BLANK, top_k=8, rescore=True))
    assert any("pseudo-log-likelihood" in c.value for c in at.caption)
    # the GPT's and ELMo's fills are not touched by it
    _same(figure(at, "Fill from both sides"), Engine().predict_masked(m.gpt, BLANK, top_k=8))


def test_masked_lms_are_offered_in_the_registrys_fill_order(tiny_engine, monkeypatch):
    """The best masked LM first (assets/models.toml fill_order), local folders after; the order
    is the registry's, not a list in app/."""
    from dataclasses import replace

    from app import engine_access

    eng = engine_access.get_engine()
    offered = engine_access.models_that("masked_lm")
    assert offered[:2] == ["minilm-l6-mlm", "bert-brown-mlm"]
    assert tiny_engine.bert_mlm in offered[2:]
    monkeypatch.setitem(eng.registry, "bert-brown-mlm",
                        replace(eng.registry["bert-brown-mlm"], fill_order=0))
    now = engine_access.models_that("masked_lm")   # without an order it goes with the rest, by id
    assert now[0] == "minilm-l6-mlm" and now[1:] == sorted(offered[1:])
    assert engine_access.models_that("masked_lm", current="bert-brown-mlm")[0] == "bert-brown-mlm"


def _bank_blanks(sentences: str):
    at = page("predictions")
    at.query_params.update({"sentences": sentences, "target": "bank"})
    at.run()
    no_failures(at)
    return at


def test_the_blank_is_shown_as_typed_not_as_markdown():
    """"Call the bank(s) now" showed "Call the MASK now": "[MASK](s)" became a link."""
    at = _bank_blanks("Call the bank(s) now .\nThe *bank* is __closed__ .\nA river bank .")
    assert "The blank: Call the [MASK](s) now ." in [t.value for t in at.text]
    assert not any("[MASK]" in md.value for md in at.markdown)
    at.selectbox(key="pred_sentence").set_value(1).run()
    assert "The blank: The *[MASK]* is __closed__ ." in [t.value for t in at.text]


def test_a_target_joined_to_a_clitic_is_masked_alone():
    """"The bank's door" masked as "The [MASK] door": the 's went with the word, so the blank
    asked for a different sentence than the one typed (a CLI user types "[MASK]'s")."""
    at = _bank_blanks("The bank's door closed .\nA river-bank .\nThe bank is open .")
    assert "The blank: The [MASK]'s door closed ." in [t.value for t in at.text]
    # after a hyphen the whole word goes: a GPT fills a blank as a word of its own
    at.selectbox(key="pred_sentence").set_value(1).run()
    assert "The blank: A [MASK] ." in [t.value for t in at.text]


def test_a_link_reopens_the_word_chosen_to_mask():
    """The link kept the sentence but not the word: it reopened on the target word."""
    at = page("predictions").run()
    words = [b for b in at.selectbox if b.label == "Word to mask"][0]
    words.set_value(3).run()
    assert "The blank: Your mouse likes [MASK]." in [t.value for t in at.text]
    link = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert link["pred_word"] == "3"
    again = page("predictions")
    again.query_params.update(link)
    again.run()
    no_failures(again)
    assert "The blank: Your mouse likes [MASK]." in [t.value for t in again.text]


def test_a_token_of_spaces_is_labelled_not_blank():
    assert visible_token(" ") == "\u2423" and visible_token("  ") == "\u2423\u2423"
    assert visible_token("\n") == "\\n" and visible_token(" the") == " the"
    assert visible_token("") == "∅"


def test_a_rerun_with_nothing_changed_asks_no_model_again(tiny_engine, monkeypatch):
    """Every prediction and the logit lens ran again on each rerun (6.5 s on SmolLM2)."""
    from app import engine_access

    m, eng = tiny_engine, engine_access.get_engine()
    calls = []
    for model_id in (m.gpt, m.elmo, m.bert_mlm):
        adapter = eng.adapter(model_id)
        for name in ("predict_masked", "predict_next", "predict_previous", "logit_lens"):
            real = getattr(adapter, name, None)
            if real is not None:
                def counted(*args, _real=real, _name=name, **kwargs):
                    calls.append(_name)
                    return _real(*args, **kwargs)
                monkeypatch.setattr(adapter, name, counted)
    at = page("predictions").run()
    at.selectbox(key="pred_bert").set_value(m.bert_mlm).run()
    no_failures(at)
    assert {"predict_masked", "predict_next", "predict_previous", "logit_lens"} <= set(calls)
    before = [f["data"] for f in figures(at)]
    calls.clear()
    at.run()
    no_failures(at)
    assert calls == [] and [f["data"] for f in figures(at)] == before


def test_the_page_loads_its_models_and_encodes_no_sentence(tiny_engine, monkeypatch):
    """It reads predictions, never an encoding: the sidebar's models are loaded (with the
    progress box), and none encodes the sentences (each of the 8 by each of the 3 models was
    encoded, and cached, at every visit)."""
    from app import engine_access

    eng = engine_access.get_engine()
    encoded = []
    real = eng.encode_words
    monkeypatch.setattr(eng, "encode_words",
                        lambda model_id, *args, **kwargs: encoded.append(model_id)
                        or real(model_id, *args, **kwargs))
    at = page("predictions").run()
    no_failures(at)
    assert figure(at, "Next word")
    assert encoded == []
    assert [k for k in eng.results._items if k[0] == "encoding"] == []
    m = tiny_engine
    assert all(eng.is_loaded(model_id) for model_id in (m.gpt, m.elmo, m.bert))
