"""User text shows as text (Issue 47, item 4): no link, image, auto-link or tag from a typed
sentence, target, sense label, corpus word or linked value, in Streamlit's messages
(app.safe.safe_md) or in plotly's titles, legends, ticks and hovers (app.safe.safe_label)."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

from app import attention_figures, explain_figures, figures
from app.safe import safe_label, safe_md
from tests.app.helpers import figure, messages, page
from tests.app.test_corpus_page import indexes  # noqa: F401 - a fixture

ROOT = Path(__file__).resolve().parents[2]
LINK = "[x](http://example.com/t)"
IMAGE = "![i](http://127.0.0.1:9/t.png)"
TAG = '<a href="//example.com">R</a>'
BIG = '<span style="font-size:90px">big</span>'
# what GitHub-flavoured markdown turns into a link on its own (remark's autolink literals)
AUTOLINK = re.compile(r"(https?:|www\.|[-.\w+]@)", re.IGNORECASE)


def _unescaped(md: str) -> str:
    """The text a markdown renderer shows for safe_md's output (escapes undone)."""
    return re.sub(r"\\(.)", r"\1", md)


@pytest.mark.parametrize("text", [LINK, IMAGE, TAG, "www.example.com", "me@example.com",
                                  "HTTPS://example.com", "`tick` *star* _under_ $x$ &amp;",
                                  "a\nb", "# heading"])
def test_safe_md_escapes_markdown_and_breaks_auto_links(text):
    md = safe_md(text)
    assert not re.search(r"(?<!\\)[\[\]<>`*_$&#!]", md), md     # every one escaped
    shown = _unescaped(md)
    assert shown.replace("\u2060", "") == text.replace("\n", " ")   # the same text, one line
    assert not AUTOLINK.search(shown), shown                       # ... no auto-link starts


def test_safe_label_leaves_no_tag_and_keeps_quotes():
    assert safe_label(TAG) == '&lt;a href="//example.com"&gt;R&lt;/a&gt;'
    assert safe_label("&lt;b&gt;") == "&amp;lt;b&amp;gt;"      # an entity typed stays as typed


def _figures_of(label: str) -> list:
    """Every figure builder, given `label` wherever it takes text."""
    coords = np.zeros((2, 2))
    att = np.full((2, 2, 2, 2), 0.5)
    return [
        figures.projection_scatter([(label, coords)], [label, "b"], ["h", "h"], title=label,
                                   overlaps=[[[0, 1]]]),
        figures.similarity_heatmap(np.eye(2), [label, "b"], label),
        figures.per_layer_lines({label: np.zeros(3)}, label, "y"),
        figures.matrix_heatmap(np.eye(2), [label, "b"], [label, "b"], label, "z",
                               text=[[label, "b"], ["c", label]]),
        figures.mix_weights(np.ones(2) / 2, 1.0, [label, "b"]),
        attention_figures.head_view([label, "b"], att[0, 0], title=label),
        attention_figures.head_view_heads([label, "b"], att[0], title=label),
        attention_figures.attention_grid(att, [label, "b"]),
        figures.stacked_shares([label, "b"], np.ones((2, 2)) / 2, [label, "b"], label),
        figures.prediction_bars([label, "b"], [0.6, 0.4], label),
        figures.layer_grid([(label, coords)], [label, "b"], ["h", "h"], [label, "b"],
                           title=label),
        figures.layer_animation([(label, coords)], [label, "b"], ["h", "h"], title=label),
        attention_figures.attention_row([label, "b"], np.ones(2) / 2, 0.1, 0, label),
        attention_figures.neuron_view([label, "b"], np.ones(2), np.ones((2, 2)),
                                      np.ones((2, 2)), np.ones(2), np.ones(2) / 2, 0, label),
        explain_figures.attribution_words([label, "b"], np.array([0.5, -0.5]), label),
        explain_figures.attribution_bars([label, "b"], np.array([0.5, -0.5]), label),
        explain_figures.generation_steps([label, "b"], np.ones(2) / 2, np.ones(2), label),
        explain_figures.layer_ranks(np.ones((2, 2), int), [label, "b"], [label, "b"], label),
    ]


@pytest.mark.parametrize("label", [TAG, BIG])
def test_no_figure_builder_lets_a_tag_through(label):
    for fig in _figures_of(label):
        text = json.dumps(fig.to_plotly_json(), default=str)
        assert "<a " not in text and "<span" not in text, text[:300]
        assert "&lt;a " in text or "&lt;span" in text


# -- every message that quotes user text passes it through safe_md --------------------------

MESSAGES = {"error", "warning", "info", "caption", "markdown", "write", "success", "toast",
            "title", "header", "subheader", "expander", "tabs", "spinner", "status"}
LABELLED = {"progress", "update"}
# names that hold what a user typed or linked (sentences, target, labels, words, a box's text,
# a model id: a hub id or a folder's path, typed or in a link)
USER_TEXT = {"target", "word", "words", "labels", "sentence", "sentences", "text", "find",
             "asked", "spec", "single", "query", "model_id", "model", "models", "chosen",
             "sidebar_bert", "model_a", "model_b", "m"}
# markdown of the project's own, not the user's: the benchmark report (results/*.md)
OWN_MARKDOWN = {("app/pages/benchmarks.py", "text")}
# calls whose result is safe whatever they are given: the two escapes, and numbers
# (model_note: the registry's own line about a model, looked up by its id, not the id)
SAFE_CALLS = {"safe_md", "one_line", "len", "sum", "int", "float", "round", "fmt", "model_note"}


def _user_text_in(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in SAFE_CALLS:
            return []
    if isinstance(node, ast.IfExp):    # its condition is tested, not shown
        return _user_text_in(node.body) + _user_text_in(node.orelse)
    found = []
    if isinstance(node, ast.Name) and node.id in USER_TEXT:
        found.append(node.id)
    elif isinstance(node, ast.Attribute) and node.attr in USER_TEXT:
        found.append(ast.unparse(node))
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
            and node.slice.value in USER_TEXT:
        found.append(ast.unparse(node))
    for child in ast.iter_child_nodes(node):
        found += _user_text_in(child)
    return found


def _unsafe_messages(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in MESSAGES | LABELLED):
            continue
        shown = node.args[:1] if node.func.attr in MESSAGES else []
        # a progress bar's text and a status box's label are markdown too
        shown += [kw.value for kw in node.keywords if kw.arg in ("text", "label")]
        for arg in shown:
            if isinstance(arg, ast.Constant):
                continue
            where = str(path.relative_to(ROOT))
            names = sorted({n for n in _user_text_in(arg) if (where, n) not in OWN_MARKDOWN})
            if names:
                out.append(f"{where}:{node.lineno} {names}")
    return out


def test_every_message_quoting_user_text_escapes_it():
    """A message (st.error, st.caption, ...) that quotes a name holding user text calls
    safe_md (or one_line, which does) on it: the target on /grid, the sense labels in the
    '… has one' note and the corpus word reached the page as markdown."""
    files = sorted((ROOT / "app").rglob("*.py")) + [ROOT / "streamlit_app.py"]
    unsafe = [m for f in files for m in _unsafe_messages(f)]
    assert unsafe == []


# -- on the pages ----------------------------------------------------------------------------

def _plain(md: str) -> str:
    return _unescaped(md).replace("\u2060", "")


def _assert_shown_as_text(md: str, typed: str) -> None:
    """The part of a page's message that quotes what a user typed: markdown that shows the
    same text, with no markdown character left unescaped and no auto-link start (worked out
    here, not by calling safe_md, the code under test)."""
    assert _plain(md) == typed, md
    assert not re.search(r"(?<!\\)[\[\]<>`*_$&#!]", md), md
    assert not AUTOLINK.search(_unescaped(md)), md


@pytest.mark.usefixtures("tiny_engine")
@pytest.mark.parametrize("target", [LINK, IMAGE, "www.example.com"])
def test_a_target_in_no_sentence_is_quoted_as_text_on_the_grid(tiny_engine, target):
    at = page("grid")
    at.query_params["grid_model"] = tiny_engine.gpt
    at.query_params["target"] = target
    at.run()
    assert not at.exception
    errors = messages(at)["error"]
    quoted = [m.group(1) for e in errors
              for m in [re.search(r"'(.*)' is in none of the sentences", e)] if m]
    assert len(quoted) == 1, errors
    _assert_shown_as_text(quoted[0], target)


@pytest.mark.usefixtures("tiny_engine")
def test_sense_labels_show_as_text_in_the_note_and_the_legend(tiny_engine):
    labels = [TAG, "b", "b", LINK, LINK, "b", "b", "b"]
    at = page("clusters")
    at.query_params["labels"] = "|".join(labels)
    at.run()
    assert not at.exception
    note = next(i for i in messages(at)["info"] if "has one" in i)
    named = re.search(r"\((.*) has one\)", note).group(1)   # the one label with one sentence
    _assert_shown_as_text(named, f"'{TAG}'")
    # plotly reads a legend entry as HTML: the tag's brackets as entities, the link as typed
    legend = {tr.get("name") for tr in figure(at, f"{tiny_engine.gpt}: 'mouse'")["data"]}
    assert {'&lt;a href="//example.com"&gt;R&lt;/a&gt;', LINK} <= legend and TAG not in legend


def test_a_corpus_word_is_quoted_as_text(indexes):  # noqa: F811
    at = page("corpus")
    at.query_params["corpus_word"] = "www.example.com"
    at.run()
    assert not at.exception
    warning = next(w for w in messages(at)["warning"] if "does not occur" in w)
    # written out, not built with safe_md: a word joiner breaks the auto-link after "www",
    # and each dot is escaped
    assert warning.startswith("'www\u2060\\.example\\.com'"), warning
