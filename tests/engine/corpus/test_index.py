"""ctxlens index / neighbours / stats on a tiny BERT: rows, resume after a kill, bad input."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from engine import cli
from engine.api import Engine
from engine.corpus import index as corpus_index
from engine.corpus import manifest as corpus_manifest
from engine.corpus import tables
from engine.corpus.query import CorpusIndex, neighbours, stats
from engine.errors import EngineError
from engine.text import split_words

ROOT = Path(__file__).resolve().parents[3]
WORDS = ("bank river money open closed the a of by is was near water cash loan boat fish "
         "city old new big small green red").split()


def _corpus(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(4, 12)))) + " ." for _ in range(n)]


@pytest.fixture(scope="module")
def tiny(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus-models")
    mp = pytest.MonkeyPatch()
    mp.setenv("CTXLENS_MODEL_DIRS", str(root))
    model = str(zoo.copy("bert", root / "bert", sentences=_corpus(200) + [" ".join(WORDS)]))
    yield model
    mp.undo()


def _rows(folder):
    idx = CorpusIndex(folder)
    t = pa.concat_tables([idx.table(layer).to_arrow() for layer in idx.manifest.layers])
    t = t.sort_by([("sentence_id", "ascending"), ("layer", "ascending"),
                                      ("position", "ascending")])
    vec = np.asarray(t["vector"].combine_chunks().values.to_numpy(zero_copy_only=False),
                     np.float32).reshape(t.num_rows, -1)
    keys = list(zip(t["sentence_id"].to_pylist(), t["layer"].to_pylist(),
                    t["position"].to_pylist()))
    return keys, vec, t["word"].to_pylist()


def test_index_holds_every_word_at_every_layer_as_the_engine_embeds_it(tiny, tmp_path):
    sentences = _corpus(40)
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences) + "\n")
    m = corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,2", batch_size=8,
                           commit_sentences=16, progress=False)
    n_words = sum(len(split_words(s).words) for s in sentences)
    assert m.complete and m.layers == [0, 2] and m.rows == 2 * n_words
    assert m.rows_per_layer == {"0": n_words, "2": n_words}
    keys, vec, words = _rows(tmp_path / "ix")
    assert len(set(keys)) == len(keys) == m.rows                      # no duplicates
    enc = Engine(cache_size=0).encode(tiny, [sentences[3]])[0]
    wv = enc.word_vectors("mean")
    first = [i for i, k in enumerate(keys) if k[0] == 3 and k[1] == 2]
    assert np.allclose(vec[first], wv[2], atol=2e-3, rtol=1e-3)        # float16 storage
    assert words[first[0]] == enc.words[0]


def test_neighbours_of_a_word_in_an_indexed_sentence_start_with_itself(tiny, tmp_path):
    sentences = _corpus(30, seed=1)
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="all", progress=False)
    idx = CorpusIndex(tmp_path / "ix")
    word = split_words(sentences[5]).words[1]
    hits = neighbours(Engine(cache_size=0), idx, sentences[5], word, 1, k=5)
    assert hits[0].sentence_id == 5 or hits[0].cosine > 0.999
    assert hits[0].cosine > 0.999 and hits[0].sentence == sentences[hits[0].sentence_id]
    assert [h.cosine for h in hits] == sorted([h.cosine for h in hits], reverse=True)
    exact = neighbours(Engine(cache_size=0), idx, sentences[5], word, 1, k=5, exact=True)
    assert [(h.sentence_id, h.position) for h in hits] == \
        [(h.sentence_id, h.position) for h in exact]


def test_neighbours_text_and_json_output_name_the_same_position(tiny, tmp_path, capsys):
    import json

    from engine import cli

    sentences = _corpus(30, seed=1)
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,1", progress=False)
    word = split_words(sentences[5]).words[2]
    args = ["neighbours", "--index", str(tmp_path / "ix"), "--text", sentences[5], "--word",
            word, "--layer", "1", "-k", "3"]
    assert cli.main(args + ["--json"]) == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert cli.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [f"(sentence {h['sentence_id']}, position {h['position']})" for h in hits] == \
        [line[line.index("(sentence"):line.index(")") + 1] for line in lines]


def test_neighbours_of_a_word_that_occurs_twice_say_which_and_can_take_the_other(
        tiny, tmp_path, capsys):
    """It searched for the first "bank" of "... bank ... bank ..." without a word; now stderr
    says which occurrence it was, and --occurrence 2 searches for the other."""
    import json

    from engine import cli

    sentences = _corpus(30, seed=1) + ["the bank near the old bank was closed ."]
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,1", progress=False)
    args = ["neighbours", "--index", str(tmp_path / "ix"), "--text", sentences[-1], "--word",
            "Bank", "--layer", "1", "-k", "1", "--exact", "--json"]
    assert cli.main(args) == 0
    out = capsys.readouterr()
    hit = json.loads(out.out)
    assert hit["position"] == 1 and hit["model"] == tiny and hit["pooling"] == "mean"
    assert "occurs 2 times in the text" in out.err and "occurrence 1 (word position 1" in out.err
    assert cli.main(args + ["--occurrence", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["position"] == 5


def test_a_words_occurrences_at_every_layer_are_the_same_occurrences(tiny, tmp_path):
    """The Corpus page's all-layers grid: one point per occurrence in every panel, so row i
    at every layer is the same (sentence, position), with that layer's own vector."""
    sentences = _corpus(60, seed=2)
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,1,2", progress=False)
    idx = CorpusIndex(tmp_path / "ix")
    word = "bank"
    total = idx.count(word, 0)
    assert total > 6
    for limit in (total, 5):
        vecs, sids, pos = idx.occurrences_at_layers(word, limit=limit)
        assert vecs.shape == (3, min(limit, total), idx.manifest.dim)
        for k, layer in enumerate(idx.manifest.layers):
            v, s, p = idx.occurrences(word, layer, total)
            row = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(s, p))}
            for i, key in enumerate(zip(sids.tolist(), pos.tolist())):
                np.testing.assert_array_equal(vecs[k, i], v[row[key]])
    assert not np.allclose(vecs[0], vecs[2])          # the layers' own vectors, not copies


def test_hits_name_the_stored_word_and_layer_and_texts_follow_the_ids(tiny, tmp_path):
    # a hit reads only (sentence_id, position) and takes its word from the sentence's split:
    # it must name the word the index stored there, punctuation and all
    sentences = _corpus(30, seed=3) + ["the bank's river-side,isn't it near (the old bank)?"]
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,2", progress=False)
    keys, vec, words = _rows(tmp_path / "ix")
    stored = dict(zip(keys, words))
    idx = CorpusIndex(tmp_path / "ix")
    last = [i for i, k in enumerate(keys) if k[0] == 30 and k[1] == 2]
    for row in last:
        hits = idx.search(vec[row], 2, k=8)
        assert hits and all(h.layer == 2 for h in hits)
        assert all(h.word == stored[(h.sentence_id, 2, h.position)] for h in hits)
        assert all(h.sentence == sentences[h.sentence_id] for h in hits)
    # ids are row offsets only while the table is as written; a rewritten one still answers
    db = corpus_index._connect(tmp_path / "ix")
    db.create_table(corpus_index.SENT, pa.table({"sentence_id": np.arange(31)[::-1].copy(),
                                                 "text": sentences[::-1]}), mode="overwrite")
    assert CorpusIndex(tmp_path / "ix").texts([0, 7, 30, 99]) == \
        {0: sentences[0], 7: sentences[7], 30: sentences[30]}


def test_stats_give_every_layer_a_value_inside_its_interval(tiny, tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("\n".join(_corpus(60, seed=2)))
    corpus_index.build(tiny, str(src), tmp_path / "ix", progress=False)
    metrics, n = stats(CorpusIndex(tmp_path / "ix"), sample=40, n_resamples=200)
    assert n == 40 and metrics.n_layers == len(CorpusIndex(tmp_path / "ix").manifest.layers)
    from engine.analysis.bootstrap import interval

    for key in ("self_similarity", "intra_sentence", "anisotropy"):
        for i in range(metrics.n_layers):
            lo, hi = interval(metrics.replicates[key][:, i])
            assert lo - 1e-9 <= getattr(metrics, key)[i] <= hi + 1e-9


def test_stats_read_words_as_the_compare_layers_page_does_by_their_exact_form(tiny, tmp_path):
    """`ctxlens stats` lowercased words before grouping them while the app's Compare layers
    page (and results/geometry.md) keep the exact form: the same sentences gave two sets of
    self-similarities, and ELMo's case-sensitive char CNN read below 1."""
    from engine.analysis.geometry import layer_metrics

    rng = np.random.default_rng(4)
    sentences = [" ".join(w.capitalize() if rng.random() < 0.4 else w for w in s.split())
                 for s in _corpus(50, seed=4)]
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    corpus_index.build(tiny, str(src), tmp_path / "ix", progress=False)
    metrics, n = stats(CorpusIndex(tmp_path / "ix"), sample=0)
    encs = Engine(cache_size=0).encode(tiny, sentences)
    exact = layer_metrics(encs, pool="mean", seed=0, lowercase=False)
    lowered = layer_metrics(encs, pool="mean", seed=0, lowercase=True)
    assert n == 50 and exact.n_words_repeated != lowered.n_words_repeated
    assert metrics.n_words_repeated == exact.n_words_repeated
    assert np.allclose(metrics.self_similarity, exact.self_similarity, atol=5e-3)


def test_a_killed_index_run_resumes_without_duplicates_or_losses(tiny, tmp_path):
    run = killed_then_resumed(tiny, tmp_path, ["--commit-sentences", "100"])
    assert 0 < run["started_at_sentence"] < 1500


def killed_then_resumed(tiny, tmp_path, extra: list[str], commits: int = 4,
                        group: bool = False) -> dict:
    """`ctxlens index` (with `extra` arguments) killed once layer 1 has `commits` versions,
    mid-run, between or inside commits (with `group`, its whole process group, as Ctrl-C in
    a terminal would reach it), then run again: every row once, as a run never stopped makes
    them. Returns the second run's record."""
    sentences = _corpus(1500, seed=3)
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    env = {**os.environ, "CTXLENS_MODEL_DIRS": str(Path(tiny).parent),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "engine.cli", "index", "--model", tiny, "--corpus", str(src),
           "--output", str(tmp_path / "ix"), "--layers", "0,1", *extra]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=group)
    versions = tmp_path / "ix" / "db" / "layer_1.lance" / "_versions"
    deadline = time.time() + 180
    while time.time() < deadline and (not versions.exists() or
                                      len(list(versions.iterdir())) < commits):
        time.sleep(0.05)
    if group:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert not manifest["complete"]
    again = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                           start_new_session=group)
    assert again.returncode == 0, again.stderr[-2000:]
    keys, vec, _ = _rows(tmp_path / "ix")
    n_words = sum(len(split_words(s).words) for s in sentences)
    assert len(keys) == len(set(keys)) == 2 * n_words
    runs = json.loads((tmp_path / "ix" / "manifest.json").read_text())["build"]["runs"]
    assert len(runs) == 2
    corpus_index.build(tiny, str(src), tmp_path / "whole", layers="0,1", progress=False)
    keys2, vec2, _ = _rows(tmp_path / "whole")
    assert keys == keys2 and np.allclose(vec, vec2, atol=2e-3, rtol=1e-3)
    return runs[1]


def test_a_run_stopped_between_two_layer_tables_resumes_with_the_tables_in_step(
        tiny, tmp_path, monkeypatch):
    """A block reaches the layer tables one after another: a stop after layer 0 took block 2
    and before layer 1 did leaves layer 0 a block ahead; the next run trims it and goes on,
    with the rows of a run never stopped."""
    sentences = _corpus(60, seed=4)
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    real, calls = tables.to_arrow, []

    def stop_at_block_two_layer_one(rows, *args):
        calls.append(int(rows["layer"][0]))
        if len(calls) == 4:                  # block 1: layers 0, 1; block 2: layer 0, then here
            raise KeyboardInterrupt
        return real(rows, *args)

    monkeypatch.setattr(tables, "to_arrow", stop_at_block_two_layer_one)
    with pytest.raises(KeyboardInterrupt):
        corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,1", commit_sentences=20,
                           progress=False)
    assert calls == [0, 1, 0, 1]
    monkeypatch.setattr(tables, "to_arrow", real)
    held = {layer: corpus_index.indexed_sentences(t).tolist() for layer, t in
            _open_tables(tmp_path / "ix", [0, 1]).items()}
    assert held == {0: list(range(40)), 1: list(range(20))}  # out of step, as a kill leaves
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,1", commit_sentences=20,
                       progress=False)
    corpus_index.build(tiny, str(src), tmp_path / "whole", layers="0,1", progress=False)
    keys, vec, _ = _rows(tmp_path / "ix")
    keys2, vec2, _ = _rows(tmp_path / "whole")
    assert keys == keys2 and len(set(keys)) == len(keys)
    assert np.allclose(vec, vec2, atol=2e-3, rtol=1e-3)


def test_batches_committed_out_of_order_and_half_written_resume_to_the_same_rows(
        tiny, tmp_path):
    """Ray's actors commit batches in the order they finish: a kill leaves gaps in the
    sentence ids, and maybe a batch that reached one layer table and not the other. The next
    run embeds exactly what is missing from either table."""
    sentences = _corpus(60, seed=6)
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,1", progress=False)
    layer_tables = _open_tables(tmp_path / "ix", [0, 1])
    for t in layer_tables.values():        # as a killed run leaves them: only some batches
        t.delete("sentence_id < 10 OR (sentence_id >= 20 AND sentence_id < 45)")
    layer_tables[1].delete("sentence_id >= 50")  # a batch committed to layer 0 only
    (tmp_path / "ix" / "manifest.json").write_text(json.dumps(
        {**json.loads((tmp_path / "ix" / "manifest.json").read_text()), "complete": False}))
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,1", progress=False)
    run = json.loads((tmp_path / "ix" / "manifest.json").read_text())["build"]["runs"][-1]
    assert run["sentences_indexed_before"] == 15 and run["sentences"] == 45   # 10-19, 45-49
    corpus_index.build(tiny, str(src), tmp_path / "whole", layers="0,1", progress=False)
    keys, vec, _ = _rows(tmp_path / "ix")
    keys2, vec2, _ = _rows(tmp_path / "whole")
    assert keys == keys2 and len(set(keys)) == len(keys)
    assert np.allclose(vec, vec2, atol=2e-3, rtol=1e-3)


def test_an_older_format_index_is_refused_in_one_line_or_replaced_when_asked(tiny, tmp_path):
    """Format 1 kept every layer in one table: it is not read; a build into its folder says
    so (the folder is the user's), unless told to replace it (the app's own Brown folder)."""
    old = tmp_path / "ix"
    (old / "db" / "occurrences.lance").mkdir(parents=True)
    (old / "manifest.json").write_text(json.dumps({"schema": "ctxlens-index/1"}))
    src = tmp_path / "c.txt"
    src.write_text("\n".join(_corpus(20, seed=5)))
    with pytest.raises(EngineError, match="another format .*build it again") as err:
        corpus_index.build(tiny, str(src), old, layers="0", progress=False)
    assert len(str(err.value).splitlines()) == 1
    assert (old / "db" / "occurrences.lance").is_dir()          # nothing touched
    m = corpus_index.build(tiny, str(src), old, layers="0", progress=False,
                           replace_older=True)
    assert m.complete and m.schema == corpus_manifest.MANIFEST_SCHEMA
    assert not (old / "db" / "occurrences.lance").exists()
    assert CorpusIndex(old).count("the", 0) > 0


def _open_tables(folder, layers):
    db = corpus_index._connect(folder)
    return {layer: db.open_table(corpus_index.layer_table(layer)) for layer in layers}


@pytest.mark.parametrize("argv,message", [
    (["index", "--corpus", "CORPUS", "--output", "OUT", "--layers", "0,99"], "layers must be"),
    (["neighbours", "--index", "OUT", "--text", "the bank .", "--word", "bank", "--layer",
      "7"], "not in this index"),
    (["neighbours", "--index", "OUT", "--text", "the bank .", "--word", "river", "--layer",
      "1"], "not in the text"),
    (["neighbours", "--index", "NOWHERE", "--text", "x", "--word", "x", "--layer", "1"],
     "not a ctxlens index"),
    (["index", "--corpus", "LATIN1", "--output", "OUT2"], "not UTF-8"),
    (["index", "--corpus", "CORPUS"], "--output is needed"),
    (["index", "--corpus", "CORPUS", "--output", "CORPUS"], "is a file; give a folder"),
    (["index", "--corpus", "CORPUS", "--output", "OUT2", "--engine", "ray", "--workers", "0"],
     "--workers must be at least 1"),
    # nothing listens on port 1: ray.init retried for minutes
    (["index", "--corpus", "CORPUS", "--output", "OUT2", "--engine", "ray", "--ray-address",
      "127.0.0.1:1"], "no Ray cluster answers at 127.0.0.1:1"),
    (["stats", "--index", "OUT", "--sample", "-5"], "--sample is a number of sentences"),
    (["neighbours", "--index", "OUT", "--text", "the bank's door .", "--word", "bank",
      "--layer", "1"], "not in the text (words are matched whole, ignoring case); \"bank's\" is "
                      "one word here: give it as --word"),
    (["neighbours", "--index", "OUT", "--text", "the bank by the bank .", "--word", "bank",
      "--layer", "1", "--occurrence", "3"], "occurs 2 time(s) in the text; occurrence 3"),
    (["index", "--corpus", "DROPPED", "--output", "OUT2"],
     "corpus sentence id 3 ('the bank \ufffd river .'): this model's tokenizer drops the word"),
])
def test_bad_input_gets_one_line(tiny, tmp_path, capsys, argv, message):
    src = tmp_path / "c.txt"
    src.write_text("\n".join(_corpus(10, seed=4)))
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 .\n".encode("latin-1"))
    # a replacement character (what a bad decode leaves) is a word that WordPiece drops (a
    # lone zero-width joiner, which once was, attaches to nothing and is no word now)
    (tmp_path / "dropped.txt").write_text("\n".join(_corpus(3, seed=5)
                                                    + ["the bank \ufffd river ."]))
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,1", progress=False)
    subst = {"CORPUS": str(src), "OUT": str(tmp_path / "ix"), "OUT2": str(tmp_path / "ix2"),
             "NOWHERE": str(tmp_path / "nowhere"), "LATIN1": str(tmp_path / "latin1.txt"),
             "DROPPED": str(tmp_path / "dropped.txt")}
    argv = [subst.get(a, a) for a in argv]
    if argv[0] == "index":
        argv += ["--model", tiny]
    assert cli.main(argv) == 2
    # the one line, under the build's progress bar where the build had started
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if "sent/s]" not in ln]
    assert len(err) == 1 and message in err[0]


def test_an_index_for_another_model_or_layers_is_not_mixed(tiny, tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("\n".join(_corpus(10, seed=5)))
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,1", progress=False)
    with pytest.raises(Exception, match="another layers"):
        corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,2", progress=False)


def test_neighbours_in_an_index_whose_vectors_the_model_no_longer_gives_is_one_line(
        tiny, tmp_path, capsys):
    """A manifest that does not match what its model gives now (edited, or the model's files
    changed since the build) is one line, not LanceDB's error about the vector column."""
    import json

    from engine import cli

    sentences = _corpus(20, seed=6)
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,1", progress=False)
    manifest = tmp_path / "ix" / "manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "dim": data["dim"] * 2}))
    word = split_words(sentences[0]).words[0]
    assert cli.main(["neighbours", "--index", str(tmp_path / "ix"), "--text", sentences[0],
                     "--word", word, "--layer", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "it was not built with this model as it is now" in err


def test_the_ann_index_finds_what_exact_search_finds(tiny, tmp_path, monkeypatch):
    """Above ANN_MIN_ROWS the index gets an IVF (scalar-quantised, cosine) index; with exact
    re-ranking its top 10 match brute force on this small corpus."""
    monkeypatch.setattr(corpus_index, "ANN_MIN_ROWS", 500)
    sentences = _corpus(300, seed=9)
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    m = corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,1,2", progress=False)
    assert m.rows >= 500 and m.ann_index["type"] == "IVF_RQ"
    # the layer tables are indexed INDEX_BUILDS_AT_ONCE at a time: each still gets both of
    # its indexes, over all its rows, and the manifest counts every one
    tables = _open_tables(tmp_path / "ix", [0, 1, 2])
    assert m.rows_per_layer == {str(k): t.count_rows() for k, t in tables.items()}
    for layer, table in tables.items():
        indexed = {tuple(i.columns): i for i in table.list_indices()}
        assert set(indexed) == {("vector",), ("key",)}, layer
        stats = table.index_stats(indexed[("vector",)].name)
        assert stats.num_indexed_rows == table.count_rows() and stats.num_unindexed_rows == 0
    idx = CorpusIndex(tmp_path / "ix")
    engine = Engine(cache_size=0)
    recall = []
    for s in range(0, 300, 30):
        word = split_words(sentences[s]).words[2]
        ann = neighbours(engine, idx, sentences[s], word, 2, k=10)
        exact = neighbours(engine, idx, sentences[s], word, 2, k=10, exact=True)
        recall.append(len({(h.sentence_id, h.position) for h in ann} &
                          {(h.sentence_id, h.position) for h in exact}) / 10)
        assert ann[0].cosine == pytest.approx(exact[0].cosine, abs=1e-4)
    assert np.mean(recall) >= 0.95


@pytest.mark.slow_by_nature       # without root: the whole test again in a user namespace
def test_a_full_disk_stops_with_one_line_and_keeps_what_was_written(tiny, tmp_path):
    fill_a_small_disk(tiny, tmp_path)


# Set in the run of a full-disk test inside a user namespace (fill_a_small_disk); "userns"
# (by hand) starts there without trying to mount first, to check that way on a root machine.
FULL_DISK_ENV = "CTXLENS_FULL_DISK_VIA"


def _mount_small_tmpfs(mnt: Path) -> bool:
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                          capture_output=True).returncode == 0


def _again_in_a_user_namespace(tmp_path: Path) -> None:
    """This test once more in a process that is root of its own user and mount namespaces
    (`unshare -rm`, no privilege needed where the kernel allows it), where mounting the small
    tmpfs is allowed; it must pass there. Where neither way is open, the skip says so."""
    import shutil

    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no small disk to fill here: mounting a tmpfs needs root, and this kernel "
                    "or sandbox refuses an unprivileged user namespace (unshare -rm); the "
                    "full-disk path is NOT tested on this machine")
    node = os.environ["PYTEST_CURRENT_TEST"].rsplit(" (", 1)[0]
    proc = subprocess.run(
        ["unshare", "-rm", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "in-namespace"), node],
        cwd=ROOT, env={**os.environ, FULL_DISK_ENV: "in-namespace"}, capture_output=True,
        text=True, timeout=900)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-4000:]


def fill_a_small_disk(tiny, tmp_path, **build):
    """A 2 MiB tmpfs fills up mid-run: one line, and the rows already committed still read.
    Mounting it needs root; without root the test runs again in a user namespace of its own
    (_again_in_a_user_namespace), and only where that is refused too does it skip, saying the
    path goes untested."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    via = os.environ.get(FULL_DISK_ENV, "")
    if via == "userns" or (via != "in-namespace" and not _mount_small_tmpfs(mnt)):
        return _again_in_a_user_namespace(tmp_path)
    if via == "in-namespace" and not _mount_small_tmpfs(mnt):
        pytest.fail("cannot mount a small tmpfs even as root of a user namespace")
    try:
        src = tmp_path / "c.txt"
        src.write_text("\n".join(_corpus(3000, seed=12)))
        with pytest.raises(Exception, match="is full: .* sentences are indexed and kept") as err:
            corpus_index.build(tiny, str(src), mnt / "ix", layers="all", commit_sentences=50,
                               progress=False, **build)
        assert len(str(err.value).splitlines()) == 1
        # the sentences it says are kept are kept (it said 0 in a build without a bar)
        said = int(re.search(r"is full: ([\d,]+) of", str(err.value)).group(1).replace(",", ""))
        assert said > 0
        import lancedb

        db = lancedb.connect(str(mnt / "ix" / "db"))
        for layer in (0, 1, 2):                                    # every layer table
            table = db.open_table(corpus_index.layer_table(layer))
            kept = table.count_rows()
            assert kept > 0 and len(table.to_arrow()) == kept      # still readable
            ids = set(table.to_arrow().column("sentence_id").to_pylist())
            assert len(ids) >= said
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_brown_without_output_goes_where_the_corpus_page_reads(tiny, tmp_path, monkeypatch,
                                                               capsys):
    """`ctxlens index --corpus brown` with no --output (what `make index` runs) builds into the
    app's folder for those layers: every layer -> brown-MODEL, some -> brown-MODEL-L0-2."""
    from engine.corpus import catalog, sources

    monkeypatch.setattr(catalog, "DEFAULT_DIR", tmp_path / "default")
    monkeypatch.setattr(sources, "brown", lambda build=True, progress=True: sources.Corpus(
        "brown", tuple(_corpus(12, seed=6))))
    assert cli.main(["index", "--model", tiny, "--corpus", "brown", "--layers", "0,2"]) == 0
    some = catalog.brown_index_path(tiny, [0, 2])
    assert some.name.endswith("-L0-2") and str(some) in capsys.readouterr().out
    assert corpus_manifest.Manifest.read(some).layers == [0, 2]
    assert cli.main(["index", "--model", tiny, "--corpus", "brown"]) == 0
    n_states = Engine(cache_size=0).adapter(tiny, progress=False).info.n_layers + 1
    every = catalog.brown_index_path(tiny, range(n_states), n_states)
    assert every == catalog.brown_index_path(tiny) and every != some
    assert corpus_manifest.Manifest.read(every).layers == list(range(n_states))


def test_a_build_without_a_terminal_bar_still_reports_its_progress(tiny, tmp_path):
    """The app builds with progress=False (no tqdm bar) and draws its own bar from
    on_progress: it must hear the sentences written (it heard 0 after every commit)."""
    src = tmp_path / "c.txt"
    src.write_text("\n".join(_corpus(40, seed=8)))
    heard = []
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0,1", progress=False,
                       commit_sentences=16, on_progress=lambda done, total: heard.append(
                           (done, total)))
    assert heard == [(0, 40), (16, 40), (32, 40), (40, 40)]
    runs = corpus_manifest.Manifest.read(tmp_path / "ix").build["runs"]
    assert [n for _, n in runs[-1]["progress"]] == [16, 32, 40]


def test_a_second_build_into_a_folder_being_built_is_one_line_and_touches_nothing(tiny,
                                                                                  tmp_path):
    """Two builds of one folder at once (two browser sessions, or the page and a terminal):
    the second would take the first's half-committed batch for a killed run's and delete it.
    It stops in one line instead; once the first is done, the folder builds as usual."""
    import fcntl

    src = tmp_path / "c.txt"
    src.write_text("\n".join(_corpus(20, seed=9)))
    folder = tmp_path / "ix"
    folder.mkdir()
    with open(folder / corpus_index.LOCK, "w") as first:       # a build under way
        fcntl.flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(EngineError, match="a ctxlens build is writing") as err:
            corpus_index.build(tiny, str(src), folder, layers="0,1", progress=False)
        assert len(str(err.value).splitlines()) == 1
        assert sorted(p.name for p in folder.iterdir()) == [corpus_index.LOCK]
    built = corpus_index.build(tiny, str(src), folder, layers="0,1", progress=False)
    assert built.complete and built.rows == 2 * sum(len(split_words(s).words)
                                                    for s in _corpus(20, seed=9))


def test_an_index_is_removed_only_when_it_is_one_and_no_build_writes_it(tiny, tmp_path):
    import fcntl

    src = tmp_path / "c.txt"
    src.write_text("\n".join(_corpus(10, seed=10)))
    folder = tmp_path / "ix"
    corpus_index.build(tiny, str(src), folder, layers="0,1", progress=False)
    with pytest.raises(EngineError, match="not a ctxlens index"):
        corpus_index.remove(tmp_path)                      # an arbitrary folder stays
    with open(folder / corpus_index.LOCK, "w") as build:
        fcntl.flock(build, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(EngineError, match="a ctxlens build is writing"):
            corpus_index.remove(folder)
        assert CorpusIndex(folder).manifest.complete       # untouched
    corpus_index.remove(folder)
    assert not folder.exists() and src.exists()


def test_invisible_characters_do_not_stop_a_build(tiny, tmp_path):
    """A byte-order mark at the start of a file, or a zero-width space in a line, stopped the
    build at that line ("this model's tokenizer drops the word '\\ufeff'"), and a rerun stopped
    there again: they are no words, so the line indexes without them."""
    src = tmp_path / "c.txt"
    src.write_text("\ufeffthe bank is here .\nhe said \u200b the river .\n" +
                   "\n".join(_corpus(4, seed=6)))
    m = corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0", progress=False)
    assert m.complete and m.n_sentences == 6
    words = set(_rows(tmp_path / "ix")[2])
    assert {"the", "bank", "said", "river"} <= words
    assert not any(ch in w for w in words for ch in "\ufeff\u200b")


def test_a_word_typed_with_either_apostrophe_finds_its_occurrences(tiny, tmp_path):
    """The pages find "don’t" (as phones type it) in "don't"; the corpus found nothing."""
    from engine.corpus.query import embed_word

    src = tmp_path / "c.txt"
    src.write_text("\n".join(_corpus(4, seed=8) + ["i don't know the bank .",
                                                   "you don\u2019t say ."]))
    corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0", progress=False)
    idx = CorpusIndex(tmp_path / "ix")
    assert idx.count("don\u2019t", 0) == idx.count("don't", 0) == 2
    _, pos = embed_word(Engine(), idx.manifest, "i don\u2019t know", "don't")
    assert pos == 1
