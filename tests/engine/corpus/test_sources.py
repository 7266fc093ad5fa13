"""Corpus sources: text files, folders, bad input said in one line."""
import pytest

from engine.corpus import sources
from engine.errors import EngineError


def test_a_text_file_keeps_its_sentences_in_order_and_leaves_out_bad_lines(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("The bank is open .\n\n   \nA river bank .\n" + "x" * 100_000 + "\nDone .\n")
    c = sources.load(str(f))
    assert c.sentences == ("The bank is open .", "A river bank .", "Done .")
    assert [n for n, _ in c.skipped] == [5] and "100000 characters" in c.skipped[0][1]
    same = sources.load(str(f))
    assert same.digest == c.digest
    f.write_text("The bank is open .\nA river bank .\nDone!\n")
    assert sources.load(str(f)).digest != c.digest


def test_a_line_holding_a_line_separator_stays_one_sentence(tmp_path):
    """str.splitlines() cut a corpus line at U+2028, U+2029, U+0085, VT and FF."""
    f = tmp_path / "c.txt"
    f.write_bytes("The bank\u2028is open .\r\nA river\x0cbank .\n".encode("utf-8"))
    assert sources.load(str(f)).sentences == ("The bank\u2028is open .", "A river bank .")


def test_a_file_that_is_not_utf8_names_the_line(tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes("ok line\nsecond ok\ncaf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(EngineError, match=r"not UTF-8 text \(line 3"):
        sources.load(str(f))


def test_a_folder_reads_every_txt_file_sorted(tmp_path):
    (tmp_path / "b.txt").write_text("Second file .\n")
    (tmp_path / "a.txt").write_text("First file .\n")
    (tmp_path / "notes.md").write_text("not read\n")
    assert sources.load(str(tmp_path)).sentences == ("First file .", "Second file .")


@pytest.mark.parametrize("src,message", [
    ("no/such/path", "neither 'brown'"),
    ("hf:", "hf:NAME"),
])
def test_unknown_sources_get_one_line(src, message):
    with pytest.raises(EngineError, match=message):
        sources.load(src)


def test_an_empty_corpus_is_refused(tmp_path):
    f = tmp_path / "empty.txt"
    f.write_text("\n\n  \n")
    with pytest.raises(EngineError, match="no usable sentences$"):
        sources.load(str(f))


def test_a_corpus_of_lines_over_the_caps_says_so(tmp_path):
    """One 100k-character line said only "holds no usable sentences"."""
    f = tmp_path / "long.txt"
    f.write_text("word " * 20_000 + "\n\n")
    with pytest.raises(EngineError, match=r"no usable sentences: every line is left out \(1; "
                                          r"the first: .*line 1: the text has 99999 "
                                          r"characters; the cap is 1,?000\)"):
        sources.load(str(f))


def test_an_hf_dataset_loads_through_the_datasets_library(tmp_path, monkeypatch):
    """hf:NAME goes through datasets.load_dataset; a dataset folder of text files (the `text`
    builder, a `text` column, split `train`) stands in for the hub, read in offline mode."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = tmp_path / "my_dataset"
    data.mkdir()
    (data / "part.txt").write_text("The bank is open .\n\nA river bank .\n")
    c = sources.load(f"hf:{data}")
    assert c.sentences == ("The bank is open .", "A river bank .")
    with pytest.raises(EngineError, match="has no column 'body' \\(it has text\\)"):
        sources.load(f"hf:{data}:train:body")


def test_an_hf_source_without_a_network_is_one_line_without_the_librarys_retries(monkeypatch):
    import datasets

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr("engine.fetch._reachable", lambda host, port=443: False)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("tried the hub"))
    with pytest.raises(EngineError, match="hf: corpora need a network, and huggingface.co "
                                          "cannot be reached"):
        sources.load("hf:stanfordnlp/imdb")
