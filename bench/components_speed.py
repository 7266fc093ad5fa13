"""Speed of one direct logit attribution (engine/components/dla.py, issue 55) on this machine,
beside a plain forward pass of the same model on the same ids measured in the same run.

SmolLM2-135M, a 12-token text, the model's own top next word as the target: the whole call
(engine.components.dla.components: tokenising, one hooked forward pass, the frozen norms, every
head's and block's part, the check that they add up) and a plain `model(input_ids)` without
hooks, interleaved run by run so that both see the same load on the machine, with torch's own
thread count and with one thread; each the median of RUNS runs with a 95% bootstrap interval of
the median. Also the top heads of one example
("The capital of France is" → " Paris"), to show what the numbers say.

    python -m bench.components_speed [--quick]     (writes results/components_speed.json)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

# light at import (json and numpy): bench/views.py draws speed_view for the docs
from bench.view_types import Est, Table, View, _measured

RESULTS = Path(__file__).resolve().parent.parent / "results"
FILE = "components_speed.json"
RUNS = 7
MODEL = "smollm2-135m"
TEXT = "After the long meeting she walked home through the quiet park and"   # 12 tokens
TARGET_S = 0.5
EXAMPLE = ("The capital of France is", "Paris")
TOP = 5


def components_speed(model_id: str = MODEL, runs: int = RUNS, log=print) -> dict:
    import torch

    from bench.attribution_speed import median_ci
    from engine.api import Engine
    from engine.components.dla import components
    from engine.text import to_word_text

    engine = Engine(device="cpu")
    adapter = engine.adapter(model_id, progress=False)
    target = engine.predict_next(model_id, TEXT, top_k=1).candidates[0].token.strip()
    wt = to_word_text(TEXT)
    ids = torch.tensor([adapter.tokenizer(wt.text)["input_ids"]])

    def plain():
        with torch.no_grad():
            return adapter.model(input_ids=ids)

    components(adapter, wt, target, None)                    # warm-up (imports, first call)
    plain()
    out = {"model": model_id, "text": TEXT, "n_tokens": int(ids.shape[1]), "target": target,
           "runs": runs, "target_s": TARGET_S, "threads": []}
    default = torch.get_num_threads()
    # torch's own thread count (the app's), and one thread: on 2 cores that other jobs also
    # use, two threads each waiting for the other are slower than one
    for n in dict.fromkeys((default, 1)):
        torch.set_num_threads(n)
        load_before = os.getloadavg()[0]
        t_dla, t_plain = [], []
        for _ in range(runs):                                # interleaved: the same load
            t = time.perf_counter()
            c = components(adapter, wt, target, None)
            t_dla.append(time.perf_counter() - t)
            t = time.perf_counter()
            plain()
            t_plain.append(time.perf_counter() - t)
        row = {"threads": n, "dla": median_ci(t_dla), "plain_forward": median_ci(t_plain),
               "gap": abs(c.total - c.logit),
               # what else ran: other jobs on the cores slow both alike
               "load_average": [load_before, os.getloadavg()[0]]}
        row["dla_vs_forward"] = row["dla"]["median"] / row["plain_forward"]["median"]
        out["threads"].append(row)
        log(f"components {model_id}, {n} thread(s): {row['dla']['median']:.3f} s, a plain "
            f"forward {row['plain_forward']['median']:.3f} s (×{row['dla_vs_forward']:.2f})")
    torch.set_num_threads(default)
    text, word = EXAMPLE
    ex = components(adapter, to_word_text(text), word, None)
    order = np.argsort(-ex.heads.ravel())[:TOP]
    out["example"] = {
        "text": text, "target": word, "logit": ex.logit, "embed": ex.embed, "rest": ex.rest,
        "heads_sum": float(ex.heads.sum()), "mlp_sum": float(ex.mlp.sum()),
        "top_heads": [{"head": f"{i // ex.heads.shape[1] + 1}.{i % ex.heads.shape[1] + 1}",
                       "direct": float(ex.heads.ravel()[i])} for i in order],
        "top_mlp": [{"layer": int(i) + 1, "direct": float(ex.mlp[i])}
                    for i in np.argsort(-ex.mlp)[:3]]}
    log(f"{text!r} → {word!r}: top heads "
        + ", ".join(f"{h['head']} {h['direct']:+.2f}" for h in out["example"]["top_heads"]))
    return out


def _time(s: dict) -> Est:
    return Est(s["median"], *s["ci"], digits=3, unit=" s")


def speed_view(data: dict | None) -> View:
    """The docs' and Benchmarks page's view of results/components_speed.json."""
    if not data:
        return View()
    rows, loads = [], []
    for r in data["threads"]:
        said = f"{r['threads']} thread" + ("s" if r["threads"] > 1 else "")
        met = "yes" if r["dla"]["median"] <= data["target_s"] else "no"
        rows += [[said, "direct logit attribution (the whole call)", _time(r["dla"]),
                  f"≤ {data['target_s']:g} s", met],
                 [said, "a plain forward pass, same ids", _time(r["plain_forward"]), "", ""],
                 [said, "attribution / forward", Est(r["dla_vs_forward"], digits=2, unit="×"),
                  "", ""]]
        loads.append(max(r["load_average"]))
    ex = data["example"]
    heads = [[h["head"], Est(h["direct"], digits=2, signed=True)] for h in ex["top_heads"]]
    return View([
        Table("One direct logit attribution against the target",
              ["torch threads", "what", "median", "target", "met?"], rows,
              f"{data['model']}, “{data['text']}” ({data['n_tokens']} tokens) → "
              f"“{data['target']}”, on 2 CPU cores. Median of {data['runs']} runs each, "
              "interleaved, 95% bootstrap interval of the median"
              + f"; the machine's load average reached {max(loads):.1f} (other jobs on "
                "its 2 cores slow a run and its forward pass alike)."),
        Table(f"Heads with the largest direct effect: “{ex['text']}” → “{ex['target']}”",
              ["head (layer.head)", "direct effect on the logit"], heads,
              f"The logit {ex['logit']:.2f} = heads {ex['heads_sum']:.2f} + feed-forward "
              f"blocks {ex['mlp_sum']:.2f} + embeddings {ex['embed']:.2f} + rest "
              f"{ex['rest']:.2f}.")], measured=_measured([data]))


def main(argv: list[str] | None = None) -> int:
    from bench.meta import meta

    ap = argparse.ArgumentParser(prog="python -m bench.components_speed",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 runs")
    args = ap.parse_args(argv)
    out = components_speed(runs=3 if args.quick else RUNS)
    out["meta"] = meta(" ".join(["python -m bench.components_speed", *sys.argv[1:]]))
    (RESULTS / FILE).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote results/{FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
