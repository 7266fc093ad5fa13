"""The docs' and Benchmarks page's view of results/head_pruning.json: Michel et al.'s pruning
curve on the bundled models and the speed of the head tools (bench/head_pruning.py)."""
from __future__ import annotations

from bench.view_types import Est, Table, View, _measured


def _est(d: dict, signed: bool = False) -> Est:
    lo, hi = d.get("ci") or (None, None)
    return Est(d["mean"], lo, hi, digits=3, signed=signed)


def pruning_view(data: dict | None) -> View:
    if not data or not data.get("models"):
        return View()
    tables = []
    for m in data["models"]:
        rows = [[f"{c['fraction']:.0%}", c["heads_pruned"], _est(c["importance_order"]),
                 _est(c["random_order"]), _est(c["importance_minus_random"], signed=True)]
                for c in m["curve"]]
        sh = m["single_heads"]
        tables.append(Table(
            f"{m['model']}: top-1 with heads pruned in importance order",
            ["pruned", "heads", "importance order", "random order", "importance − random"],
            rows,
            f"{m['kind']} prediction; head importance summed over {m['n_tuning']} tuning "
            f"items (|∂f/∂ξ|, Michel et al. 2019), top-1 accuracy on {m['n_heldout']} held-out "
            f"items, {m['random_orders']} random orders, 95% bootstrap intervals over items. "
            f"Single heads removed one at a time: {sh['n_significant']} of "
            f"{sh['n_heads_tested']} change top-1 with an interval that excludes 0. Michel et "
            "al.: many heads can be pruned with little loss (20–40% of BERT's on MNLI), and "
            "most single heads matter little."))
    sp = data.get("speed")
    if sp:
        from bench.attribution_speed import median_ci

        def timed(d: dict) -> Est:          # the median and its interval over the runs
            return Est(d["median"], *median_ci(d["runs"])["ci"], digits=2, unit=" s")

        plain = sp["plain_prediction_s"]["median"]
        rows = [["plain prediction", timed(sp["plain_prediction_s"]), "1.0×", "", ""]]
        for key, target in sp["targets_s"].items():
            t = sp[key]["median"]
            rows.append([key.removesuffix("_s").replace("_", " "), timed(sp[key]),
                         f"{t / plain:.1f}×", f"≤ {target:g} s", "yes" if t <= target else "no"])
        tables.append(Table(
            f"Head tools against the targets: {sp['model']}, {sp['n_tokens']} tokens",
            ["what", "median", "× a plain prediction", "target", "met?"], rows,
            "Medians with the 95% bootstrap interval of the median, on 2 CPU cores, each beside a plain prediction of the same run (the "
            "machine's other load scales both); measured apart from the pruning curve, on an "
            "idle machine."))
    return View(tables, measured=_measured([data] + ([sp] if sp and sp.get("meta") else [])))
