"""How far to trust each attribution map, across a held-out set of sentences (issue 54, item 3).

    python -m bench --only attribution [--quick] [--models id,id]

bench/sample/attribution_sentences.txt holds everyday sentences written for this benchmark
(not the app's presets), one [MASK] each. A masked LM explains the blank; a decoder and ELMo
explain the next word of the text before it. The target is the model's own top word there
(the first alphabetic one of its top 10), so every map explains a prediction the model makes.

Per sentence and model, on one Objective (engine.attribution): gradient × input, integrated
gradients and occlusion as the engine computes them, plus two maps that do not know the
target, scored the same way: the last layer's attention (averaged over heads, the explained
position's row, summed onto words) and the attention rollout (engine.attribution.rollout).
Each map's ERASER comprehensiveness and sufficiency (engine.attribution.faithfulness.measure,
DeYoung et al. 2020) and the random-order baseline; and Kendall's τ of each map with
occlusion over the scored words (Jain & Wallace 2019, sec. 3: attention against
leave-one-out). Means over sentences with 95% percentile-bootstrap intervals
(engine.analysis.bootstrap, the sentence as unit). Speed: bench/attribution_speed.py.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from engine.analysis.bootstrap import N_RESAMPLES, SEED, interval, ratio_replicates
from engine.analysis.bootstrap import resample_counts

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = ROOT / "bench" / "sample" / "attribution_sentences.txt"
MAPS = ("gradxinput", "ig", "occlusion", "attention", "rollout")
GRADIENT_MAPS = ("gradxinput", "ig", "occlusion")
# (model, kind, sentences in a full run, IG's largest step count). SmolLM2's IG stops at 32
# steps: its ladder to 256 takes a minute a sentence on 2 cores; the gaps are recorded.
MODELS = (("minilm-l6-mlm", "masked", 40, None), ("bert-brown-mlm", "masked", 40, None),
          ("gpt-brown", "next", 40, None), ("elmo-brown", "next", 40, None),
          ("smollm2-135m", "next", 20, 32))
QUICK = 3


# -- pure summaries -----------------------------------------------------------------------

def mean_ci(values, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> dict:
    """Mean of the finite values with a 95% percentile-bootstrap interval over them (the
    sentence as unit); n: how many were finite. None values and NaN are left out."""
    x = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return {"mean": None, "ci": None, "n": 0}
    reps = ratio_replicates(x, np.ones(len(x)), resample_counts(len(x), n_resamples, seed))
    lo, hi = interval(reps)
    return {"mean": float(x.mean()), "ci": [float(lo), float(hi)], "n": int(len(x))}


def kendall(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's τ-b of two score vectors; NaN when either is constant (no ranking)."""
    from scipy.stats import kendalltau

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(kendalltau(a, b).statistic)


def row_on_words(row: np.ndarray, token_to_word: np.ndarray, n_words: int) -> np.ndarray:
    """One attention row over tokens [T] summed onto words (special tokens, -1, left out)."""
    out = np.zeros(n_words, np.float64)
    keep = token_to_word >= 0
    np.add.at(out, token_to_word[keep], row[keep])
    return out


def summarise(sentences: list[dict]) -> dict:
    """Per map: mean comprehensiveness and sufficiency, the random baselines, the map minus
    random (paired per sentence), and τ with occlusion, each with its interval."""
    out = {}
    for m in MAPS:
        rows = [s["maps"][m] for s in sentences if m in s["maps"]]
        if not rows:
            continue
        comp = np.array([r["comprehensiveness"] for r in rows])
        suff = np.array([r["sufficiency"] for r in rows])
        rc = np.array([r["random_comprehensiveness"] for r in rows])
        rs = np.array([r["random_sufficiency"] for r in rows])
        out[m] = {"comprehensiveness": mean_ci(comp), "sufficiency": mean_ci(suff),
                  "random_comprehensiveness": mean_ci(rc), "random_sufficiency": mean_ci(rs),
                  # above random: comprehensiveness higher, sufficiency lower than chance
                  "comprehensiveness_minus_random": mean_ci(comp - rc),
                  "random_minus_sufficiency": mean_ci(rs - suff)}
        if m != "occlusion":
            out[m]["tau_with_occlusion"] = mean_ci([s["tau"].get(m) for s in sentences])
    return out


# -- measuring ----------------------------------------------------------------------------

def load_sentences(path: Path = SENTENCES) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]


def text_for(sentence: str, kind: str) -> str:
    return sentence if kind == "masked" else sentence.split("[MASK]")[0].rstrip()


def top_target(engine, model_id: str, text: str, kind: str) -> str | None:
    pred = (engine.predict_masked(model_id, text, top_k=10) if kind == "masked"
            else engine.predict_next(model_id, text, top_k=10))
    for c in pred.candidates:
        word = c.token.strip()
        if word.isalpha():
            return word
    return None


def attention_maps(adapter, wt, kind: str) -> dict[str, np.ndarray]:
    """The two target-blind maps onto words: last layer's attention averaged over heads and
    the rollout, both at the row the prediction is read from."""
    from engine.attribution.rollout import rollout_scores

    roll = rollout_scores(adapter, wt, kind)
    enc = adapter.encode([wt], attentions=True)[0]
    row = enc.attentions[-1].astype(np.float64).mean(axis=0)[roll.position]    # [T]
    return {"attention": row_on_words(row, enc.token_to_word, len(enc.words)),
            "rollout": roll.scores.astype(np.float64)}


def one_sentence(adapter, wt, target: str, kind: str, max_steps: int | None) -> dict:
    from engine.attribution import faithfulness, methods
    from engine.attribution.explain import _pooled, objective_of

    obj = objective_of(adapter, wt, target, None, kind)
    f_x = float(methods.f_of(obj, obj.x)[0])
    # a step count given runs exactly that many (None: the engine's ladder to 256)
    ig = methods.integrated_gradients(obj, max_steps)
    by_word = methods.occlusion(obj, np.searchsorted(obj.scored_words, obj.slot_words))
    occl = np.zeros(len(obj.words))
    occl[obj.scored_words] = by_word
    maps = {"gradxinput": _pooled(obj, methods.gradxinput(obj))[1],
            "ig": _pooled(obj, ig.scores)[1], "occlusion": occl}
    if adapter.info.family in ("bert", "gpt"):
        maps.update(attention_maps(adapter, wt, kind))
    scored = obj.scored_words
    out = {"target": target, "f": f_x, "n_words": int(len(scored)),
           "ig": {"steps": ig.steps, "gap": ig.gap, "converged": ig.converged,
                  "f_minus_baseline": f_x - ig.f_baseline}, "maps": {}, "tau": {}}
    for name, scores in maps.items():
        fa = faithfulness.measure(obj, f_x, np.asarray(scores, np.float64))
        out["maps"][name] = {k: getattr(fa, k) for k in (
            "comprehensiveness", "sufficiency", "random_comprehensiveness",
            "random_sufficiency")}
        if name != "occlusion":
            out["tau"][name] = kendall(np.asarray(scores)[scored], occl[scored])
    return out


def run_model(engine, model_id: str, kind: str, sentences: list[str],
              max_steps: int | None, log=print) -> dict:
    from engine.errors import EngineError
    from engine.text import to_word_text

    adapter = engine.adapter(model_id, progress=False)
    start, per, skipped = time.perf_counter(), [], []
    for i, sentence in enumerate(sentences, 1):
        text = text_for(sentence, kind)
        try:
            target = top_target(engine, model_id, text, kind)
            if target is None:
                raise EngineError("no alphabetic word among its top 10")
            per.append({"text": text, **one_sentence(adapter, to_word_text(text), target,
                                                     kind, max_steps)})
        except EngineError as err:
            skipped.append({"text": text, "why": str(err)})
        if i % 10 == 0:
            log(f"attribution {model_id}: {i}/{len(sentences)}")
    ig = [s["ig"] for s in per]
    return {"model": model_id, "family": adapter.info.family, "kind": kind,
            "n_sentences": len(per), "skipped": skipped,
            "ig_steps_cap": max_steps, "ig_converged": sum(g["converged"] for g in ig),
            "ig_relative_gap": mean_ci([g["gap"] / max(abs(g["f_minus_baseline"]), 1e-9)
                                        for g in ig]),
            "summary": summarise(per), "sentences": per,
            "seconds": round(time.perf_counter() - start, 1)}


def run_faithfulness(models: list[str] | None = None, quick: bool = False,
                     log=print) -> list[dict]:
    from engine.api import Engine
    from engine.errors import EngineError

    engine = Engine(device="cpu")
    sentences = load_sentences()
    out = []
    for mid, kind, n, max_steps in MODELS:
        if models and mid not in models:
            continue
        chosen = sentences[:QUICK if quick else n]
        log(f"attribution {mid}: {len(chosen)} sentences")
        try:
            out.append(run_model(engine, mid, kind, chosen, max_steps, log))
        except EngineError as err:
            log(f"attribution {mid}: skipped: {err}")
            continue
        log(f"attribution {mid}: done in {out[-1]['seconds']:.0f} s")
    return out


def write(results_dir: Path, faithfulness: list[dict] | None = None,
          speed: dict | None = None, memory: dict | None = None) -> dict:
    """results/attribution.json: {"faithfulness": [per model], "speed": {...}, "memory":
    {...}}; a part not given keeps what the file holds (faithfulness merged by model)."""
    from bench.store import merge

    path = results_dir / "attribution.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    data = dict(old)
    if faithfulness is not None:
        tmp = results_dir / "tmp" / "attribution_faithfulness_old.json"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(old.get("faithfulness", [])))
        data["faithfulness"] = merge(tmp, faithfulness, lambda r: r["model"])
    if speed is not None:
        data["speed"] = speed
    if memory is not None:
        data["memory"] = memory
    path.write_text(json.dumps(data, indent=1))
    return data


def report() -> str:
    """results/attribution.md: the method, then the tables of bench/views.py's view."""
    from bench import views

    faith = views.view("attribution", ROOT / "results")
    speed = views.view("attribution_speed", ROOT / "results")
    out = ["# Attribution: faithfulness across held-out sentences, and speed", "",
           __doc__.split("\n\n", 2)[2].strip(), "",
           "Measured again by `python -m bench --only attribution` (about 10 minutes on 2 "
           "cores).", ""]
    for table in faith.tables + speed.tables:
        out += [views.markdown(table, "##"), ""]
    out += [f"Measured {m}." for m in dict.fromkeys(faith.measured + speed.measured)]
    return "\n".join(out).rstrip() + "\n"
