"""The everyday cloze benchmark: its items are well-formed, and its scoring counts what a
model really answered."""
from __future__ import annotations

import json

import numpy as np
import pytest

from bench import cloze
from engine.api import Engine
from engine.registry import load_registry, local_path
from engine.text import to_word_text


@pytest.mark.parametrize("path", [cloze.ITEMS, cloze.REPLICATION], ids=["first", "replication"])
def test_items_have_one_blank_and_at_least_one_answer(path):
    items = cloze.load_items(path)
    assert len(items) >= 100
    assert len({i.id for i in items}) == len(items)
    for item in items:
        assert len(to_word_text(item.sentence).mask_indices) == 1, item
        assert item.answers and all(a and a == a.lower() for a in item.answers), item
    # a model that reads the right side must have something to read on a good share of items
    right = sum(1 for i in items if i.sentence.split("[MASK]")[1].strip(" .?!"))
    assert right / len(items) >= 0.4


def test_the_replication_shares_no_sentence_or_id_with_the_first_set():
    first, again = cloze.load_items(), cloze.load_items(cloze.REPLICATION)
    assert not {i.sentence for i in first} & {i.sentence for i in again}
    assert not {i.id for i in first} & {i.id for i in again}


@pytest.mark.parametrize("items", [cloze.ITEMS, cloze.REPLICATION], ids=["first", "replication"])
def test_every_answer_is_one_bert_base_wordpiece(items):
    from transformers import AutoTokenizer

    path = local_path(load_registry()["minilm-l6"])
    if path is None or not path.exists():
        pytest.skip("minilm-l6 (bert-base-uncased vocabulary) is not installed")
    tok = AutoTokenizer.from_pretrained(str(path))
    bad = [(i.id, a) for i in cloze.load_items(items) for a in i.answers
           if tok.tokenize(a) != [a]]
    assert not bad, bad


def test_hit_rank_ignores_case_and_wordpiece_continuations():
    assert cloze.hit_rank(["The", "Key", "lock"], ("key",)) == 2
    assert cloze.hit_rank(["##key", "door"], ("key",)) is None
    assert cloze.hit_rank([" tea", "coffee"], ("coffee", "tea")) == 1


def test_rates_and_paired_gain():
    r = cloze.rate([1, 3, None, 6], 5)
    assert (r["hits"], r["n"]) == (2, 4) and r["ci"][0] < 0.5 < r["ci"][1]
    g = cloze.paired_gain(np.array([0, 0, 1, 1] * 10), np.array([1, 1, 1, 1] * 10))
    assert g["gain"] == pytest.approx(0.5) and 0.3 < g["ci"][0] < 0.5 < g["ci"][1] < 0.7
    assert cloze.paired_gain(np.ones(8), np.ones(8))["ci"] == [0.0, 0.0]


def test_unpaired_difference_resamples_each_set_on_its_own():
    a, b = np.array([1, 0] * 20), np.array([1, 1, 1, 0] * 15)
    d = cloze.difference(a, b)
    assert d["difference"] == pytest.approx(0.25)
    assert d["ci"][0] < 0.25 < d["ci"][1]
    # unpaired: sets of different sizes are fine, and equal constant sets give a zero interval
    assert cloze.difference(np.ones(7), np.ones(12))["ci"] == [0.0, 0.0]
    # wider than the paired interval of the same hits (a pairing removes item difficulty)
    x = np.array([0, 1] * 30)
    assert cloze.paired_gain(x, x)["ci"] == [0.0, 0.0]
    assert cloze.difference(x, x)["ci"][1] > 0.1


def test_score_ranks_are_the_models_own_answers(zoo, model_dir, monkeypatch):
    elmo = str(zoo.copy("elmo", model_dir / "tiny-elmo"))
    items = [cloze.ClozeItem("t1", "the [MASK] of the river", ("bank", "money"), "x"),
             cloze.ClozeItem("t2", "the bank [MASK] money .", ("zzz",), "x")]
    engine = Engine(device="cpu")
    r = cloze.score(engine, elmo, items, "both", log=lambda *a: None)
    for item, row in zip(items, r["items"]):
        top = [c.token for c in engine.predict_masked(elmo, item.sentence, top_k=5).candidates]
        assert row["top5"] == top
        expected = next((k for k, w in enumerate(top, 1) if w in item.answers), None)
        assert row["rank"] == expected
    assert r["items"][1]["rank"] is None and r["top5"]["n"] == 2
    assert r["method"] == "forward LM × backward LM"
    text = cloze.report([r, cloze.score(engine, elmo, items, "left", log=lambda *a: None)], 2)
    assert "What the right side adds" in text and elmo in text


def test_a_run_over_some_models_keeps_the_others_stored_results(tmp_path):
    def result(model, sides, hits):
        ranks = [1] * hits + [None] * (10 - hits)
        return {"model": model, "sides": sides, "method": f"{model} {sides}",
                "top1": cloze.rate(ranks, 1), "top5": cloze.rate(ranks, 5),
                "items": [{"id": str(i), "rank": r, "top5": []} for i, r in enumerate(ranks)]}

    cloze.write([result("a", "both", 3), result("g", "both", 5), result("g", "left", 4)],
                tmp_path)
    cloze.write([result("g", "both", 9), result("new", "both", 1)], tmp_path, partial=True)
    stored = json.loads((tmp_path / "cloze.json").read_text())
    assert [(r["model"], r["sides"], r["top1"]["hits"]) for r in stored] == [
        ("a", "both", 3), ("g", "both", 9), ("g", "left", 4), ("new", "both", 1)]
    assert "| g | g both |" in (tmp_path / "cloze.md").read_text()
    cloze.write([result("g", "both", 2)], tmp_path)                   # a whole run replaces
    assert [r["model"] for r in json.loads((tmp_path / "cloze.json").read_text())] == ["g"]


@pytest.mark.slow
@pytest.mark.slow_by_nature      # the whole cloze benchmark scored twice: ~150 s on a busy machine
def test_a_pilot_overlay_is_scored_as_the_shipped_model_would_be(tmp_path):
    """score_overlays loads an mlm_head output folder in the shipped head's place: the shipped
    folder itself, copied elsewhere, reproduces results/cloze.json item by item, and a second
    folder gets its paired gain over the first."""
    import shutil

    src = local_path(load_registry()["minilm-l6-mlm"])
    control, same = tmp_path / "control", tmp_path / "same"
    for d in (control, same):
        shutil.copytree(src, d)
    got = cloze.score_overlays([control, same], log=lambda *_: None)
    stored = next(r for r in json.loads((cloze.ROOT / "results" / "cloze.json").read_text())
                  if r["model"] == "minilm-l6-mlm")
    assert [i["rank"] for i in got[0]["items"]] == [i["rank"] for i in stored["items"]]
    assert got[0]["top5"]["hits"] == stored["top5"]["hits"]
    assert "gain_top5_vs_first" not in got[0]
    assert got[1]["gain_top5_vs_first"]["gain"] == 0.0
    # results/ is left alone
    assert not [r for r in json.loads((cloze.ROOT / "results" / "cloze.json").read_text())
                if r["model"] in ("control", "same")]


def test_a_masked_lm_is_scored_plain_and_rescored_and_the_report_pairs_them(zoo, model_dir):
    mlm = str(zoo.copy("bert", model_dir / "mlm"))
    items = [cloze.ClozeItem("t1", "the river [MASK] and the water .", ("bank",), "x"),
             cloze.ClozeItem("t2", "she sat on the [MASK] .", ("bank", "river"), "x")]
    engine = Engine(device="cpu")
    quiet = dict(log=lambda *a: None)
    plain, rescored = (cloze.score(engine, mlm, items, s, **quiet)
                       for s in ("both", cloze.RESCORED))
    assert plain["method"] == "MLM head" and "pseudo-log-likelihood" in rescored["method"]
    for item, row in zip(items, rescored["items"]):
        top = engine.predict_masked(mlm, item.sentence, top_k=5, rescore=True).candidates
        assert row["top5"] == [c.token for c in top]
    text = cloze.report([plain, rescored], 2)
    section = text.split("## What re-scoring adds (masked LMs)")[1]
    assert f"| {mlm} | {plain['top5']['rate']:.1%}" in section


def test_the_second_set_blanks_each_examples_own_lemma_as_written():
    from transformers import AutoTokenizer

    from bench.analysis.wordnet import benchmark_examples
    from engine.registry import load_registry, local_path

    tok = AutoTokenizer.from_pretrained(local_path(load_registry()["minilm-l6"]))
    items = cloze.wordnet_items(tok, 200)
    assert len(items) == 200 and items == cloze.wordnet_items(tok, 200)     # seeded
    texts = {ex.text.lower() for ex in benchmark_examples()}     # answers are lower-cased
    for it in items:
        (answer,) = it.answers
        assert it.sentence.count("[MASK]") == 1 and tok.tokenize(answer) == [answer]
        assert it.sentence.replace("[MASK]", answer, 1).lower() in texts
    assert len({it.sentence for it in items}) == len(items)


def test_the_second_sets_gain_gets_its_own_section():
    def result(sides, hits):
        ranks = [1] * hits + [None] * (20 - hits)
        return {"model": "m", "sides": sides, "method": sides, "top1": cloze.rate(ranks, 1),
                "top5": cloze.rate(ranks, 5),
                "items": [{"id": str(i), "rank": r, "top5": []} for i, r in enumerate(ranks)]}

    plain, rescored = result("both", 4), result(cloze.RESCORED, 9)
    without = cloze.report([plain, rescored], 20)
    assert "second set" not in without
    text = cloze.report([plain, rescored], 20, check=[result("both", 2),
                                                        result(cloze.RESCORED, 7)])
    section = text.split("## Re-scoring on a second set")[1]
    assert "checked on 20 sentences" in section
    assert "| m | 10.0% [" in section and "+25.0% [" in section


def test_the_replication_sits_beside_the_first_set_per_model_and_way_of_filling():
    def result(model, sides, hits, n=20):
        ranks = [1] * hits + [None] * (n - hits)
        return {"model": model, "sides": sides, "method": f"{model}/{sides}",
                "top1": cloze.rate(ranks, 1), "top5": cloze.rate(ranks, 5),
                "items": [{"id": str(i), "rank": r, "top5": []} for i, r in enumerate(ranks)]}

    first = [result("m", "both", 10), result("m", cloze.RESCORED, 12), result("g", "both", 2)]
    assert "## A replication" not in cloze.report(first, 20)
    # a model the later set has but the first does not is left out, not compared with nothing
    again = [result("m", "both", 4, n=10), result("m", cloze.RESCORED, 9, n=10),
             result("new", "both", 1, n=10)]
    section = cloze.report(first, 20, replication=again).split("## A replication")[1]
    assert "10 more everyday sentences" in section
    table = section.split("| comparison |")[0]
    rows = [r for r in table.splitlines() if r.startswith("| m |") or r.startswith("| new")]
    assert [r.split(" | ")[1] for r in rows] == [f"m/{cloze.RESCORED}", "m/both"]  # by top-5
    assert "| 60.0% [" in rows[0] and "| 90.0% [" in rows[0] and "+30.0% [" in rows[0]
    assert "| 50.0% [" in rows[1] and "| 40.0% [" in rows[1] and "-10.0% [" in rows[1]
    # and each set's own paired gain of re-scoring, side by side
    gains = next(r for r in section.splitlines() if r.startswith("| m | MLM head → re-scored"))
    assert "| +10.0% [" in gains and "| +50.0% [" in gains
    assert "left only" not in section.split("| comparison |")[1]     # no model had "left"
