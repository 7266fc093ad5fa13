"""bench/patching.py: nnsight's grid (the reference the speed is measured against) is the
engine's own on a tiny Llama; the regions of a made-up grid worked out by hand; every fact in
bench/sample/facts.txt names a subject the patching can noise."""
from __future__ import annotations

import numpy as np
import pytest

from bench.patching import _ids, load_facts, nnsight_grid, regions
from engine.components import patching
from engine.text import to_word_text

CLEAN = "She sat on the river bank and watched the"
CORRUPT = "She sat on the water bank and watched the"


def test_nnsight_grid_is_the_engine_grid(zoo, tmp_path, monkeypatch):
    pytest.importorskip("nnsight")
    from engine.api import Engine

    folder = zoo.copy("arch:llama", tmp_path / "llama")
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(tmp_path))
    adapter = Engine(device="cpu").adapter(str(folder))
    ours = patching.patch(adapter, CLEAN, CORRUPT, "water", chunk=7)
    target = adapter.tokenizer(" water")["input_ids"][-1]
    theirs = nnsight_grid(adapter.model, _ids(adapter, CLEAN), _ids(adapter, CORRUPT),
                          target, chunk=7)
    assert theirs.shape == ours.patched.shape
    assert np.ptp(theirs) > 1e-3                        # the grid is not one number
    np.testing.assert_allclose(theirs, ours.patched, atol=1e-5)


def test_regions_average_thirds_of_the_rows_by_place():
    g = np.arange(6 * 6, dtype=float).reshape(6, 6)    # 6 rows, 6 tokens; subject at 1-2
    r = regions(g, 1, 2)
    assert r["early"] == {"last_subject": (2 + 8) / 2, "other_subject": (1 + 7) / 2,
                          "after_subject": (3 + 4 + 9 + 10) / 4, "last_token": (5 + 11) / 2}
    assert r["late"]["last_subject"] == (26 + 32) / 2
    assert np.isnan(regions(g, 2, 2)["middle"]["other_subject"])   # a one-piece subject


def test_every_fact_names_a_subject_of_its_prompt():
    facts = load_facts()
    assert len(facts) >= 40
    for prompt, subject, answer in facts:
        words = to_word_text(prompt).words
        n = len(subject.split())
        assert any(list(words[i:i + n]) == subject.split() for i in range(len(words))), prompt
        assert len(answer.split()) == 1


def test_mean_ci_is_bench_attribution_s():
    from bench import attribution, patching as bench_patching

    values = [0.1, 0.5, -0.2, 0.9, float("nan"), 0.3]
    assert bench_patching.mean_ci(values) == attribution.mean_ci(values)
    assert bench_patching.mean_ci([float("nan")]) == {"mean": None, "ci": None, "n": 0}


def test_a_claim_is_reproduced_when_its_interval_is_above_zero():
    from bench.patching import summarise

    def fact(bump: float) -> dict:
        g = np.zeros((6, 6))                           # subject at 1-2, last token 5
        g[2:4, 2] = 0.5 + bump                         # middle rows, last subject piece
        g[4:, 5] = 0.8                                 # late rows, last token
        sites = {s: {"restored": g.tolist(), "regions": regions(g, 1, 2)}
                 for s in ("residual", "attention", "mlp")}
        return {"subject_span": [1, 2], **sites}

    claims = {c["claim"]: c for c in summarise([fact(b) for b in (0, .1, .2, .3)])["claims"]}
    middle = claims["residual, middle layers: last_subject − others > 0"]
    assert middle["difference"]["mean"] == pytest.approx(0.65)   # others are 0
    assert middle["reproduced"]
    late = claims["attention, late layers: last_token − last_subject > 0"]
    assert late["difference"]["mean"] == pytest.approx(0.8) and late["reproduced"]
    flat = summarise([{"subject_span": [1, 2], **{s: {"restored": np.zeros((6, 6)).tolist(),
                                                      "regions": regions(np.zeros((6, 6)), 1, 2)}
                                                  for s in ("residual", "attention", "mlp")}}
                      ] * 3)
    assert not any(c["reproduced"] for c in flat["claims"])
