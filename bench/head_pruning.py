"""Head pruning (issue 55): Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than
One?", on two bundled models, and the speed of the component tools.

    python -m bench.head_pruning [--quick] [--models id,id]
    python -m bench.head_pruning --report      # the Markdown again from the JSON

Items: the everyday cloze sets (assets/cloze/; bench/analysis/cloze.py). A masked LM
(minilm-l6-mlm) fills the blank; a decoder (smollm2-135m) predicts the next word of the text
before the blank (items with at least three words before it). A hit: the top-1 word is an
accepted answer (bench.analysis.cloze.hit_rank), the model's own top-1 as the Engine gives it.

Importance (Michel et al. §4.1): I_h = Σ over the tuning items (everyday.tsv) of |∂f/∂ξ_h|,
f = log p(first accepted answer), ξ_h a gate on head h's output
(engine.components.importance.gate_gradient), each layer's scores divided by their ℓ2 norm.
Pruning: the fraction p of all heads with the lowest I_h zeroed
(engine.components.ablation), p = 0, 0.1, …, 0.9, top-1 accuracy on the held-out items
(everyday_replication.tsv); the baseline prunes in random orders (accuracy averaged over the
orders per item). Single heads (§3.1): accuracy with each head alone removed (every head in
a full run; a seeded sample of 12 with --quick). Intervals: 95% percentile bootstrap over
items (engine.analysis.bootstrap); the pruned-vs-random and single-head changes are paired
per item.

Speed, SmolLM2 on one 12-token text: a prediction with one head knocked out, every head's
importance both ways (engine.components.importance.head_importance), the gradient estimate
alone; medians of several runs (this machine's other load shows in the spread).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from bench.analysis.cloze import ITEMS, REPLICATION, hit_rank, load_items
from bench.attribution import mean_ci

ROOT = Path(__file__).resolve().parent.parent
MODELS = (("minilm-l6-mlm", "masked"), ("smollm2-135m", "next"))
FRACTIONS = tuple(round(0.1 * i, 1) for i in range(10))
# single: how many heads are removed one at a time (None: every head)
SIZES = {"full": {"tuning": None, "orders": 3, "single": None},
         "quick": {"tuning": 32, "orders": 2, "single": 12}}
SEED = 0
BATCH = 32
SPEED_MODEL = "smollm2-135m"
SPEED_TEXT = "After the long meeting she walked home through the quiet park and"
SPEED_TARGETS = {"ablated_prediction_s": 0.5, "all_heads_importance_s": 30.0,
                 "gradient_estimate_s": 1.0}


def cloze_items(path: Path, kind: str) -> list[tuple[str, tuple[str, ...]]]:
    """(text, accepted answers): the sentence with its [MASK], or for a decoder the words
    before the blank (at least three)."""
    out = []
    for item in load_items(path):
        if kind == "masked":
            out.append((item.sentence, item.answers))
            continue
        before = item.sentence[:item.sentence.index("[MASK]")].rstrip()
        if len(before.split()) >= 3:
            out.append((before, item.answers))
    return out


def tuning_importance(adapter, kind: str, items, log) -> tuple[np.ndarray, int]:
    """Σ |∂f/∂ξ_h| over the items, each layer divided by its ℓ2 norm; and how many items
    counted (a word the vocabulary cannot spell is skipped)."""
    from engine.attribution.explain import objective_of
    from engine.components.ablation import sites
    from engine.components.importance import gate_gradient
    from engine.errors import EngineError
    from engine.text import to_word_text

    s = sites(adapter)
    total, used = np.zeros((s.n_layers, s.n_heads)), 0
    for n, (text, answers) in enumerate(items, 1):
        try:
            obj = objective_of(adapter, to_word_text(text), answers[0], None, kind)
        except EngineError:
            continue
        total += gate_gradient(s, obj)
        used += 1
        if n % 20 == 0:
            log(f"  importance: {n}/{len(items)} items")
    norm = np.linalg.norm(total, axis=1, keepdims=True)
    return total / np.where(norm > 0, norm, 1), used


def encoded(adapter, kind: str, items):
    """The items as the adapter reads them: token ids and the position whose top-1 is read."""
    from engine.families.hf import tokens
    from engine.text import WordText, to_word_text

    out = []
    for text, _ in items:
        wt = to_word_text(text)
        if kind == "masked":
            t = tokens.tokenize(adapter.tokenizer, adapter.spell_mask(wt), adapter.max_tokens)
            at = t.input_ids.index(adapter.tokenizer.mask_token_id)
        else:
            wt = WordText(wt.text.rstrip(), wt.words, wt.spans)
            t = tokens.tokenize(adapter.tokenizer, wt, adapter.max_tokens)
            at = len(t.input_ids) - 1
        out.append((t, at))
    return out


def top1_words(adapter, kind: str, batch, ablation=None) -> list[str]:
    """Each item's top-1 word (as Engine.predict_masked / predict_next name it), right-padded
    batches of BATCH, with `ablation`'s heads zeroed."""
    import contextlib

    import torch

    from engine.components.ablation import ablated
    from engine.families.gpt import _word_piece
    from engine.families.hf import forward, tokens

    device = str(next(adapter.model.parameters()).device)
    words = []
    with ablated(adapter, ablation) if ablation else contextlib.nullcontext(), \
            torch.inference_mode():
        for start in range(0, len(batch), BATCH):
            part = batch[start:start + BATCH]
            ids, mask = forward.pad_batch([t for t, _ in part], adapter.pad_id, device)
            at = torch.tensor([a for _, a in part], device=device)
            logits = adapter.model(input_ids=ids, attention_mask=mask).logits
            for row in logits[torch.arange(len(part)), at]:
                token = tokens.top_k_candidates(row, adapter.tokenizer, 1)[0].token
                words.append(_word_piece(token) if kind == "next" else token)
    return words


def hits(words: list[str], items) -> np.ndarray:
    return np.array([hit_rank([w], answers) == 1 for w, (_, answers) in zip(words, items)],
                    dtype=float)


def pruned(adapter, order: list[tuple[int, int]], fraction: float):
    from engine.components.ablation import Ablation, sites

    k = int(round(fraction * len(order)))
    return Ablation(frozenset(order[:k]), frozenset(), sites(adapter).n_heads) if k else None


def pruning_curve(adapter, kind: str, heldout, importance: np.ndarray, orders: int, log):
    """Accuracy against the fraction pruned, in importance order and in random orders."""
    batch = encoded(adapter, kind, heldout)
    n_layers, n_heads = importance.shape
    heads = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    by_importance = sorted(heads, key=lambda lh: importance[lh])
    rng = np.random.default_rng(SEED)
    randoms = [[heads[i] for i in rng.permutation(len(heads))] for _ in range(orders)]
    curve = []
    for p in FRACTIONS:
        ours = hits(top1_words(adapter, kind, batch, pruned(adapter, by_importance, p)), heldout)
        rand = np.mean([hits(top1_words(adapter, kind, batch, pruned(adapter, o, p)), heldout)
                        for o in randoms], axis=0) if p else ours
        curve.append({"fraction": p, "heads_pruned": int(round(p * len(heads))),
                      "importance_order": mean_ci(ours), "random_order": mean_ci(rand),
                      "importance_minus_random": mean_ci(ours - rand)})
        log(f"  pruned {p:.0%}: accuracy {ours.mean():.3f} (random order {rand.mean():.3f})")
    return curve, batch


def single_heads(adapter, kind: str, heldout, batch, count: int | None, log) -> dict:
    """Accuracy change with each head alone removed (all heads, or a seeded sample)."""
    from engine.components.ablation import Ablation, sites

    s = sites(adapter)
    heads = [(l, h) for l in range(s.n_layers) for h in range(s.n_heads)]
    if count is not None and count < len(heads):
        rng = np.random.default_rng(SEED)
        heads = [heads[i] for i in sorted(rng.choice(len(heads), count, replace=False))]
    base = hits(top1_words(adapter, kind, batch), heldout)
    changes = []
    for l, h in heads:
        one = Ablation(frozenset({(l, h)}), frozenset(), s.n_heads)
        d = mean_ci(hits(top1_words(adapter, kind, batch, one), heldout) - base)
        changes.append({"head": f"{l + 1}.{h + 1}", **d})
    significant = [c for c in changes if c["ci"] and (c["ci"][0] > 0 or c["ci"][1] < 0)]
    log(f"  single heads: {len(significant)} of {len(changes)} change accuracy significantly")
    return {"n_heads_tested": len(changes), "n_significant": len(significant),
            "largest_drop": min(c["mean"] for c in changes),
            "largest_gain": max(c["mean"] for c in changes), "heads": changes}


def run_model(engine, model_id: str, kind: str, size: dict, log) -> dict:
    start = time.perf_counter()
    adapter = engine.adapter(model_id, progress=False)
    tuning = cloze_items(ITEMS, kind)[:size["tuning"]]
    heldout = cloze_items(REPLICATION, kind)
    log(f"head pruning {model_id}: {len(tuning)} tuning items, {len(heldout)} held out")
    importance, used = tuning_importance(adapter, kind, tuning, log)
    curve, batch = pruning_curve(adapter, kind, heldout, importance, size["orders"], log)
    # the batched top-1 is the Engine's own: checked on the first items, unpruned
    ask = engine.predict_masked if kind == "masked" else engine.predict_next
    check = [ask(model_id, t, top_k=1).candidates[0].token for t, _ in heldout[:8]]
    agrees = check == top1_words(adapter, kind, batch[:8])
    return {"model": model_id, "kind": kind, "n_tuning": used, "n_heldout": len(heldout),
            "random_orders": size["orders"], "batched_top1_is_the_engines": agrees,
            "importance": np.round(importance, 5).tolist(), "curve": curve,
            "single_heads": single_heads(adapter, kind, heldout, batch, size["single"], log),
            "seconds": round(time.perf_counter() - start, 1)}


def median_time(fn, runs: int) -> dict:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return {"median": statistics.median(times), "runs": times}


def speed(engine, quick: bool, log) -> dict:
    from engine.components import importance
    from engine.components.ablation import sites
    from engine.attribution.explain import objective_of
    from engine.text import to_word_text

    adapter = engine.adapter(SPEED_MODEL, progress=False)
    wt = to_word_text(SPEED_TEXT)
    n_tokens = len(adapter.tokenizer(SPEED_TEXT)["input_ids"])
    engine.predict_next(SPEED_MODEL, SPEED_TEXT, ablate="15.4")            # warm
    obj = objective_of(adapter, wt, "the", None, "next")
    s = sites(adapter)
    out = {"model": SPEED_MODEL, "text": SPEED_TEXT, "n_tokens": n_tokens, "target": "the",
           "targets_s": SPEED_TARGETS,
           "plain_prediction_s": median_time(lambda: engine.predict_next(
               SPEED_MODEL, SPEED_TEXT), 5),
           "ablated_prediction_s": median_time(lambda: engine.predict_next(
               SPEED_MODEL, SPEED_TEXT, ablate="15.4"), 5),
           "gradient_estimate_s": median_time(lambda: importance.gate_gradient(s, obj),
                                              5),
           "all_heads_importance_s": median_time(lambda: importance.head_importance(
               adapter, wt, "the", None, "next"), 1 if quick else 3)}
    for key in SPEED_TARGETS:
        log(f"  {key}: {out[key]['median']:.2f} s (target {SPEED_TARGETS[key]} s)")
    return out


def report(data: dict) -> str:
    from bench.attribution_speed import median_ci

    """results/head_pruning.md from the JSON."""
    out = ["# Head pruning (Michel et al. 2019) and the speed of the component tools", "",
           __doc__.split("\n\n", 2)[2].strip(), ""]
    for m in data["models"]:
        out += [f"## {m['model']} ({m['kind']}): {m['n_tuning']} tuning items, "
                f"{m['n_heldout']} held out, {m['random_orders']} random orders", "",
                "| pruned | heads | top-1, importance order | top-1, random order | "
                "importance − random |", "|---|---|---|---|---|"]
        for c in m["curve"]:
            cells = [f"{c[k]['mean']:.3f} [{c[k]['ci'][0]:.3f}, {c[k]['ci'][1]:.3f}]"
                     for k in ("importance_order", "random_order", "importance_minus_random")]
            out.append(f"| {c['fraction']:.0%} | {c['heads_pruned']} | " + " | ".join(cells) + " |")
        sh = m["single_heads"]
        out += ["", f"Single heads removed one at a time: {sh['n_significant']} of "
                f"{sh['n_heads_tested']} change top-1 accuracy with a 95% interval that excludes "
                f"0 (largest drop {sh['largest_drop']:.3f}, largest gain "
                f"{sh['largest_gain']:.3f}).", ""]
    sp = data.get("speed")
    if sp:
        # the ratio to a plain prediction measured in the same run: the cost of the tool
        # itself, which the machine's other load scales less than the seconds
        plain = sp["plain_prediction_s"]["median"]
        lo, hi = median_ci(sp["plain_prediction_s"]["runs"])["ci"]
        out += [f"## Speed: {sp['model']}, {sp['n_tokens']} tokens", "",
                "| what | median s [95% CI] | × a plain prediction | target s |",
                "|---|---|---|---|", f"| plain prediction | {plain:.2f} [{lo:.2f}, {hi:.2f}] | 1 | |"]
        out += [f"| {k.removesuffix('_s').replace('_', ' ')} | {sp[k]['median']:.2f} "
                f"[{lo:.2f}, {hi:.2f}] | {sp[k]['median'] / plain:.1f} | {t} |"
                for k, t in SPEED_TARGETS.items()
                for lo, hi in [median_ci(sp[k]["runs"])["ci"]]]
        out += ["", "Medians with the 95% bootstrap interval of the median over the runs."]
    out += ["", f"Measured {data['meta']['measured']} on {data['meta']['machine']}"
            f"{' (--quick)' if data['quick'] else ''}."]
    return "\n".join(out) + "\n"


def main(argv=None) -> None:
    from bench.meta import meta
    from engine.api import Engine

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer tuning items, random orders "
                    "and single heads (about 30 minutes on 2 busy cores; a full run takes "
                    "hours, most of them SmolLM2's 270 heads removed one at a time)")
    ap.add_argument("--models", help="comma-separated model ids (default: both)")
    ap.add_argument("--report", action="store_true", help="write head_pruning.md again from "
                    "head_pruning.json, measuring nothing")
    args = ap.parse_args(argv)
    json_path = ROOT / "results" / "head_pruning.json"
    md_path = json_path.with_suffix(".md")
    if args.report:
        md_path.write_text(report(json.loads(json_path.read_text())))
        return
    only = args.models.split(",") if args.models else None

    def log(msg):
        print(f"[head_pruning {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    engine = Engine(device="cpu")
    size = SIZES["quick" if args.quick else "full"]
    models = [run_model(engine, m, k, size, log) for m, k in MODELS if not only or m in only]
    data = {"quick": args.quick, "models": models,
            "speed": speed(engine, args.quick, log) if not only or SPEED_MODEL in only else None,
            "meta": meta("python -m bench.head_pruning" + (" --quick" if args.quick else ""))}
    json_path.write_text(json.dumps(data, indent=1))
    md_path.write_text(report(data))
    log("wrote results/head_pruning.json and results/head_pruning.md")


if __name__ == "__main__":
    main()
