"""A link fills a text box no further than typing could (Issue 47, item 5): each box's cap is
given once (state.url_text_input) and holds for a value from the address or another page."""
import pytest

from tests.app.helpers import no_failures, page
from tests.app.test_corpus_page import indexes  # noqa: F401 - a fixture

pytestmark = pytest.mark.usefixtures("tiny_engine")


def test_a_linked_find_a_word_keeps_the_boxs_60_characters(tiny_engine):
    at = page("grid")
    at.query_params.update({"grid_model": tiny_engine.gpt, "grid_find": "f" * 100})
    at.run()
    no_failures(at)
    box = at.text_input(key="grid_find")
    assert box.max_chars == 60 and box.value == "f" * 60


def test_the_corpus_boxes_keep_their_caps_from_a_link(indexes):  # noqa: F811
    at = page("corpus")
    at.query_params.update({"corpus_word": "b" * 200, "corpus_query_text": "s" * 1500,
                            "corpus_query_word": "w" * 100})
    at.run()
    assert not at.exception      # the search says in one line that the word is not there
    for key, cap, char in (("corpus_word", 40, "b"), ("corpus_query_text", 1000, "s"),
                           ("corpus_query_word", 40, "w")):
        box = at.text_input(key=key)
        assert box.max_chars == cap and box.value == char * cap, key


def test_a_word_handed_over_from_another_page_keeps_the_boxs_cap(indexes):  # noqa: F811
    at = page("corpus")
    at.session_state["corpus_query_word"] = "w" * 90      # as grid.py and clusters.py hand it
    at.run()
    no_failures(at)
    assert at.text_input(key="corpus_query_word").value == "w" * 40
