"""bench/head_pruning.py's parts on tiny random checkpoints: its batched top-1 words are the
Engine's own predictions (with and without heads knocked out), the decoder's items are the
words before the blank, and pruning takes the least important heads first."""
from __future__ import annotations

import numpy as np
import pytest

from bench import head_pruning as hp
from bench.analysis.cloze import ITEMS
from engine.api import Engine
from engine.components.ablation import Ablation

TEXTS = {"masked": ["He locked the door with a [MASK] .", "The cat sat on the [MASK] ."],
         "next": ["He locked the door with a", "The cat sat on the warm"]}


@pytest.fixture(scope="module")
def served(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("pruning-zoo")
    folders = {"masked": str(zoo.copy("arch:bert", root / "bert")),
               "next": str(zoo.copy("arch:gpt2", root / "gpt2"))}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXLENS_MODEL_DIRS", str(root))
        mp.setenv("CTXLENS_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield Engine(device="cpu"), folders


@pytest.mark.parametrize("kind", ["masked", "next"])
def test_batched_top1_is_the_engines_prediction_with_and_without_pruning(served, kind):
    engine, folders = served
    adapter = engine.adapter(folders[kind])
    items = [(t, ("x",)) for t in TEXTS[kind]]
    batch = hp.encoded(adapter, kind, items)
    ask = engine.predict_masked if kind == "masked" else engine.predict_next
    for spec, ablation in [(None, None),
                           ("1.2,2.1", Ablation(frozenset({(0, 1), (1, 0)}), frozenset(), 4))]:
        want = [ask(folders[kind], t, top_k=1, ablate=spec).candidates[0].token
                for t in TEXTS[kind]]
        assert hp.top1_words(adapter, kind, batch, ablation) == want


def test_a_decoders_items_are_the_words_before_the_blank():
    items = hp.cloze_items(ITEMS, "next")
    sentences = [i for i, _ in hp.cloze_items(ITEMS, "masked")]
    assert 0 < len(items) < len(sentences)
    for text, answers in items:
        assert "[MASK]" not in text and len(text.split()) >= 3 and answers
        assert any(s.startswith(text + " [MASK]") for s in sentences)


def test_pruning_takes_the_least_important_heads_first(served):
    engine, folders = served
    adapter = engine.adapter(folders["masked"])
    importance = np.array([[0.5, 0.1, 0.9, 0.3], [0.2, 0.8, 0.05, 0.7]])
    order = sorted([(l, h) for l in range(2) for h in range(4)], key=lambda lh: importance[lh])
    assert hp.pruned(adapter, order, 0.0) is None
    assert hp.pruned(adapter, order, 0.3).heads == frozenset({(1, 2), (0, 1)})
    assert hp.pruned(adapter, order, 0.5).spec == "1.2,1.4,2.1,2.3"
