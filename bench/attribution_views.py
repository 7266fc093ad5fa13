"""The views of results/attribution.json (bench/attribution.py, bench/attribution_speed.py) for
the docs and the Benchmarks page: faithfulness per method and model, attention against
occlusion (Jain & Wallace 2019), and the speeds against their targets. Light: json and numpy."""
from __future__ import annotations

from bench.view_types import Est, Table, View, _measured

METHOD_NAMES = {"gradxinput": "gradient × input", "ig": "integrated gradients",
                "occlusion": "occlusion", "attention": "last-layer attention",
                "rollout": "attention rollout"}
# Jain & Wallace 2019 call agreement weak where Kendall τ with leave-one-out importance is
# small; here "weak" is a mean τ whose whole 95% interval lies below WEAK_TAU
WEAK_TAU = 0.5


def _est(s: dict | None, digits: int = 2, signed: bool = False) -> Est | str:
    if not s or s.get("mean") is None:
        return "n/a"
    lo, hi = s["ci"] if s.get("ci") else (None, None)
    return Est(s["mean"], lo, hi, digits=digits, signed=signed)


def _above_zero(s: dict | None) -> bool | None:
    if not s or not s.get("ci"):
        return None
    return s["ci"][0] > 0


def beats_random(m: dict) -> str:
    """Whether the map beats a random order: comprehensiveness above random's and sufficiency
    below random's, each judged by the paired difference's interval excluding 0."""
    comp = _above_zero(m.get("comprehensiveness_minus_random"))
    suff = _above_zero(m.get("random_minus_sufficiency"))
    if comp and suff:
        return "yes, both"
    if comp:
        return "comprehensiveness only"
    if suff:
        return "sufficiency only"
    return "no"


def weak(tau: dict) -> str:
    """Jain & Wallace's finding on one map: 'yes' when the whole interval of its mean τ with
    occlusion lies below WEAK_TAU ('opposite' too when it lies below 0), 'no' when above it,
    else 'unclear'."""
    if not tau or not tau.get("ci"):
        return "n/a"
    lo, hi = tau["ci"]
    if hi < 0:
        return "yes (opposite ranking)"
    return "yes" if hi < WEAK_TAU else "no" if lo > WEAK_TAU else "unclear"


def faithfulness_view(data: dict) -> View:
    models = data.get("faithfulness") or []
    if not models:
        return View()
    rows, tau_rows = [], []
    for r in models:
        for method, m in r["summary"].items():
            rows.append([r["model"], r["kind"], METHOD_NAMES[method],
                         m["comprehensiveness"]["n"], _est(m["comprehensiveness"]),
                         _est(m["random_comprehensiveness"]), _est(m["sufficiency"]),
                         _est(m["random_sufficiency"]), beats_random(m)])
        tau = {k: r["summary"][k].get("tau_with_occlusion") for k in r["summary"]
               if k != "occlusion"}
        if "attention" in tau:
            tau_rows.append([r["model"], tau["attention"]["n"], _est(tau["attention"]),
                             weak(tau["attention"]), _est(tau["rollout"]),
                             weak(tau["rollout"]), _est(tau.get("gradxinput")),
                             _est(tau.get("ig"))])
    faith = Table(
        "Faithfulness per method and model", ["model", "explains", "map", "sentences",
                                              "comprehensiveness", "random order (comp.)",
                                              "sufficiency", "random order (suff.)",
                                              "beats random?"], rows,
        "Means over sentences of ERASER's AOPC (top 10/20/50% of the words), in nats of f; "
        "the random order is 5 random rankings of the same words. Comprehensiveness: higher "
        "is better; sufficiency: lower is better. 'beats random': the paired difference's 95% "
        "interval excludes 0. Attention and rollout do not know the target.")
    tables = [faith]
    if tau_rows:
        tables.append(Table(
            "Attention against occlusion (Jain & Wallace 2019)",
            ["model", "sentences", "attention τ", "weak?", "rollout τ", "weak? ",
             "gradient × input τ", "integrated gradients τ"], tau_rows,
            "Kendall τ per sentence between each map's word scores and occlusion's (the "
            "leave-one-out importance Jain & Wallace compare with), mean and 95% interval. "
            f"Jain & Wallace found attention's agreement weak; 'weak?' is yes (their finding "
            f"reproduced) when the whole interval lies below τ = {WEAK_TAU}, no when above, "
            "else unclear. The gradient columns show what agreement between two attribution "
            "methods looks like here."))
    ig = [[r["model"], r["ig_steps_cap"] or "32 → 256",
           f"{r['ig_converged']}/{r['n_sentences']}", _share(r["ig_relative_gap"])]
          for r in models]
    tables.append(Table("Integrated gradients' completeness on these sentences",
                        ["model", "steps", "converged (gap ≤ 1%)",
                         "gap, share of f − f(baseline)"],
                        ig, "The gap is |Σ attributions − (f − f(baseline))|. SmolLM2's IG "
                        "stops at 32 steps here (its ladder to 256 steps takes 20-25 s a "
                        "sentence on 2 cores, and on the sentences tried by hand it did not "
                        "close the gap either), so its gap is reported, not closed, and its "
                        "faithfulness row is that of an unconverged IG."))
    return View(tables, measured=_measured(models, lambda r: r["model"]))


def _share(s: dict | None) -> Est | str:
    if not s or s.get("mean") is None:
        return "n/a"
    return Est(s["mean"], *s["ci"], digits=2, percent=True)


def _time(s: dict, unit: str = " s", digits: int = 2) -> Est:
    return Est(s["median"], *s["ci"], digits=digits, unit=unit)


def _met(value: float, target: float, below: bool = True) -> str:
    return "yes" if (value <= target if below else value >= target) else "no"


def memory_table(m: dict) -> Table:
    """Integrated gradients' peak memory on the long sentence beside a plain forward's."""
    ig, plain, ratio = m["ig"], m["plain"], m["peak_over_plain"]
    rows = [[f"integrated gradients, {m['steps']} steps (the CLI's attribute call, "
             "faithfulness included)", f"{ig['seconds']:.0f} s", f"{ig['peak_mb']:.0f} MB",
             f"{ratio:.2f}×", f"≤ {m['memory_target']:g}×", _met(ratio, m["memory_target"])],
            ["a plain forward pass, same input", f"{plain['seconds']:.2f} s",
             f"{plain['peak_mb']:.0f} MB", "1×", "", ""]]
    return Table(
        f"Memory: integrated gradients on a {m['n_words']}-word sentence",
        ["what", "time", "peak memory", "peak / plain forward", "target", "met?"], rows,
        f"{m['model']} filling the blank at word {m['blank_word']} ({m['tokens']} tokens, f "
        "read at the blank and the 32 tokens after it), one run each in a fresh process, the "
        "resident memory sampled every 2 ms with the model loaded; "
        f"{m['rows_per_gradient_pass']} row(s) a gradient pass and "
        f"{m['rows_per_forward_pass']} a forward pass, by memory (engine/memory.py). The "
        f"whole process's peaks, the loading included: {ig['process_peak_mb']:.0f} MB and "
        f"{plain['process_peak_mb']:.0f} MB.")


def speed_view(data: dict) -> View:
    sp, mem = data.get("speed"), data.get("memory")
    if not sp:
        return View([memory_table(mem)], measured=_measured([mem])) if mem else View()
    targets, rows, captum = sp["targets"], [], []
    for a in sp["attribution"]:
        name = f"{a['model']} ({a['kind']})"
        for m in ("gradxinput", "ig", "occlusion"):
            label = METHOD_NAMES[m] + (f", {a['steps']} steps" if m == "ig" else "")
            rows.append([name, label + ", with faithfulness (the app's call)", _time(a[m]),
                         f"≤ {targets[m]:g} s", _met(a[m]["median"], targets[m])])
            rows.append([name, label + ", the method alone", _time(a[f"{m}_alone"]),
                         f"≤ {targets[m]:g} s", _met(a[f"{m}_alone"]["median"], targets[m])])
        ms = {**a["warm"], "median": 1000 * a["warm"]["median"],
              "ci": [1000 * x for x in a["warm"]["ci"]]}
        rows.append([name, "warm repeat (the Engine's cache)", _time(ms, " ms"),
                     f"≤ {1000 * targets['warm']:g} ms",
                     _met(a["warm"]["median"], targets["warm"])])
        captum.append([a["model"], _time(a["ig_alone"]), _time(a["captum_lig"]),
                       Est(a["lig_vs_ours"], digits=2, unit="×"), "≥ 1×",
                       f"{a['max_abs_difference']:.1e}", "≤ 1e-4"])
    g, gt = sp["generation"], sp["generation_targets"]

    def rate(key: str) -> Est:
        """tokens/s from the median time; the interval from the time's interval."""
        x = g[key]
        n = x["tokens_per_s"] * x["median"]
        return Est(x["tokens_per_s"], n / x["ci"][1], n / x["ci"][0], digits=1,
                   unit=" tokens/s")

    gen = [["ours (key/value cache, no logit lens)",
            rate("ours"),
            f"≥ {gt['tokens_per_s']:g} tokens/s",
            _met(g["ours"]["tokens_per_s"], gt["tokens_per_s"], below=False)],
           ["ours with the logit lens (the Generation page's call)",
            rate("ours_logit_lens"), "", ""],
           ["model.generate(do_sample=False)",
            rate("model_generate"), "", ""],
           ["ours / model.generate", Est(g["ours_vs_generate"], digits=2, unit="×"),
            f"≥ {gt['vs_generate']:g}×", _met(g["ours_vs_generate"], gt["vs_generate"],
                                              below=False)],
           ["the same tokens as model.generate", "yes" if g["same_tokens"] else "no", "yes",
            "yes" if g["same_tokens"] else "no"]]
    return View([
        Table("One attribution against the targets", ["model", "what", "median", "target",
                                                      "met?"], rows,
              f"“{sp['attribution'][0]['text']}” (20 words before the blank; a decoder reads "
              f"them and explains the next word). Median of {sp['attribution'][0]['runs']} "
              "runs, 95% bootstrap interval of the median; the app's call includes ERASER's "
              "faithfulness (36 more forward passes)."),
        Table("Integrated gradients beside Captum's LayerIntegratedGradients",
              ["model", "ours, IG alone", "Captum LIG", "Captum / ours", "target",
               "largest difference of attributions", "target "], captum,
              "Same model, ids, baseline, target and 32 Gauss-Legendre steps, in the same "
              "run; above 1× ours is faster."),
        Table(f"Generation: {g['model']}, {g['tokens']} tokens greedy", ["", "value",
                                                                          "target", "met?"],
              gen, f"Median of {g['runs']} runs each, same model, prompt and run.")]
        + ([memory_table(mem)] if mem else []),
        measured=_measured([sp] + ([mem] if mem else [])))
