"""Markdown reports of the per-layer reproductions (results/*.md)."""
from __future__ import annotations

import numpy as np

from bench.findings import HEADERS, canonical_note, findings_rows
from bench.published import BERT_WSD, ELMO_POS, ELMO_WSD, WIC, WSD_FIRST_SENSE
from bench.tables import table
from bench.views import Est, geometry_invariants, pos_summary_rows
from engine.analysis.bootstrap import with_ci


def _layer_ci(section: dict, key: str, i: int) -> str:
    ci = section.get("ci", {}).get(key)
    return with_ci(section[key][i], ci[i] if ci else None)


def _scalar_ci(section: dict, key: str) -> str:
    return with_ci(section[key], section.get("ci", {}).get(key))


def _est(e: Est) -> str:
    """A views cell in this report's form (an interval with a non-finite end is left out)."""
    return with_ci(e.value, None if e.lo is None else (e.lo, e.hi))


def bootstrap_note(section: dict) -> str:
    b = section.get("bootstrap")
    if not b:
        return "No intervals: these results predate the bootstrap."
    return (f"Brackets: {b['level']:.0%} percentile-bootstrap interval over the "
            f"{b['n_units']} {b['unit']}s ({b['n_resamples']:,} resamples of the {b['unit']}s "
            f"with replacement, seed {b['seed']}; engine/analysis/bootstrap.py).")


def findings_section(results: list[dict], report: str | None) -> list[str]:
    """The published findings this report echoes, and whether each model reproduces them."""
    rows = findings_rows(results, report)
    if not rows:
        return []
    note = canonical_note(results, report)
    return ["## Published findings: reproduced?", "",
            "**yes**: the claimed difference's 95% bootstrap interval excludes 0 on the "
            "claimed side; **partly**: the point estimate points that way but the interval "
            "includes 0 (or one of two parts holds); **no**: otherwise. Each finding is "
            "checked on the models of the family it was published for.", "",
            table(HEADERS, rows), ""] + ([note, ""] if note else [])


def _names(r: dict) -> list[str]:
    names = r.get("layer_names") or []
    return names if len(names) == r["n_layers"] else [f"L{i}" for i in range(r["n_layers"])]


# -- geometry -------------------------------------------------------------------------------

def geometry_report(results: list[dict], source: str, png: str) -> str:
    g0 = results[0]["geometry"] if results else {}
    out = ["# Ethayarajh (2019) geometry per layer", "",
           f"Sentences: {source}. Every model reads each sentence as running text (the "
           "detokenised sentence); a Brown token's vector is the mean of its subword vectors "
           "(a token whose engine words reach past it, such as 'Mr.' before a closing quote, "
           "read as 'Mr' and '.\"', is left out: its vector would mix in the quote). "
           "Word identity is the exact surface form (case-sensitive, as ELMo's char CNN is; "
           "words without a letter or digit are left out); self-similarity and MEV use "
           "words seen at least twice; intra-sentence similarity is the mean cosine between "
           "each word's raw vector and the mean of its sentence's raw vectors; the anisotropy "
           "baseline is the mean cosine of 1,000 random pairs of different words from "
           "different sentences; MEV (uncentred, σ1²/Σσi²) is also shown minus its value on "
           "as many random occurrences. Definitions: engine/analysis/geometry.py.", "",
           bootstrap_note(g0) + " A resample weighs a baseline pair by the product of its "
           "two sentences' counts. Self-similarity is a mean over the words seen at least "
           "twice, so its intervals resample those words instead (as many resamples, the same "
           "seed): resampling sentences dropped a word seen twice from every resample that "
           "missed one of its sentences, which weighed frequent, context-specific words more "
           "than the estimate does and put some intervals below their own estimates in the "
           "reports before 2026-11-27. An adjusted self-similarity's replicate subtracts an "
           "anisotropy replicate drawn independently, which if anything widens its interval. "
           "MEV is a mean over the same words and resamples them too; its baseline is taken "
           "for the same resampled words.", "",
           f"![geometry per layer]({png})", ""]
    out += findings_section(results, "geometry.md")
    out += ["## Invariants", ""]
    rows = [[r["model"], name, "PASS" if ok else "FAIL", detail]
            for r in results for name, ok, detail in geometry_invariants(r)]
    out += [table(["model", "check", "result", "values"], rows), ""]
    for r in results:
        g = r["geometry"]
        out += [f"## {r['model']} ({r['family']})", "",
                f"{g['n_sentences']} held-out sentences, {g['n_words_repeated']} words seen "
                "at least twice.", ""]
        keys = ("anisotropy", "self_similarity", "self_similarity_adjusted", "intra_sentence",
                "intra_sentence_adjusted")
        rows = [[i, name, *[_layer_ci(g, k, i) for k in keys], _layer_ci(g, "mev", i),
                 _layer_ci(g, "mev_adjusted", i)]
                for i, name in enumerate(_names(r))]
        out += [table(["layer", "name", "anisotropy", "self-sim", "self-sim − base",
                       "intra-sent", "intra-sent − base", "MEV", "MEV − base"], rows), ""]
    out += ["## Published (Ethayarajh 2019, as in bench/published.py)", "",
            table(["quantity", "ELMo (L0, L1, L2)", "BERT-base", "GPT-2 small"], [
                ["anisotropy", "0.008, 0.157, 0.136", "rises to 0.675 at L11, 0.477 at L12",
                 "0.57–0.67 at L1–L10, 0.758 at L11, 0.978 at L12"],
                ["self-sim − base", "0.99 (raw 1.000), 0.59, 0.51",
                 "0.85 at L0 → 0.16 at L11, 0.28 at L12",
                 "0.28–0.31 at L0–L5 → 0.13 at L11, 0.007 at L12"],
                ["intra-sent − base", "0.31, 0.43, 0.49", "0.33–0.35 early → 0.20 at L11",
                 "≈ 0 from L2 on"]]), ""]
    return "\n".join(out)


# -- senses ---------------------------------------------------------------------------------

def senses_report(results: list[dict], n_examples: int, png: str) -> str:
    s0 = results[0]["senses"] if results else {}
    out = ["# Word senses per layer (WordNet 3.0 usage examples)", "",
           f"{n_examples} WordNet 3.0 usage examples of polysemous nouns and verbs whose text "
           "contains the lemma (senses with at least two such examples, lemmas with at least "
           f"two such senses). Lemmas are split at random: {s0.get('n_lemmas_train', 0)} "
           f"train, {s0.get('n_lemmas_test', 0)} held out ({s0.get('n_examples_test', 0)} "
           "examples). Scores are on held-out lemmas only.", "",
           "- **centroid**: leave-one-out nearest-sense-centroid accuracy (cosine; the "
           "centroid of the other examples of each sense of the same lemma).",
           "- **pairs**: same/different-sense accuracy on balanced example pairs of one lemma "
           "(chance 50%), cosine threshold fitted on the train lemmas.",
           "- **learned mix**: ELMo-style scalar mix (softmax weights over unit-normalised "
           "layers) learned on train-lemma pairs; **uniform mix**: 1/L each (ELMo's no-task "
           "default); **layer 0**: the static (context-free) baseline. "
           + _mix_layer_norm_note(results), "",
           bootstrap_note(s0) + " The threshold and the learned mix stay as fitted on the "
           "train lemmas. The best layer is picked on the same data, so its interval is "
           "optimistic; the findings below use fixed layers.", "",
           f"![senses per layer]({png})", ""]
    out += findings_section(results, "senses.md")
    out += ["## Summary", ""]
    rows = []
    for r in results:
        s = r["senses"]
        best = int(np.nanargmax(s["centroid"]))
        best_pairs = int(np.nanargmax(s["pairs"]))
        rows.append([r["model"], s["chance"], _scalar_ci(s, "first_sense"),
                     _layer_ci(s, "centroid", 0),
                     f"{_layer_ci(s, 'centroid', best)} (L{best})",
                     _scalar_ci(s, "uniform_centroid"), _scalar_ci(s, "mix_centroid"),
                     _layer_ci(s, "pairs", 0),
                     f"{_layer_ci(s, 'pairs', best_pairs)} (L{best_pairs})",
                     _scalar_ci(s, "mix_pairs")])
    out += [table(["model", "chance", "first sense", "centroid L0", "centroid best",
                   "centroid uniform mix", "centroid learned mix", "pairs L0", "pairs best",
                   "pairs learned mix"], rows), ""]
    for r in results:
        s = r["senses"]
        out += [f"## {r['model']}", "",
                table(["layer", "name", "centroid", "pairs", "learned mix weight"],
                      [[i, n, _layer_ci(s, "centroid", i), _layer_ci(s, "pairs", i),
                        s["mix_weights"][i]] for i, n in enumerate(_names(r))]), ""]
    out += ["## Published, for orientation (different data and protocol)", "",
            f"- Peters et al. 2018 Table 5 (SemCor, nearest sense centroid, F1): ELMo biLM "
            f"layer 1 {ELMO_WSD[1]}, layer 2 {ELMO_WSD[2]}; first-sense baseline "
            f"{WSD_FIRST_SENSE}.",
            f"- Coenen et al. 2019: BERT-base nearest centroid F1 {BERT_WSD}.",
            f"- WiC (Pilehvar & Camacho-Collados 2019), same-sense pairs: random "
            f"{WIC['random']}, ELMo {WIC['ELMo']}, BERT-large {WIC['BERT-large']}.",
            "", "WordNet examples give only 2–3 examples per sense, so centroids here are far "
            "noisier than SemCor's; compare layers and models with each other, not with the "
            "published F1.", ""]
    return "\n".join(out)


def _mix_layer_norm_note(results: list[dict]) -> str:
    on = [r["model"] for r in results if r["senses"].get("mix_layer_norm")]
    if not on:
        return ("The mixes read the layers as they are (`python -m bench --mix-layer-norm` "
                "layer-norms each first, as ELMo's do_layer_norm does).")
    return f"The mixes read layer-normed layers (ELMo's do_layer_norm) for: {', '.join(on)}."


# -- POS ------------------------------------------------------------------------------------

def pos_report(results: list[dict], source: str, png: str) -> str:
    p0 = results[0]["pos"] if results else {}
    out = ["# Part-of-speech linear probe per layer (Brown tags)", "",
           f"Sentences: {source}. A multinomial logistic regression (scikit-learn, standardised "
           f"features) per layer, trained on {p0.get('n_train', 0)} words from training "
           f"documents and tested on {p0.get('n_test', 0)} words of held-out documents; "
           f"{p0.get('n_tags', 0)} tags (Brown tags without -tl/-hl/-nc suffixes, rare tags "
           "pooled). The analogue of Peters et al. 2018 Table 6. Every model reads each "
           "sentence as running text (the detokenised sentence); a Brown token's vector is the "
           "mean of its subword vectors.", "",
           bootstrap_note(p0) + " The probes stay as trained.", "",
           f"![POS accuracy per layer]({png})", ""]
    out += findings_section(results, "pos.md")
    out += ["## Summary", ""]
    rows = [[model, _est(majority), _est(first), f"{_est(best)} ({best_at})", _est(top), below]
            for model, majority, first, best, best_at, top, below in pos_summary_rows(results)]
    out += [table(["model", "majority class", "layer 0", "best layer", "top layer",
                   "best below the top (point estimates)"], rows), ""]
    for r in results:
        out += [f"## {r['model']}", "", table(["layer", "name", "accuracy"], [
            [i, n, _layer_ci(r["pos"], "accuracy", i)] for i, n in enumerate(_names(r))]), ""]
    out += ["## Published", "",
            f"Peters et al. 2018 Table 6 (PTB, linear probe): ELMo layer 1 {ELMO_POS[1]}, "
            f"layer 2 {ELMO_POS[2]} (syntax sits lower); CoVe 93.3 / 92.8.", ""]
    return "\n".join(out)
