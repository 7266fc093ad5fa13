"""Speed of one attribution and of generation on this machine (issue 54, "Speed and memory"),
each beside the library baseline measured in the same run.

Attribution: one 20-word sentence, MiniLM-L6-MLM (its blank) and SmolLM2-135M (the next
word): gradient × input, IG at exactly 32 steps and occlusion, the whole call the app makes
(engine.attribution.explain.attribute, faithfulness included) and the method alone, each the
median of RUNS runs with a 95% bootstrap interval of the median; a warm repeat through the
Engine's cache. Beside IG: Captum's own LayerIntegratedGradients on the input embedding layer
with the same ids, baseline (the attributed pieces as the engine's absent token: [MASK] for a
masked LM, the padding token for a decoder), target and 32 Gauss-Legendre steps: the ratio of
times and the largest difference of the per-piece attributions.
Generation: SmolLM2-135M, 32 tokens greedy, tokens per second of engine.generation.generate
(with and without the logit lens) against model.generate(do_sample=False) on the same model.
Memory (issue 66, M2): SmolLM2-135M filling the blank at word 61 of a 127-word sentence, the
CLI's whole attribute call (IG at MEMORY_STEPS steps, faithfulness included), against a plain
forward pass of the same input, each in a fresh process with the resident memory sampled
every 2 ms (as bench/patching.py measures patching's): the peak and peak / plain forward, whose
target is 1.5× (the attributions' passes are batched by memory, engine/memory.py).

    python -m bench --only attribution-memory [--quick]   (results/attribution.json "memory")
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from engine.analysis.bootstrap import interval, resample_counts

RUNS = 5
STEPS = 32
SENTENCE = ("After the meeting at work she walked home through the quiet park and stopped "
            "to buy a cup of hot [MASK].")         # 20 words before the blank
TARGETS = {"gradxinput": 0.5, "ig": 3.0, "occlusion": 2.0, "warm": 0.1}
GEN_TOKENS = 32
GEN_PROMPT = "The history of the small town began when the first farmers"
GEN_TARGETS = {"tokens_per_s": 10.0, "vs_generate": 0.9}
ROOT = Path(__file__).resolve().parent.parent
MEMORY_MODEL = "smollm2-135m"
LONG_SENTENCE = (
    "On Saturday morning my sister and I woke up early because we wanted to visit our "
    "grandmother who lives in a small house near the lake on the other side of the town and "
    "we knew the roads would be busy later in the day so we walked down the street to the "
    "corner where we had parked our old [MASK] the night before and when we got in it would "
    "not start at first but after a few tries the engine finally began to run and we drove "
    "slowly past the school the bakery and the old church while the sun came up over the "
    "green hills and the radio played a song we both liked when we were children and we sang "
    "along the way")                              # 127 words, the blank the 61st
LONG_TARGET = "car"
MEMORY_STEPS, QUICK_MEMORY_STEPS = 32, 8
MEMORY_TARGET = 1.5                               # peak / a plain forward's peak


def median_ci(seconds) -> dict:
    """Median of the runs and the 95% percentile-bootstrap interval of the median."""
    x = np.asarray(seconds, np.float64)
    counts = resample_counts(len(x))
    order = np.argsort(x)
    xs, cs = x[order], counts[:, order]
    # the median of each resample from its multiplicities: the value where the cumulative
    # count first reaches half
    half = len(x) / 2
    reps = xs[np.argmax(np.cumsum(cs, axis=1) >= half, axis=1)]
    lo, hi = interval(reps)
    return {"median": float(np.median(x)), "ci": [float(lo), float(hi)], "runs": x.tolist()}


def timed(fn, runs: int = RUNS) -> tuple[dict, object]:
    out, times = None, []
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return median_ci(times), out


def _text(kind: str):
    from engine.text import to_word_text

    return to_word_text(SENTENCE if kind == "masked" else
                        SENTENCE.split("[MASK]")[0].rstrip())


def _ids_and_read(adapter, kind: str, wt, target: str):
    """The ids the engine's objective reads, its baseline ids (every attributed piece as the
    absent token), the position read and the target's id, rebuilt as
    engine/attribution/hf.py builds them for a one-piece target."""
    from engine.attribution.objective import blank_of, replace_word
    from engine.families.bert import with_mask_token
    from engine.families.hf import tokens
    from engine.text import MASK

    tok, cap = adapter.tokenizer, adapter.max_tokens
    if kind == "masked":
        blank = blank_of(wt, kind)
        t = tokens.tokenize(tok, with_mask_token(wt, tok.mask_token or MASK), cap)
        ids, base_id = list(t.input_ids), tok.mask_token_id
        read = ids.index(tok.mask_token_id)
        filled = tokens.tokenize(tok, replace_word(wt, blank, target), cap)
        spelled = [i for i, w in zip(filled.input_ids, filled.token_to_word) if w == blank]
        slots = [i for i, w in enumerate(t.token_to_word) if w >= 0 and w != blank]
    else:
        t = tokens.tokenize(tok, wt, cap)
        ids, base_id, read = list(t.input_ids), adapter.pad_id, len(t.input_ids) - 1
        spelled = tok(wt.text + " " + target)["input_ids"][len(ids):]
        slots = [i for i, w in enumerate(t.token_to_word) if w >= 0]
    if len(spelled) != 1:
        raise ValueError(f"the speed sentence's target {target!r} must be one piece")
    base = [base_id if i in slots else x for i, x in enumerate(ids)]
    return ids, base, read, spelled[0]


def captum_lig(adapter, ids, base, read: int, target: int):
    """Captum's LayerIntegratedGradients on the input embedding layer: (L,) attributions."""
    import torch
    from captum.attr import LayerIntegratedGradients

    model = adapter.model

    def f(input_ids):
        mask = torch.ones_like(input_ids)
        logits = model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits
        return torch.log_softmax(logits[:, read].float(), dim=-1)[:, target]

    lig = LayerIntegratedGradients(f, model.get_input_embeddings())
    x, b = torch.tensor([ids]), torch.tensor([base])
    with torch.enable_grad():
        attr = lig.attribute(x, baselines=b, n_steps=STEPS, method="gausslegendre",
                             internal_batch_size=32)
    return attr.sum(-1)[0].detach().double().numpy()


def attribution_speed(model_id: str, kind: str, log=print, runs: int = RUNS) -> dict:
    from engine.api import Engine
    from engine.attribution.explain import attribute

    engine = Engine(device="cpu")
    adapter = engine.adapter(model_id, progress=False)
    wt = _text(kind)
    pred = (engine.predict_masked(model_id, wt.text, top_k=1) if kind == "masked"
            else engine.predict_next(model_id, wt.text, top_k=1))
    target = pred.candidates[0].token.strip()
    out = {"model": model_id, "kind": kind, "text": wt.text, "n_words": len(wt.words),
           "target": target, "steps": STEPS, "runs": runs}
    attribute(adapter, wt, target, method="gradxinput", kind=kind)       # warm-up (imports)
    for m in ("gradxinput", "ig", "occlusion"):
        out[m], a = timed(lambda: attribute(adapter, wt, target, method=m, kind=kind,
                                            steps=STEPS if m == "ig" else None), runs)
        out[f"{m}_alone"], _ = timed(lambda: attribute(
            adapter, wt, target, method=m, kind=kind, faithful=False,
            steps=STEPS if m == "ig" else None), runs)
        log(f"speed {model_id} {m}: {out[m]['median']:.2f} s with faithfulness, "
            f"{out[m + '_alone']['median']:.2f} s alone")
        if m == "ig":
            ours_ig = a
    engine.attribute(model_id, wt.text, target, method="gradxinput", kind=kind)
    out["warm"], _ = timed(lambda: engine.attribute(model_id, wt.text, target,
                                                    method="gradxinput", kind=kind), runs)
    ids, base, read, target_id = _ids_and_read(adapter, kind, wt, target)
    out["captum_lig"], lig = timed(lambda: captum_lig(adapter, ids, base, read, target_id),
                                   runs)
    out["lig_vs_ours"] = out["captum_lig"]["median"] / out["ig_alone"]["median"]
    out["max_abs_difference"] = float(np.abs(lig - ours_ig.piece_scores).max())
    out["ig_gap"] = float(ours_ig.completeness_gap)
    log(f"speed {model_id}: Captum LIG {out['captum_lig']['median']:.2f} s, "
        f"x{out['lig_vs_ours']:.2f} of ours, max |difference| {out['max_abs_difference']:.2e}")
    return out


def generation_speed(model_id: str = "smollm2-135m", runs: int = RUNS, log=print) -> dict:
    import torch

    from engine.api import Engine
    from engine.generation import generate

    adapter = Engine(device="cpu").adapter(model_id, progress=False)
    model = adapter.model
    ours = generate(adapter, GEN_PROMPT, GEN_TOKENS)             # warm-up; the prompt's ids
    ids = torch.tensor([list(ours.prompt_ids)])

    def hf():
        with torch.inference_mode():
            return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                  do_sample=False, max_new_tokens=GEN_TOKENS,
                                  min_new_tokens=GEN_TOKENS, pad_token_id=adapter.pad_id)

    hf()
    t_hf, seq = timed(hf, runs)
    t_lens, g1 = timed(lambda: generate(adapter, GEN_PROMPT, GEN_TOKENS), runs)
    t_plain, g2 = timed(lambda: generate(adapter, GEN_PROMPT, GEN_TOKENS, layer_ranks=False),
                        runs)
    n = len(g2.token_ids)
    same = list(seq[0, ids.shape[1]:ids.shape[1] + n].tolist()) == list(g2.token_ids)
    out = {"model": model_id, "prompt": GEN_PROMPT, "tokens": n, "runs": runs,
           "same_tokens": same, "model_generate": t_hf, "ours_logit_lens": t_lens,
           "ours": t_plain}
    for key in ("model_generate", "ours_logit_lens", "ours"):
        out[key]["tokens_per_s"] = (GEN_TOKENS if key == "model_generate" else n) / \
            out[key]["median"]
    out["ours_vs_generate"] = out["ours"]["tokens_per_s"] / out["model_generate"]["tokens_per_s"]
    log(f"generation: ours {out['ours']['tokens_per_s']:.1f} tokens/s, with the logit lens "
        f"{out['ours_logit_lens']['tokens_per_s']:.1f}, model.generate "
        f"{out['model_generate']['tokens_per_s']:.1f}; same tokens: {same}")
    return out


def run_speed(quick: bool = False, log=print) -> dict:
    runs = 2 if quick else RUNS
    return {"targets": TARGETS, "generation_targets": GEN_TARGETS,
            "attribution": [attribution_speed("minilm-l6-mlm", "masked", log, runs),
                            attribution_speed("smollm2-135m", "next", log, runs)],
            "generation": generation_speed(runs=runs, log=log)}


# -- memory ---------------------------------------------------------------------------------
def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_memory(what: str, steps: int) -> dict:
    """In this (fresh) process: the model loaded, the weights paged in by a one-token pass,
    then a plain forward of the long sentence's objective ("plain") or the CLI's attribute
    call ("ig"), timed, with the resident memory sampled every 2 ms: before (the loaded
    model), at the peak, and what the run added; ru_maxrss is the whole process's peak (the
    loading's included, what /usr/bin/time reports)."""
    import resource

    import torch

    from engine.api import Engine
    from engine.attribution.explain import attribute, objective_of
    from engine.text import to_word_text

    adapter = Engine(device="cpu").adapter(MEMORY_MODEL, progress=False)
    wt = to_word_text(LONG_SENTENCE)
    obj = objective_of(adapter, wt, LONG_TARGET, None, "masked")
    out: dict = {"tokens": len(obj.pieces), "rows_per_gradient_pass": obj.value.rows(
        steps, grad=True), "rows_per_forward_pass": obj.value.rows(36, grad=False)}
    with torch.no_grad():
        adapter.model(input_ids=torch.tensor([[adapter.pad_id]]), use_cache=False)

    def plain():
        with torch.no_grad():
            return obj.value(obj.x)

    def ig():
        a = attribute(adapter, wt, LONG_TARGET, method="ig", kind="masked", steps=steps)
        out.update(f=a.f, completeness_gap=a.completeness_gap, converged=a.converged)

    base = _rss()
    peak, done = [base], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.002)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    t = time.perf_counter()
    {"plain": plain, "ig": ig}[what]()
    seconds = time.perf_counter() - t
    done.set()
    watcher.join()
    peak[0] = max(peak[0], _rss())
    return {**out, "seconds": seconds, "loaded_mb": base / 2**20, "peak_mb": peak[0] / 2**20,
            "added_mb": (peak[0] - base) / 2**20,
            "process_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "memory_is": "resident (RSS)"}


def _measured_memory(what: str, steps: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.attribution_speed", "--measure", what,
                          "--steps", str(steps)], cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"bench.attribution_speed --measure {what}: "
                           f"{out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_memory(quick: bool = False, log=print) -> dict:
    """IG's peak on the long sentence against a plain forward's, each in a fresh process."""
    steps = QUICK_MEMORY_STEPS if quick else MEMORY_STEPS
    plain = _measured_memory("plain", steps)
    ig = _measured_memory("ig", steps)
    out = {"model": MEMORY_MODEL, "text": LONG_SENTENCE, "n_words": len(LONG_SENTENCE.split()),
           "blank_word": LONG_SENTENCE.split().index("[MASK]") + 1, "target": LONG_TARGET,
           "steps": steps, "tokens": plain["tokens"], "threads": _threads(),
           "rows_per_gradient_pass": ig["rows_per_gradient_pass"],
           "rows_per_forward_pass": ig["rows_per_forward_pass"], "plain": plain, "ig": ig,
           "peak_over_plain": ig["peak_mb"] / plain["peak_mb"],
           "process_peak_over_plain": ig["process_peak_mb"] / plain["process_peak_mb"],
           "memory_target": MEMORY_TARGET}
    log(f"memory {MEMORY_MODEL}, {out['n_words']} words ({out['tokens']} tokens), IG "
        f"{steps} steps: peak {ig['peak_mb']:.0f} MB in {ig['seconds']:.0f} s, a plain "
        f"forward {plain['peak_mb']:.0f} MB: {out['peak_over_plain']:.2f}x")
    return out


def _threads() -> int:
    return int(os.environ.get("BENCH_THREADS", "2"))


def main(argv: list[str] | None = None) -> int:
    """One measurement in this process (run_memory starts it as a fresh one)."""
    ap = argparse.ArgumentParser(prog="python -m bench.attribution_speed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measure", choices=("plain", "ig"), required=True)
    ap.add_argument("--steps", type=int, default=MEMORY_STEPS)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(_threads())
    print(json.dumps(measure_memory(args.measure, args.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
