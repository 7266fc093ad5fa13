"""Markdown reports of the per-layer reproductions (results/*.md)."""
from __future__ import annotations

import numpy as np

from bench.published import BERT_WSD, ELMO_POS, ELMO_WSD, WIC, WSD_FIRST_SENSE


def table(headers: list[str], rows: list[list]) -> str:
    def cell(v) -> str:
        if isinstance(v, float):
            return "n/a" if not np.isfinite(v) else f"{v:.3f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _names(r: dict) -> list[str]:
    names = r.get("layer_names") or []
    return names if len(names) == r["n_layers"] else [f"L{i}" for i in range(r["n_layers"])]


# -- geometry -------------------------------------------------------------------------------

def geometry_invariants(r: dict) -> list[tuple[str, bool, str]]:
    """(check, passed, detail) for the invariants of reference-numbers.md."""
    g = r["geometry"]
    adj = np.array(g["self_similarity_adjusted"], dtype=float)
    raw0 = float(g["self_similarity"][0])
    half = len(adj) // 2
    lower, upper = float(np.nanmean(adj[1:half + 1])), float(np.nanmean(adj[half + 1:]))
    checks = []
    if r["family"] == "elmo":
        checks.append(("ELMo layer 0 raw self-similarity is 1", abs(raw0 - 1) < 1e-5,
                       f"{raw0:.6f}"))
    checks.append(("upper layers more context-specific (adj. self-similarity, upper half < "
                   "lower half of contextual layers)", upper < lower,
                   f"lower {lower:.3f}, upper {upper:.3f}"))
    return checks


def geometry_report(results: list[dict], source: str, png: str) -> str:
    out = ["# Ethayarajh (2019) geometry per layer", "",
           f"Sentences: {source}. Word vectors are the mean of each word's subword vectors; "
           "word identity is the exact surface form (case-sensitive, as ELMo's char CNN is; "
           "words without a letter or digit are left out); self-similarity and MEV use "
           "words seen at least twice; the anisotropy "
           "baseline is the mean cosine of 1,000 random pairs of different words from "
           "different sentences; MEV (uncentred, σ1²/Σσi²) is also shown minus its value on "
           "as many random occurrences. Definitions: engine/analysis/geometry.py.", "",
           f"![geometry per layer]({png})", "", "## Invariants", ""]
    rows = [[r["model"], name, "PASS" if ok else "FAIL", detail]
            for r in results for name, ok, detail in geometry_invariants(r)]
    out += [table(["model", "check", "result", "values"], rows), ""]
    for r in results:
        g = r["geometry"]
        out += [f"## {r['model']} ({r['family']})", "",
                f"{g['n_sentences']} held-out sentences, {g['n_words_repeated']} words seen "
                "at least twice.", ""]
        rows = [[i, name, g["anisotropy"][i], g["self_similarity"][i],
                 g["self_similarity_adjusted"][i], g["intra_sentence"][i],
                 g["intra_sentence_adjusted"][i], g["mev"][i], g["mev_adjusted"][i]]
                for i, name in enumerate(_names(r))]
        out += [table(["layer", "name", "anisotropy", "self-sim", "self-sim − base",
                       "intra-sent", "intra-sent − base", "MEV", "MEV − base"], rows), ""]
    out += ["## Published (Ethayarajh 2019, via shared/reference-numbers.md)", "",
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
           "default); **layer 0**: the static (context-free) baseline.", "",
           f"![senses per layer]({png})", "", "## Summary", ""]
    rows = []
    for r in results:
        s = r["senses"]
        best = int(np.nanargmax(s["centroid"]))
        rows.append([r["model"], s["chance"], s["first_sense"], s["centroid"][0],
                     f"{s['centroid'][best]:.3f} (L{best})", s["uniform_centroid"],
                     s["mix_centroid"], s["pairs"][0], max(s["pairs"]), s["mix_pairs"]])
    out += [table(["model", "chance", "first sense", "centroid L0", "centroid best",
                   "centroid uniform mix", "centroid learned mix", "pairs L0", "pairs best",
                   "pairs learned mix"], rows), ""]
    for r in results:
        s = r["senses"]
        out += [f"## {r['model']}", "",
                table(["layer", "name", "centroid", "pairs", "learned mix weight"],
                      [[i, n, s["centroid"][i], s["pairs"][i], s["mix_weights"][i]]
                       for i, n in enumerate(_names(r))]), ""]
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


# -- POS ------------------------------------------------------------------------------------

def pos_report(results: list[dict], source: str, png: str) -> str:
    p0 = results[0]["pos"] if results else {}
    out = ["# Part-of-speech linear probe per layer (Brown tags)", "",
           f"Sentences: {source}. A multinomial logistic regression (scikit-learn, standardised "
           f"features) per layer, trained on {p0.get('n_train', 0)} words from training "
           f"documents and tested on {p0.get('n_test', 0)} words of held-out documents; "
           f"{p0.get('n_tags', 0)} tags (Brown tags without -tl/-hl/-nc suffixes, rare tags "
           "pooled). The analogue of Peters et al. 2018 Table 6.", "",
           f"![POS accuracy per layer]({png})", "", "## Summary", ""]
    rows = []
    for r in results:
        acc = r["pos"]["accuracy"]
        best = int(np.argmax(acc))
        rows.append([r["model"], r["pos"]["majority_baseline"], acc[0],
                     f"{acc[best]:.3f} (L{best})", acc[-1],
                     "yes" if best < len(acc) - 1 else "no"])
    out += [table(["model", "majority class", "layer 0", "best layer", "top layer",
                   "best below the top (syntax lower)"], rows), ""]
    for r in results:
        out += [f"## {r['model']}", "", table(["layer", "name", "accuracy"], [
            [i, n, a] for i, (n, a) in enumerate(zip(_names(r), r["pos"]["accuracy"]))]), ""]
    out += ["## Published", "",
            f"Peters et al. 2018 Table 6 (PTB, linear probe): ELMo layer 1 {ELMO_POS[1]}, "
            f"layer 2 {ELMO_POS[2]} (syntax sits lower); CoVe 93.3 / 92.8.", ""]
    return "\n".join(out)
