"""What results/*.json hold, for readers: one topic per report, each as tables of typed cells
(a measurement keeps its 95% interval beside it) and per-layer series for charts.

`python -m bench.docs` writes docs/reproductions.md and docs/performance.md from them, and
results/benchmarks.json, which the app's Benchmarks page draws (page_data, at the end); `python
-m bench.summary` lists the topics in results/README.md: every number a reader sees comes from
the JSON, through here. Light (json and numpy; no torch, no plotting library).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.findings import FINDINGS, canonical_note
# the cells, tables and charts every view is made of (bench/view_types.py, which the views
# written in their own modules import too)
from bench.view_types import Chart, Est, Reference, Series, Table, View, _measured
from bench.published import (BERT_WSD, ELMO_POS, ELMO_WSD, ETHAYARAJH_2019, PUBLISHED_FAMILY,
                             PUBLISHED_LAYERS, WIC, WSD_FIRST_SENSE)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
CLOZE_TOP_K = 5            # bench/cloze.py TOP_K: a hit is an accepted answer in the top 5
CLOZE_BOOTSTRAP = 10_000   # bench/cloze.py BOOTSTRAP and SEED: the same resamples
CLOZE_SEED = 0
CLOZE_LEFT_POOL = "both-left-pool"
CLOZE_RESCORED = "both-rescored"


@dataclass(frozen=True)
class Topic:
    key: str                     # results/<key>.md is its full report
    title: str                   # the page's tab
    what: str                    # for a reader: what is measured and how to read it
    data: tuple[str, ...]        # the results/*.json it is drawn from
    command: str                 # how to measure it again


TOPICS: tuple[Topic, ...] = (
    Topic("summary", "Summary", "One row per bundled model: its depth, whether the geometry "
          "behaves as expected, the layer where part of speech and word sense are easiest to "
          "read, and how many published findings it reproduces. Brackets are 95% confidence "
          "intervals: two numbers whose intervals overlap may not differ.",
          ("layers.json",), "python -m bench --only layers"),
    Topic("senses", "Word senses", "Can a layer tell a word's senses apart? For words with "
          "several WordNet senses, each held-out occurrence is assigned to the nearest sense "
          "centroid built from other sentences; the score is the share assigned right (chance "
          "is given beside it). Peters et al. (2018) found ELMo's top layer best for word "
          "sense; higher is better.", ("layers.json",), "python -m bench --only layers"),
    Topic("geometry", "How contextual is each layer?", "Ethayarajh (2019): self-similarity "
          "(the same word in different sentences), intra-sentence similarity and the "
          "anisotropy baseline (random word pairs), per layer. Lower self-similarity above the "
          "baseline means more context-specific vectors; GPT-2's anisotropy approaches 1 in "
          "its top layers.", ("layers.json",), "python -m bench --only layers"),
    Topic("pos", "Part of speech", "A linear probe reads each word's part of speech from one "
          "layer's vectors (held-out Brown sentences). Peters et al. (2018) and Tenney et al. "
          "(2019) found lower layers best for syntax; the majority-class rate is the floor.",
          ("layers.json",), "python -m bench --only layers"),
    Topic("cloze", "Filling a blank", "Everyday sentences with one blank and the accepted "
          "answers; a hit is an accepted answer among a model's top 5. A bert-base-class "
          "masked LM gets about 80% of such blanks.",
          ("cloze.json", "cloze_wordnet.json", "cloze_replication.json"),
          "python -m bench --only cloze"),
    Topic("elmo_distill", "A stronger ELMo", "Attempts to give the offline ELMo more meaning "
          "than 1.1M words of Brown allow, and whether they helped: each candidate's word-sense "
          "scores and held-out perplexity.", ("elmo_distill.json",),
          "python -m bench.elmo_distill LABEL=FOLDER ..."),
    Topic("speed", "Speed", "Ratios against a baseline measured in the same run (plain "
          "Hugging Face loops, the FLOP bound) and times against the targets, on 2 CPU cores.",
          ("speed.json",), "python -m bench --only speed"),
    Topic("attribution", "Why this word: faithfulness", "How far to trust each attribution "
          "map, across held-out everyday sentences (not the app's presets), each explaining the "
          "model's own top word: ERASER comprehensiveness (how much f drops when the map's top "
          "10/20/50% of words are removed; higher is better) and sufficiency (how much it drops "
          "when only they are kept; lower is better), in units of f (log-probability), beside "
          "the same for random orders of the words; and how well attention and rollout agree "
          "with occlusion (Kendall τ), Jain & Wallace's (2019) check.",
          ("attribution.json",), "python -m bench --only attribution"),
    Topic("head_pruning", "Pruning attention heads", "Michel et al. (2019), \"Are Sixteen "
          "Heads Really Better than One?\": each head's importance for a cloze set, then top-1 "
          "accuracy on held-out blanks as more and more heads are knocked out, in importance "
          "order and in random order; and the speed of knocking heads out.",
          ("head_pruning.json",), "python -m bench.head_pruning"),
    Topic("causal_tracing", "Causal tracing", "Meng et al. (2022): the subject of a fact the "
          "model knows is noised, and each layer × position cell of the residual stream, the "
          "attention and the MLPs is restored from the clean run alone; they found the effect "
          "at the subject's last token in the middle layers and at the last token late.",
          ("patching.json",), "python -m bench.patching --part trace"),
    Topic("attribution_speed", "Attribution and generation speed", "One attribution of a "
          "20-word sentence per method on 2 CPU cores against the targets, beside Captum's "
          "LayerIntegratedGradients, and SmolLM2's generation beside model.generate, each "
          "measured in the same run; and integrated gradients' peak memory on a 127-word "
          "sentence beside a plain forward's.", ("attribution.json",),
          "python -m bench --only attribution"),
    Topic("components_speed", "Direct logit attribution speed", "One direct logit "
          "attribution (each head's and feed-forward block's direct effect on the next word's "
          "logit) beside a plain forward pass of the same model, same run, and the heads it "
          "finds for one example.", ("components_speed.json",),
          "python -m bench.components_speed"),
    Topic("patching", "Activation patching speed", "The whole residual activation-patching "
          "grid of SmolLM2-135M (every layer × position cell from a clean run into a "
          "corrupted one) beside nnsight 0.8 doing the same grid in the same run, and the peak "
          "memory of each beside a plain forward pass.", ("patching.json",),
          "python -m bench.patching --part speed"),
    Topic("gpu", "GPU", "Batch embedding on a GPU: tokens per second and model FLOP "
          "utilisation (MFU: the share of the chip's peak the model's matrix products use) for "
          "the engine, a plain Hugging Face loop and its bare forward passes, same run.",
          ("gpu.json",), "python -m bench.gpu"),
    Topic("bad_input", "Bad input", "What a user sees after pasting or linking something the "
          "app cannot take: one line naming the problem, the rest still plotted.",
          ("bad_input.json",), "python -m bench.bad_input"),
    Topic("soak", "Many users at once", "Several browser sessions use every page at the same "
          "time: errors seen, memory over time, and whether any session saw another's text.",
          ("soak.json",), "python -m bench.soak --sessions 4 --long 2 --minutes 5 --pause 60"),
    Topic("corpus", "Corpus mode", "Indexing all of Brown at every layer into a vector "
          "database and searching it: time, size, query speed and whether the approximate "
          "search finds what exact search finds (recall).", ("corpus.json",),
          "python -m bench.corpus_index"),
)
BY_KEY = {t.key: t for t in TOPICS}


def load(name: str, results: Path = RESULTS):
    path = results / name
    return json.loads(path.read_text()) if path.exists() else None


def available(results: Path = RESULTS) -> list[Topic]:
    """The topics whose JSON is there."""
    return [t for t in TOPICS if (results / t.data[0]).exists()]


def view(topic: str, results: Path = RESULTS) -> View:
    return BUILDERS[topic](results)


# -- per-layer results (layers.json) ---------------------------------------------------------

def _ci(section: dict, key: str, i: int | None = None, **kw) -> Est:
    ci = section.get("ci", {}).get(key)
    value = section[key] if i is None else section[key][i]
    lohi = (ci if i is None else ci[i]) if ci else (None, None)
    return Est(float(value), *(float(x) for x in lohi), **kw) if ci else Est(float(value), **kw)


def _contrast(c: dict) -> Est:
    return Est(c["value"], c["ci"][0], c["ci"][1], signed=True)


def _names(r: dict) -> list[str]:
    names = r.get("layer_names") or []
    return names if len(names) == r["n_layers"] else [f"L{i}" for i in range(r["n_layers"])]


def _range_text(rows: list[tuple[int, int, float, float]]) -> str:
    def one(a, b, lo, hi):
        at = f"L{a}" if a == b else f"L{a}–L{b}"
        return f"{lo:g} at {at}" if lo == hi else f"{lo:g}–{hi:g} at {at}"
    return ", ".join(one(*r) for r in rows)


def published(finding_index: int, family: str) -> str:
    """The published number(s) a finding restates, from bench/published.py."""
    f = FINDINGS[finding_index]
    if f.paper.startswith("Ethayarajh"):
        quantity = "anisotropy" if "anisotropy" in f.claim else "self_similarity_adjusted"
        name = next(n for n, fam in PUBLISHED_FAMILY.items() if fam == family)
        return f"{name}: {_range_text(ETHAYARAJH_2019[quantity][name])}"
    if "POS" in f.claim:
        return f"ELMo (PTB, probe accuracy): layer 1 {ELMO_POS[1]}, layer 2 {ELMO_POS[2]}"
    if f.paper.startswith("Peters"):
        return (f"ELMo (SemCor, nearest centroid F1): layer 1 {ELMO_WSD[1]}, layer 2 "
                f"{ELMO_WSD[2]}")
    if "first-sense" in f.claim:
        return f"BERT-base F1 {BERT_WSD} against a first-sense baseline of {WSD_FIRST_SENSE}"
    return f"BERT-base top layer F1 {BERT_WSD} (SemCor)"


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
    diff = g.get("contrasts", {}).get("self_similarity_adjusted", {}).get("upper_minus_lower")
    if diff:   # passes only when the whole interval of upper − lower is below 0
        lo, hi = diff["ci"]
        checks.append(("upper layers more context-specific (adj. self-similarity, upper half < "
                       "lower half of contextual layers, 95% CI of the difference below 0)",
                       hi < 0, f"lower {lower:.3f}, upper {upper:.3f}, difference "
                       f"{diff['value']:+.3f} [{lo:+.3f}, {hi:+.3f}]"))
    else:
        checks.append(("upper layers more context-specific (adj. self-similarity, upper half < "
                       "lower half of contextual layers)", upper < lower,
                       f"lower {lower:.3f}, upper {upper:.3f}"))
    return checks


def findings_table(layers: list[dict]) -> Table:
    """Each published finding on each bundled model of its family: the measured difference
    with its interval, the verdict and the published number beside it."""
    rows = []
    for i, f in enumerate(FINDINGS):
        for r in layers:
            if r["family"] not in f.families:
                continue
            try:
                v = f.judge(r)
                measured = _finding_estimate(f, r)
            except KeyError:
                rows.append([f.paper, f.claim, r["model"], "n/a", "n/a", "not measured",
                             published(i, r["family"])])
                continue
            reason = v.reason
            if "anisotropy" in f.claim:      # the finding's second part: the top layer
                reason += f"; top layer {_ci(r['geometry'], 'anisotropy', -1).text()}"
            rows.append([f.paper, f.claim, r["model"], measured, v.verdict, reason,
                         published(i, r["family"])])
    note = ("yes: the measured difference's 95% interval excludes 0 on the side the paper "
            "claims; partly: the right direction, or one of two parts; no: otherwise, with the "
            "likely reason. " + canonical_note(layers)).strip()
    return Table("Published findings: reproduced?",
                 ["paper", "finding", "model", "measured difference", "reproduced?", "reason",
                  "published"], rows, note)


def _finding_estimate(f, r: dict) -> Est:
    """The finding's measured difference (for the anisotropy finding, its rise; the top layer
    is in the reason and the geometry tab)."""
    if "anisotropy" in f.claim:
        return _contrast(r["geometry"]["contrasts"]["anisotropy"]["upper_minus_lower"])
    section, metric = (("pos", "accuracy") if "POS" in f.claim else
                       ("senses", "centroid") if f.report == "senses.md" else
                       ("geometry", "self_similarity_adjusted"))
    name = ("upper_minus_lower" if section == "geometry" else
            "top_minus_first_sense" if "first-sense" in f.claim else
            "top_minus_l0" if "layer 0" in f.claim else "top_minus_l1")
    return _contrast(r[section]["contrasts"][metric][name])


def _verdicts(layers: list[dict], model: str) -> str:
    found = [row[4] for row in findings_table(layers).rows if row[2] == model]
    if not found:
        return "none for its family"
    return ", ".join(f"{found.count(v)} {v}" for v in ("yes", "partly", "no", "n/a")
                     if found.count(v))


def _summary(results: Path) -> View:
    layers = load("layers.json", results) or []
    rows = []
    for r in layers:
        checks = geometry_invariants(r)
        p, s = r["pos"], r.get("senses")
        best = int(np.argmax(p["accuracy"]))
        row = [r["model"], r["n_layers"] - 1, f"{sum(ok for _, ok, _ in checks)}/{len(checks)}",
               _ci(p, "accuracy", best), f"L{best}", _ci(p, "majority_baseline")]
        if s is not None:
            top = int(np.nanargmax(s["centroid"]))
            row += [_ci(s, "centroid", 0), _ci(s, "centroid", top), f"L{top}",
                    _ci(s, "mix_centroid"), Est(s["chance"])]
        else:
            row += ["n/a"] * 5
        rows.append(row + [_verdicts(layers, r["model"])])
    headline = Table(
        "Per-layer headlines", ["model", "layers", "geometry invariants pass", "POS probe, best",
                                "POS best layer", "POS majority class", "senses L0",
                                "senses, best", "senses best layer", "senses learned mix",
                                "senses chance", "published findings reproduced?"], rows,
        "POS: probe accuracy on held-out Brown sentences; senses: nearest-centroid accuracy on "
        "held-out WordNet lemmas. The best layer is picked on the same data, so its interval "
        "is optimistic.")
    return View([findings_table(layers), headline], measured=_measured(layers, _model))


def _model(r: dict) -> str:
    return r.get("model", "")


def _series(layers: list[dict], section: str, key: str) -> list[Series]:
    out = []
    for r in layers:
        sec = r.get(section)
        if not sec or key not in sec:
            continue
        ci = sec.get("ci", {}).get(key)
        out.append(Series(r["model"], r["family"], _names(r), [float(v) for v in sec[key]],
                          [c[0] for c in ci] if ci else None, [c[1] for c in ci] if ci else None))
    return out


GEOMETRY_PANELS = (("anisotropy", "Anisotropy baseline (random word pairs)"),
                   ("self_similarity_adjusted", "Self-similarity − baseline"),
                   ("intra_sentence_adjusted", "Intra-sentence similarity − baseline"),
                   ("mev_adjusted", "Maximum explainable variance − baseline"))


def _references(quantity: str) -> list[Reference]:
    out = []
    for name, rows in ETHAYARAJH_2019.get(quantity, {}).items():
        top = PUBLISHED_LAYERS[name]
        out += [Reference(f"{name} (Ethayarajh 2019)", a / top, b / top, lo, hi)
                for a, b, lo, hi in rows]
    return out


def _geometry(results: Path) -> View:
    layers = load("layers.json", results) or []
    charts = [Chart(title, "cosine" if "mev" not in key else "share of variance",
                    _series(layers, "geometry", key), _references(key))
              for key, title in GEOMETRY_PANELS]
    invariants = Table("Invariants", ["model", "check", "result", "values"],
                       [[r["model"], name, "pass" if ok else "FAIL", detail]
                        for r in layers for name, ok, detail in geometry_invariants(r)])
    findings = _findings_of(layers, "geometry.md")
    per_layer = []
    for r in layers:
        g = r["geometry"]
        per_layer.append(Table(
            f"{r['model']} per layer", ["layer", "name", "anisotropy", "self-similarity",
                                        "self-similarity − baseline", "intra-sentence",
                                        "intra-sentence − baseline", "MEV", "MEV − baseline"],
            [[i, n, *[_ci(g, k, i) for k in ("anisotropy", "self_similarity",
                                              "self_similarity_adjusted", "intra_sentence",
                                              "intra_sentence_adjusted", "mev", "mev_adjusted")]]
             for i, n in enumerate(_names(r))],
            f"{g['n_sentences']} held-out sentences, {g['n_words_repeated']} words seen at "
            "least twice."))
    return View(findings + [invariants] + per_layer, charts, _measured(layers, _model),
                "Published values (stars and bands on the charts): Ethayarajh 2019, "
                "bench/published.py; the x axis is depth, layer / top layer.")


def _findings_of(layers: list[dict], report: str) -> list[Table]:
    t = findings_table(layers)
    claims = {f.claim for f in FINDINGS if f.report == report}
    rows = [row for row in t.rows if row[1] in claims]
    return [Table(t.title, t.columns, rows, t.note)] if rows else []


def _senses(results: Path) -> View:
    layers = [r for r in load("layers.json", results) or [] if r.get("senses")]
    if not layers:
        return View()
    chance = layers[0]["senses"]["chance"]
    charts = [Chart("Nearest sense centroid, held-out lemmas", "accuracy",
                    _series(layers, "senses", "centroid"), lines={"chance": chance}),
              Chart("Same or different sense, held-out pairs", "accuracy",
                    _series(layers, "senses", "pairs"), lines={"chance": 0.5})]
    rows = []
    for r in layers:
        s = r["senses"]
        best, best_pairs = int(np.nanargmax(s["centroid"])), int(np.nanargmax(s["pairs"]))
        rows.append([r["model"], Est(s["chance"]), _ci(s, "first_sense"),
                     _ci(s, "centroid", 0), _ci(s, "centroid", best), f"L{best}",
                     _ci(s, "uniform_centroid"), _ci(s, "mix_centroid"), _ci(s, "pairs", 0),
                     _ci(s, "pairs", best_pairs), f"L{best_pairs}", _ci(s, "mix_pairs")])
    s0 = layers[0]["senses"]
    summary = Table("Summary", ["model", "chance", "first sense", "centroid L0",
                                "centroid best", "centroid best layer", "centroid uniform mix",
                                "centroid learned mix", "pairs L0", "pairs best",
                                "pairs best layer", "pairs learned mix"], rows,
                    f"{s0.get('n_lemmas_test', 0)} held-out lemmas "
                    f"({s0.get('n_examples_test', 0)} WordNet usage examples).")
    published_rows = Table("Published, for orientation (different data and protocol)",
                           ["source", "what", "value"],
                           [["Peters et al. 2018", "ELMo biLM layer 1, nearest centroid F1 "
                             "(SemCor)", ELMO_WSD[1]],
                            ["Peters et al. 2018", "ELMo biLM layer 2", ELMO_WSD[2]],
                            ["Peters et al. 2018", "first-sense baseline", WSD_FIRST_SENSE],
                            ["Coenen et al. 2019", "BERT-base nearest centroid F1", BERT_WSD],
                            *[["Pilehvar & Camacho-Collados 2019", f"WiC same-sense pairs, "
                               f"{k}", v] for k, v in WIC.items()]],
                           "WordNet gives 2–3 examples a sense, so these centroids are noisier "
                           "than SemCor's: compare layers and models with each other.")
    return View(_findings_of(layers, "senses.md") + [summary, published_rows], charts,
                _measured(layers, _model))


def pos_summary_rows(layers: list[dict]) -> list[list]:
    """Each model's POS probe headline: model, majority class, layer 0, best layer, its index
    ('L3'), top layer, whether the best layer is below the top. The Benchmarks page and
    results/pos.md (bench/report.py) both show these rows."""
    rows = []
    for r in layers:
        p = r["pos"]
        acc = p["accuracy"]
        best = int(np.argmax(acc))
        rows.append([r["model"], _ci(p, "majority_baseline"), _ci(p, "accuracy", 0),
                     _ci(p, "accuracy", best), f"L{best}", _ci(p, "accuracy", len(acc) - 1),
                     "yes" if best < len(acc) - 1 else "no"])
    return rows


def _pos(results: Path) -> View:
    layers = load("layers.json", results) or []
    if not layers:
        return View()
    chart = Chart("Part-of-speech probe accuracy, held-out Brown", "accuracy",
                  _series(layers, "pos", "accuracy"),
                  lines={"majority class": layers[0]["pos"]["majority_baseline"]})
    p0 = layers[0]["pos"]
    summary = Table("Summary", ["model", "majority class", "layer 0", "best layer",
                                "best layer index", "top layer", "best below the top"],
                    pos_summary_rows(layers),
                    f"{p0['n_train']} training words, {p0['n_test']} held-out words, "
                    f"{p0['n_tags']} tags.")
    published_rows = Table("Published", ["source", "what", "value"],
                           [["Peters et al. 2018", "ELMo layer 1, PTB probe accuracy",
                             ELMO_POS[1]],
                            ["Peters et al. 2018", "ELMo layer 2", ELMO_POS[2]]])
    return View(_findings_of(layers, "pos.md") + [summary, published_rows], [chart],
                _measured(layers, _model))


# -- cloze (cloze.json, cloze_wordnet.json, cloze_replication.json) -------------------------

def _hits(r: dict) -> np.ndarray:
    return np.array([i["rank"] is not None and i["rank"] <= CLOZE_TOP_K for i in r["items"]])


def paired_gain(a: np.ndarray, b: np.ndarray) -> Est:
    """Mean of b − a per item with a 95% percentile bootstrap over items (bench/cloze.py's
    paired_gain: the same resamples, so the same interval)."""
    rng = np.random.default_rng(CLOZE_SEED)
    d = b.astype(float) - a.astype(float)
    boot = d[rng.integers(0, len(d), size=(CLOZE_BOOTSTRAP, len(d)))].mean(axis=1)
    return Est(float(d.mean()), float(np.percentile(boot, 2.5)),
               float(np.percentile(boot, 97.5)), digits=1, percent=True, signed=True)


def set_difference(a: np.ndarray, b: np.ndarray) -> Est:
    """Mean of b minus mean of a, two independent sets of items, each resampled on its own
    (bench/cloze.py's difference)."""
    rng = np.random.default_rng(CLOZE_SEED)
    boot = (b[rng.integers(0, len(b), size=(CLOZE_BOOTSTRAP, len(b)))].mean(axis=1)
            - a[rng.integers(0, len(a), size=(CLOZE_BOOTSTRAP, len(a)))].mean(axis=1))
    return Est(float(b.mean() - a.mean()), float(np.percentile(boot, 2.5)),
               float(np.percentile(boot, 97.5)), digits=1, percent=True, signed=True)


def _rate(x: dict) -> Est:
    return Est(x["rate"], x["ci"][0], x["ci"][1], digits=1, percent=True)


def _cloze(results: Path) -> View:
    first = load("cloze.json", results) or []
    if not first:
        return View()
    n = first[0]["top5"]["n"]
    main = Table(f"Everyday blanks ({n} items)", ["model", "how it fills", "top-1", "top-5"],
                 [[r["model"], r["method"], _rate(r["top1"]), _rate(r["top5"])]
                  for r in sorted(first, key=lambda r: -r["top5"]["rate"])],
                 "95% Wilson intervals over items.")
    tables = [main]
    by = {(r["model"], r["sides"]): r for r in first}
    for title, a, b, note in (
            ("What the right side adds", "left", "both", "Left context alone against both "
             "sides (GPT and ELMo), same items: the gain is paired per item."),
            ("What the fill-in-the-blank prompt adds", CLOZE_LEFT_POOL, "both",
             "Candidates from the left context only against those and the prompt's (GPT)."),
            ("What re-scoring adds", "both", CLOZE_RESCORED, "The masked-LM head's top 5 "
             "against its 30 likeliest words re-ranked by the sentence each makes.")):
        rows = [[m, _rate(by[(m, a)]["top5"]), _rate(by[(m, b)]["top5"]),
                 paired_gain(_hits(by[(m, a)]), _hits(by[(m, b)]))]
                for m in dict.fromkeys(r["model"] for r in first)
                if (m, a) in by and (m, b) in by]
        if rows:
            tables.append(Table(title, ["model", "before", "after", "gain"], rows,
                                note + " 95% bootstrap interval over items."))
    wordnet = load("cloze_wordnet.json", results)
    if wordnet:
        w = {(r["model"], r["sides"]): r for r in wordnet}
        rows = [[m, _rate(w[(m, "both")]["top5"]), _rate(w[(m, CLOZE_RESCORED)]["top5"]),
                 paired_gain(_hits(w[(m, "both")]), _hits(w[(m, CLOZE_RESCORED)]))]
                for m in dict.fromkeys(r["model"] for r in wordnet)
                if (m, "both") in w and (m, CLOZE_RESCORED) in w]
        if rows:
            tables.append(Table(
                f"Re-scoring on a second set ({wordnet[0]['top5']['n']} WordNet usage "
                "examples)", ["model", "before", "after", "gain"], rows,
                "Sentences the re-scoring was not chosen on, each with its own lemma blanked."))
    later = load("cloze_replication.json", results)
    if later:
        rows = [[r["model"], r["method"], _rate(by[(r["model"], r["sides"])]["top5"]),
                 _rate(r["top5"]), set_difference(_hits(by[(r["model"], r["sides"])]),
                                                  _hits(r))]
                for r in sorted(later, key=lambda r: -r["top5"]["rate"])
                if (r["model"], r["sides"]) in by]
        tables.append(Table(
            f"A replication on {later[0]['top5']['n']} items written later",
            ["model", "how it fills", "first set", "later set", "difference"], rows,
            "Top-5 on items written after every choice was made on the first set; the "
            "difference resamples each set on its own."))
    return View(tables, measured=_measured(first + (wordnet or []) + (later or []), _model))


# -- a stronger ELMo (elmo_distill.json) -----------------------------------------------------

def _elmo(results: Path) -> View:
    rows_in = load("elmo_distill.json", results) or []
    rows = []
    for r in rows_in:
        s, t = r["senses"], r.get("teacher")
        c = s["contrasts"]
        target = (f"{t['target']} ({t['weight']:g})" if t else
                  f"weight average of {r['soup']} runs" if r.get("soup") else "none")
        other = s.get("centroid_other_half", {}).get("top_minus_l0")
        rows.append([r["label"], target, r.get("words") or 0,
                     Est(r["ppl"][0], digits=1), Est(r["ppl"][1], digits=1),
                     s.get("n_lemmas_test", 60), _ci(s, "centroid", 0),
                     _ci(s, "centroid", len(s["centroid"]) - 1),
                     _contrast(c["centroid"]["top_minus_l0"]),
                     _ci(s, "pairs", len(s["pairs"]) - 1),
                     _contrast(c["pairs"]["top_minus_l0"]),
                     _contrast(other) if other else "—"])
    table = Table("Candidates", ["candidate", "teacher target (weight)", "words",
                                 "perplexity forward", "perplexity backward",
                                 "held-out lemmas", "centroid L0", "centroid top",
                                 "centroid top − L0", "pairs top", "pairs top − L0",
                                 "centroid top − L0, other lemmas"], rows,
                  "Word senses as in the Word senses tab (held-out lemmas, 95% bootstrap over "
                  "lemmas); perplexity on the trainer's held-out Brown split. The last column "
                  "checks the centroid contrast on lemmas no choice looked at.")
    return View([table], measured=_measured(rows_in, lambda r: r["label"]))


# -- speed, GPU -------------------------------------------------------------------------------

def _speed(results: Path) -> View:
    from bench.speed_report import speed_rows

    s = load("speed.json", results) or {}
    table = Table("Speed and memory against the targets",
                  ["measurement", "value", "target", "result"], speed_rows(s))
    parts = [dict(v, part=k) for k, v in s.items() if isinstance(v, dict)]
    return View([table], measured=_measured(parts, lambda p: p["part"]))


GPU_PATHS = (("hf", "plain HF loop"), ("hf_forward_only", "forward alone"),
             ("hf_forward_compiled", "forward alone, torch.compile"),
             ("engine_top_layer", "engine, top layer"),
             ("engine_top_layer_compiled", "engine, top layer, --compile"),
             ("encodings_top_layer", "encodings, top layer"),
             ("engine_all_layers", "engine, all layers"))


def _gpu(results: Path) -> View:
    g = load("gpu.json", results)
    if not g or "rows" not in g:
        return View()
    rows = []
    for r in g["rows"]:
        texts = r.get("texts", "sentences")
        for key, name in GPU_PATHS:
            if f"{key}_s" in r:
                mfu = r.get(f"{key}_mfu")
                rows.append([texts, r["dtype"], r["batch_size"], name,
                             Est(r[f"{key}_s"], digits=3, unit=" s"),
                             round(r[f"{key}_tokens_per_s"]),
                             Est(mfu, digits=1, percent=True) if mfu is not None else "n/a"])
    table = Table(f"{g['device']}, torch {g['torch']}: {g['sentences']:,} sentences",
                  ["texts", "dtype", "batch", "path", "seconds", "tokens/s", "MFU"], rows,
                  f"Model: {g['model']}. One timed pass each (a lent GPU gives minutes, not "
                  "repeats): compare rows of one run.")
    return View([table], measured=_measured([g]), note="\n".join(g.get("notes", [])))


# -- bad input, soak, corpus ------------------------------------------------------------------

def _bad_input(results: Path) -> View:
    b = load("bad_input.json", results)
    if not b:
        return View()
    cases = b["cases"]
    rows = [[c["case"], c["expected"], c["charts"], c["message"],
             "yes" if c["text_kept"] else "NO", "pass" if c["passed"] else "FAIL"]
            for c in cases]
    k, n = sum(c["passed"] for c in cases), len(cases)
    lo, hi = _wilson(k, n)
    return View([Table(f"{k} of {n} cases pass", ["case", "expected", "charts",
                                                  "first message", "text kept", "result"],
                       rows, f"{k} of {n}: {Est(k / n, lo, hi, digits=0, percent=True).text()} "
                       "(Wilson): the cases are the ones the issues listed, not a sample of all "
                       "bad input.")], measured=_measured([b]))


def _wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """95% Wilson interval of k successes in n trials (bench.analysis.cloze.wilson)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def _soak(results: Path) -> View:
    s = load("soak.json", results)
    if not s:
        return View()
    rows = [["sessions at once", s["sessions"]], ["minutes", s["minutes"]],
            ["pages visited", s["pages_visited"]], ["exceptions", s["exceptions"]],
            ["timeouts", s["timeouts"]], ["another session's text seen", s["leaks"]],
            ["typed text lost", s["text_lost"]], ["server log errors", s["server_log_errors"]],
            ["memory at start", Est(s["rss_start_mb"], digits=0, unit=" MB")],
            ["memory once warm", Est(s["rss_warm_mb"], digits=0, unit=" MB")],
            ["memory at the end", Est(s["rss_end_mb"], digits=0, unit=" MB")],
            ["memory, peak", Est(s["rss_peak_mb"], digits=0, unit=" MB")],
            ["memory growth after warm-up",
             Est(s["rss_growth_after_warmup"], digits=1, percent=True, signed=True)]]
    if s.get("idle_s"):
        rows += [[f"memory after {s['idle_s']:.0f} s idle, every session closed",
                  Est(s["rss_idle_mb"], digits=0, unit=" MB")],
                 ["memory idle vs once warm",
                  Est(s["rss_idle_vs_warm"], digits=1, percent=True, signed=True)]]
    if s.get("result_cache_mb"):
        rows.append(["the server's result-cache bound", Est(s["result_cache_mb"], digits=0,
                                                             unit=" MB")])
    series = s.get("rss_series") or []
    chart = Chart("Server memory over the soak", "resident memory (MB)", [Series(
        "server", "", [f"{t:.0f} s" for t, _ in series], [mb for _, mb in series],
        xs=[t for t, _ in series])], x_title="seconds since the server started")
    return View([Table("What the sessions saw", ["measurement", "value"], rows)],
                [chart] if series else [], _measured([s]))


def _corpus(results: Path) -> View:
    from bench.corpus_index import TARGETS

    c = load("corpus.json", results)
    if not c:
        return View()
    b, q = c["build"], c["queries"]
    rows = [["index build, all of Brown at every layer",
             Est(b["seconds"] / 60, digits=1, unit=" min"), f"≤ {TARGETS['build_min']:g} min"],
            ["bytes on disk per occurrence-layer", Est(b["bytes_per_row"], digits=0, unit=" B"),
             ""],
            ["embedding and writing, vs plain embed",
             Est(b["embed_write_vs_embed"], digits=2, unit="×"), f"≥ {TARGETS['vs_embed']}×"],
            ["the whole build, indexes included, vs plain embed",
             Est(b["vs_embed"], digits=2, unit="×"), f"≥ {TARGETS['vs_embed']}×"],
            [f"neighbour query, median ({q['queries']} queries)",
             Est(q["p50_ms"], *q["p50_ci"], digits=1, unit=" ms"),
             f"≤ {TARGETS['p50_ms']:g} ms"],
            ["neighbour query, 95th percentile",
             Est(q["p95_ms"], *q["p95_ci"], digits=1, unit=" ms"),
             f"≤ {TARGETS['p95_ms']:g} ms"],
            ["recall@10 against exact search",
             Est(q["recall_at_10"], *q["recall_ci"], digits=3), f"≥ {TARGETS['recall']}"]]
    if "queries_again" in c:
        a = c["queries_again"]
        rows.append(["the same queries again, median (files in the page cache)",
                     Est(a["p50_ms"], *a["p50_ci"], digits=1, unit=" ms"), ""])
    if "ray_2_actors" in c.get("ray", {}):
        rows.append(["Ray Data, 2 actors on 2 cores, per core vs the local engine on one",
                     Est(c["ray"]["per_core_ratio"], digits=2, unit="×"),
                     f"≥ {TARGETS['ray_per_core']}×"])
    f = c.get("faiss")
    if f:
        rows.append([f"FAISS on one layer ({f['rows']:,} vectors), query median",
                     Est(f["faiss_p50_ms"], digits=1, unit=" ms"), ""])
    note = (f"{b['model']}: {b['sentences']:,} sentences, {b['occurrences']:,} words, "
            f"{b['layers']} layers; index: {b.get('ann_index', '')}.")
    return View([Table("Corpus mode against the targets", ["measurement", "value", "target"],
                       rows, note)], measured=_measured([c]))


def _attribution(results: Path) -> View:
    from bench.attribution_views import faithfulness_view

    return faithfulness_view(load("attribution.json", results) or {})


def _attribution_speed(results: Path) -> View:
    from bench.attribution_views import speed_view

    return speed_view(load("attribution.json", results) or {})


def _components_speed(results: Path) -> View:
    from bench.components_speed import speed_view

    return speed_view(load("components_speed.json", results))


def _patching(results: Path) -> View:
    from bench.patching_views import speed_view

    return speed_view(load("patching.json", results))


def _head_pruning(results: Path) -> View:
    from bench.component_views import pruning_view

    return pruning_view(load("head_pruning.json", results))


def _causal_tracing(results: Path) -> View:
    from bench.patching_views import trace_view

    return trace_view(load("patching.json", results))


BUILDERS = {"summary": _summary, "senses": _senses, "geometry": _geometry, "pos": _pos,
            "cloze": _cloze, "elmo_distill": _elmo, "speed": _speed, "gpu": _gpu,
            "bad_input": _bad_input, "soak": _soak, "corpus": _corpus,
            "attribution": _attribution, "attribution_speed": _attribution_speed,
            "components_speed": _components_speed, "patching": _patching,
            "causal_tracing": _causal_tracing, "head_pruning": _head_pruning}


# -- markdown, for the docs -------------------------------------------------------------------

def cell_text(v) -> str:
    if isinstance(v, Est):
        return v.text()
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10_000:
        return f"{v:,}"
    return str(v).replace("|", "/").replace("\n", " ")


def markdown(table: Table, level: str = "###") -> str:
    out = [f"{level} {table.title}", ""]
    if table.note:
        out += [table.note, ""]
    out += ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    out += ["| " + " | ".join(cell_text(v) for v in row) + " |" for row in table.rows]
    return "\n".join(out)


# -- the Benchmarks page's data ----------------------------------------------------------------
# The app ships without bench/, so the page reads these views as data: results/benchmarks.json,
# written by `python -m bench.docs` beside the docs pages and read by app/benchmark_results.py.
# Cells go with their text already formatted, so the app repeats no formatting rule.

def _cell(v):
    if isinstance(v, Est):
        return {"shown": None if v.value is None else v.shown(v.value), "interval": v.interval(),
                "text": v.text(), "digits": v.digits, "percent": v.percent,
                "signed": v.signed, "unit": v.unit}
    return v


def _table_data(t: Table) -> dict:
    return {"title": t.title, "columns": t.columns, "note": t.note,
            "rows": [[_cell(v) for v in row] for row in t.rows],
            "texts": [[cell_text(v) for v in row] for row in t.rows]}


def _chart_data(c: Chart) -> dict:
    return {"title": c.title, "y_title": c.y_title, "x_title": c.x_title,
            "series": [{"model": s.model, "names": s.names, "x": s.x, "y": s.y,
                        "lo": s.lo, "hi": s.hi} for s in c.series],
            "references": [vars(r) for r in c.references], "lines": c.lines}


def page_data(results: Path = RESULTS) -> dict:
    """The findings table and each available topic with its view, as plain JSON."""
    layers = load("layers.json", results)
    topics = []
    for t in available(results):
        v = view(t.key, results)
        topics.append({"key": t.key, "title": t.title, "what": t.what, "data": list(t.data),
                       "command": t.command, "note": v.note, "measured": v.measured,
                       "tables": [_table_data(x) for x in v.tables],
                       "charts": [_chart_data(c) for c in v.charts]})
    return {"findings": _table_data(findings_table(layers)) if layers else None,
            "topics": topics}


def page_json(results: Path = RESULTS) -> str:
    """numpy scalars as Python numbers; NaN kept (Python's json reads it back)."""
    return json.dumps(page_data(results), indent=1, ensure_ascii=False,
                      default=lambda o: o.item() if isinstance(o, np.generic) else o) + "\n"
