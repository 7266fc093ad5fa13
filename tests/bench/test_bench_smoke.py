"""Smoke versions of the benchmarks on tiny inputs: the pipeline runs end to end and the
invariants hold (ELMo layer 0 is context-free, probes beat the majority class on separable data,
the fast ELMo path equals the reference loop)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from bench.corpus import TaggedSentence, load_brown, simplify_tag, spread
from bench.layers import Workload, pos_probe, run_model, running_text
from bench.report import geometry_report, pos_report, senses_report
from bench.speed import elmo_paths
from bench.speed_report import speed_report
from bench.views import geometry_invariants
from bench.analysis.wordnet import SenseExample
from engine.families.elmo import adapter as elmo
from engine.families.base import LoadOptions
from engine.families.elmo.modules import ElmoBiLm
from tests.zoo import ELMO_OPTIONS

torch.set_num_threads(1)


def synthetic_senses() -> tuple[SenseExample, ...]:
    """Two lemmas, two senses each, three examples per sense (words of the bundled sample)."""
    texts = {("bank.n", "river"): ["the bank of the river", "a muddy bank", "the river bank"],
             ("bank.n", "money"): ["the bank lent money", "a bank loan", "my bank account"],
             ("run.v", "move"): ["they run home", "run fast", "we run to school"],
             ("run.v", "operate"): ["they run a shop", "run the company", "she will run it"]}
    out = []
    for (lemma, sense), sentences in texts.items():
        rank = 1 if sense in ("river", "move") else 2
        for t in sentences:
            out.append(SenseExample(lemma, f"{lemma}:{sense}", rank, t,
                                    t.split().index(lemma.split(".")[0])))
    return tuple(out)


@pytest.fixture(scope="module")
def tiny_elmo(zoo):
    return elmo.load("tiny-elmo", zoo.path("elmo", seed=3), LoadOptions(device="cpu"),
                     progress=False)


@pytest.fixture(scope="module")
def tiny_run(tiny_elmo):
    brown = load_brown(build=False)
    work = Workload(tuple(spread(brown.heldout, 24)), tuple(spread(brown.train, 24)),
                    synthetic_senses())
    return run_model("tiny-elmo", "elmo", tiny_elmo.layer_names, tiny_elmo.encode, work,
                     log=lambda _: None)


def test_tiny_elmo_layer0_self_similarity_is_exactly_one(tiny_run):
    assert tiny_run["geometry"]["self_similarity"][0] == pytest.approx(1.0, abs=1e-6)
    checks = {name: ok for name, ok, _ in geometry_invariants(tiny_run)}
    assert checks["ELMo layer 0 raw self-similarity is 1"]


def test_tiny_run_reports_every_layer(tiny_run):
    n = tiny_run["n_layers"]
    assert n == 3
    assert len(tiny_run["pos"]["accuracy"]) == n
    assert len(tiny_run["senses"]["centroid"]) == n
    assert sum(tiny_run["senses"]["mix_weights"]) == pytest.approx(1.0)


def test_reports_render_a_table_row_per_layer(tiny_run):
    geo = geometry_report([tiny_run], "sample", "geometry.png")
    assert "| 2 | biLSTM 2 |" in geo and "![geometry per layer](geometry.png)" in geo
    assert "| 1 | biLSTM 1 |" in pos_report([tiny_run], "sample", "pos.png")
    assert "tiny-elmo" in senses_report([tiny_run], 12, "senses.png")


def test_sentences_are_read_as_running_text_aligned_to_their_brown_tokens():
    s = TaggedSentence("d", ("He", "said", ",", '"', "Go", "!", '"'),
                       ("pps", "vbd", ",", "``", "vb", ".", "''"), 'He said, "Go!"')
    rt = running_text(s)
    assert rt.words.text == 'He said, "Go!"'
    assert rt.words.words == ("He", "said", ",", '"', "Go", '!"')   # engine words
    assert rt.token_words == ((0,), (1,), (2,), (3,), (4,), (5,), (5,))
    assert [rt.tokens.text[a:b] for a, b in rt.tokens.spans] == list(s.words)


def test_a_token_whose_engine_words_spill_past_it_is_left_out_of_the_geometry():
    """'Mr.' before a closing quote is the engine words 'Mr' and '."': its vector would mix
    in the quote, so the geometry blanks it (elsewhere 'Mr.' is 'Mr' and '.', kept)."""
    from bench.layers import geometry_tokens

    end = running_text(TaggedSentence("d", ('"', "Ask", "Mr.", '"'), ("``", "vb", "np", "''"),
                                      '"Ask Mr."'))
    assert end.words.words == ('"', "Ask", "Mr", '."')
    assert geometry_tokens(end).words == ('"', "Ask", "", "")   # the quote shares '."' too
    mid = running_text(TaggedSentence("d", ("Mr.", "Smith"), ("np", "np"), "Mr. Smith"))
    assert geometry_tokens(mid).words == ("Mr.", "Smith")


def test_a_brown_token_split_into_engine_words_gets_their_mean():
    from bench.layers import token_vectors

    rt = running_text(TaggedSentence("d", ("at", "4:30", "p.m."), ("in", "cd", "rb")))
    assert rt.words.words == ("at", "4", ":", "30", "p", ".", "m", ".")
    vecs = np.arange(8, dtype=np.float32).reshape(1, 8, 1)
    np.testing.assert_allclose(token_vectors(vecs, rt)[0, :, 0], [0.0, 2.0, 5.5])


def test_tiny_run_gives_an_interval_for_every_reported_value(tiny_run):
    n = tiny_run["n_layers"]
    for section, keys in (("geometry", ("anisotropy", "self_similarity_adjusted",
                                        "intra_sentence_adjusted", "mev", "mev_adjusted")),
                          ("pos", ("accuracy",)), ("senses", ("centroid", "pairs"))):
        part = tiny_run[section]
        assert part["bootstrap"]["n_resamples"] == 1000
        for k in keys:
            ci = np.array(part["ci"][k])
            assert ci.shape == (n, 2) and (ci[:, 0] <= ci[:, 1] + 1e-12).all()
    assert tiny_run["pos"]["bootstrap"]["unit"] == "sentence"
    lo, hi = tiny_run["pos"]["ci"]["majority_baseline"]      # the baseline has one too
    assert lo <= tiny_run["pos"]["majority_baseline"] <= hi and lo < hi
    assert tiny_run["senses"]["bootstrap"]["unit"] == "held-out lemma"
    assert len(tiny_run["senses"]["ci"]["mix_centroid"]) == 2
    assert tiny_run["senses"]["mix_layer_norm"] is False


def test_pos_probe_beats_majority_on_separable_synthetic_vectors():
    rng = np.random.default_rng(0)
    tags = ["nn", "vb", "at", "in"]
    centres = {t: rng.normal(size=16) * 4 for t in tags}

    def make(n):
        sents, vecs = [], []
        for _ in range(n):
            ts = tuple(rng.choice(tags, size=6, p=[0.5, 0.2, 0.2, 0.1]))
            sents.append(TaggedSentence("d", tuple("w" for _ in ts), ts))
            layer = np.stack([centres[t] + rng.normal(size=16) for t in ts])
            vecs.append(np.stack([rng.normal(size=layer.shape), layer]))   # L0 noise, L1 signal
        return sents, vecs

    (s_tr, v_tr), (s_te, v_te) = make(80), make(40)
    result = pos_probe(v_tr, s_tr, v_te, s_te)
    assert result["accuracy"][1] > 0.95 > result["majority_baseline"]
    assert result["accuracy"][0] < result["accuracy"][1]


def test_fast_elmo_path_equals_reference_loop():
    bilm = ElmoBiLm.from_options(ELMO_OPTIONS, seed=5, init_scale=0.5).eval()
    sentences = [["a", "bank", "of", "the", "river"], ["money"], ["the", "bank", "lent", "it"]]
    r = elmo_paths(sentences, batch_size=2, bilm=bilm, source="tiny")
    assert r["same_to_1e-5"] and r["max_abs_diff"] <= 1e-5
    assert r["fast_s"] > 0 and r["reference_s"] > 0


def test_speed_report_flags_missed_targets():
    text = speed_report({"bank": {"models": ["m"], "load_s": 1.0, "cold_s": 3.0, "warm_s": 0.1},
                         "rss": {"models": ["m"], "peak_rss_gb": 2.0},
                         "app": {"error": "no browser"}})
    assert "| bank preset analysis, warm | 0.10 s | ≤ 0.2 s | meets target |" in text
    assert ("| bank preset analysis, cold (models loaded, UMAP imported) | 3.00 s | ≤ 2.0 s "
            "| MISSES target |") in text
    assert "MISSES target" in text.split("peak RSS")[1].splitlines()[0]
    assert "- app: no browser" in text


def test_speed_report_judges_ctxlens_embed_against_hf_as_whole_processes():
    embed = {"model": "m", "speedup": 2.5, "engine_s": 1.0, "hf_batched_s": 1.01, "naive_s": 2.5,
             "sentences": 4, "tokens": 40, "batch_size": 2, "matmul_gflops": 1.0,
             "params_matmul": 1, "flop_bound_s": 0.1, "engine_vs_bound": 10.0}
    process = {"model": "m", "sentences": 4, "engine_s": [10.0, 10.2, 9.9],
               "hf_s": [10.1, 9.8, 10.0], "ratio": 10.0 / 10.0}
    text = speed_report({"embed": embed, "embed_process": process})
    row = [r for r in text.splitlines() if "plain HF batched SDPA loop" in r][0]
    assert "| 1.01× | (reported) |" in row          # in-process: shown, not judged
    row = [r for r in text.splitlines() if "whole process against whole process" in r][0]
    assert "| 1.00× (95% CI" in row and "| ≥ 1.2× | MISSES target |" in row
    faster = speed_report({"embed": embed, "embed_process": {
        **process, "hf_s": [13.0, 13.1, 12.9], "ratio": 1.3}})
    assert "| ≥ 1.2× | meets target |" in faster


def test_brown_tags_lose_title_and_headline_suffixes():
    assert [simplify_tag(t) for t in ("nn-tl", "np$", "dod*", "*", "--", "fw-in")] == \
        ["nn", "np$", "dod", "*", "--", "fw"]


def _two_senses_a_lemma(seed: int, n_lemmas: int, per_sense: int = 3):
    """(SenseData maker, sense centres per example, unit noise per example): every lemma has two
    senses of `per_sense` examples, each sense a random centre in 12 dimensions."""
    from bench.analysis.probes import SenseData

    rng = np.random.default_rng(seed)
    senses = np.repeat(np.arange(n_lemmas * 2), per_sense)
    centres = rng.normal(size=(n_lemmas * 2, 12))[senses]
    noise = rng.normal(size=centres.shape)

    def data(*layers):
        return SenseData(np.stack(layers).astype(np.float32), senses, senses // 2,
                         1 + senses % 2)
    return data, centres, noise


def test_mix_layer_norm_changes_only_the_mixes_and_is_recorded():
    from bench.layers import sense_probes

    make, centres, noise = _two_senses_a_lemma(1, 8)
    layer = centres + noise
    data = make(layer + 5.0, 3.0 * layer, np.random.default_rng(1).normal(size=layer.shape))
    plain, normed = sense_probes(data, 0), sense_probes(data, 0, mix_layer_norm=True)
    assert plain["mix_layer_norm"] is False and normed["mix_layer_norm"] is True
    assert plain["centroid"] == normed["centroid"] and plain["pairs"] == normed["pairs"]
    assert plain["uniform_pairs"] != normed["uniform_pairs"] or \
        plain["uniform_centroid"] != normed["uniform_centroid"]


def test_the_centroid_is_checked_again_on_the_lemmas_that_fit_the_threshold():
    from bench.layers import sense_probes

    make, centres, noise = _two_senses_a_lemma(2, 40)
    # layer 0 knows nothing of senses, the top layer separates them
    out = sense_probes(make(noise, centres + 0.5 * noise), 0)
    other = out["centroid_other_half"]
    assert other["n_lemmas"] == out["n_lemmas_train"] == 20
    assert other["centroid"][1] > 0.9 and other["centroid"][0] < 0.7
    lo, hi = other["top_minus_l0"]["ci"]
    assert 0 < lo <= other["top_minus_l0"]["value"] <= hi
    assert other["centroid"] != out["centroid"]       # other lemmas than the held-out ones


def test_gpu_part_is_skipped_with_its_reason_without_cuda():
    import torch

    from bench.speed import gpu_embed

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the measurement itself runs in make bench")
    got = gpu_embed()
    assert got == {"skipped": "no CUDA device here (torch.cuda.is_available() is False)"}
    text = speed_report({"gpu": got})
    assert "| GPU batch embedding MFU | skipped | ≥ 40% | skipped: no CUDA device" in text


def test_gpu_mfu_is_judged_against_its_target():
    gpu = {"model": "bert-base-uncased", "device": "NVIDIA H100 80GB HBM3", "dtype": "bfloat16",
           "tokens_per_s": 250000.0, "mfu": 0.43}
    assert "| 43.0% | ≥ 40% | meets target |" in speed_report({"gpu": gpu})
    assert "| 12.0% | ≥ 40% | MISSES target |" in speed_report({"gpu": {**gpu, "mfu": 0.12}})
    text = speed_report({"gpu": {**gpu, "forward_only_mfu": 0.21, "hf_mfu": 0.019,
                                 "vs_hf_loop": 3.84}})
    assert "| 21.0% / 1.9% | context | engine 3.84× the plain HF loop |" in text


def test_gpu_report_headline_is_the_best_engine_row():
    from bench.gpu import headline, report

    def row(dtype, bs, eng_s, mfu):
        return {"dtype": dtype, "batch_size": bs, "hf_s": 4.0, "hf_forward_only_s": 0.35,
                "engine_top_layer_s": eng_s, "encodings_top_layer_s": 3.2,
                "hf_tokens_per_s": 1e5, "hf_mfu": 0.02, "hf_forward_only_tokens_per_s": 1.2e6,
                "hf_forward_only_mfu": 0.21, "engine_top_layer_tokens_per_s": 4e5,
                "engine_top_layer_mfu": mfu, "encodings_top_layer_tokens_per_s": 1.3e5,
                "encodings_top_layer_mfu": 0.024}
    result = {"model": "m", "device": "NVIDIA H200", "torch": "2", "peak_tflops": 989.0,
              "sentences": 10, "tokens": 100,
              "rows": [row("bfloat16", 512, 1.5, 0.05), row("float16", 512, 1.0, 0.07),
                       {**row("bfloat16", 512, 0.3, 0.09), "texts": "five sentences a text",
                        "sentences": 2, "tokens": 90}]}
    h = headline(result)
    # sentence rows only (the paragraph row is context), the fastest engine row
    assert (h["dtype"], h["mfu"]) == ("float16", 0.07)
    assert h["vs_hf_loop"] == 4.0 and abs(h["vs_encodings"] - 3.2) < 1e-12
    md = report(result)
    assert ("| five sentences a text (2 texts, 90 tokens), bfloat16, batch 512 | engine, top "
            "layer | 0.300 |") in md
    assert headline({"skipped": "no CUDA"}) == {}
    # a compiled engine row that beats the eager ones is the headline, and says so
    fast = {**row("float16", 2048, 2.0, 0.06), "engine_top_layer_compiled_s": 0.5,
            "engine_top_layer_compiled_tokens_per_s": 8e5, "engine_top_layer_compiled_mfu": 0.12,
            "hf_forward_compiled_s": 0.2, "hf_forward_compiled_tokens_per_s": 2e6,
            "hf_forward_compiled_mfu": 0.33}
    h = headline({**result, "rows": result["rows"] + [fast]})
    assert (h["path"], h["mfu"], h["batch_size"]) == ("engine_top_layer_compiled", 0.12, 2048)
    assert h["vs_hf_loop"] == 8.0 and h["forward_compiled_mfu"] == 0.33
    text = speed_report({"gpu": h})
    assert "float16, --compile; 800,000 tokens/s) | 12.0% | ≥ 40% | MISSES target |" in text
    assert "| GPU: the same forward passes through torch.compile | 33.0% | context |" in text
    assert "| engine, top layer, --compile | 0.500 | 800,000 | 12.0% |" in report(
        {**result, "rows": [fast]})


def test_the_speed_part_prints_every_target_and_its_verdict():
    """`make bench` prints the speed targets it judged (the rows of speed.md with a target),
    so a run's verdicts show in the terminal."""
    import json

    from bench.speed_report import speed_rows, target_lines

    s = json.loads((Path(__file__).resolve().parents[2] / "results" / "speed.json").read_text())
    judged = [r for r in speed_rows(s) if "target" in str(r[3])]
    lines = target_lines(s)
    assert len(lines) == len(judged) >= 5
    for line, (name, value, target, result) in zip(lines, judged):
        assert line.strip().startswith(result) and name in line and f"(target {target})" in line
    s["bank"]["warm_s"] = 99.0
    assert "MISSES target  bank preset analysis, warm: 99.00 s" in "\n".join(target_lines(s))
