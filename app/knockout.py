"""Knocking out heads and feed-forward blocks: the parts a user switches off, shared by the
Predictions page (every prediction and its "why" recomputed with them off, beside the
originals) and the Attention page (a head clicked off in the model view). The parts live in
the link ("ablate", "ablate_mode"), so a copied link reopens with them off."""
from __future__ import annotations

import re

import streamlit as st

from app import explain_access, state

KEY, MODE_KEY = "ablate", "ablate_mode"
MAX_CHARS = 300
MODE_LABELS = {"zero": "zero", "mean": "mean over the reference sentences"}
SYNTAX = ("Heads as layer.head, from 1 (\"3.2\"); a layer's whole attention as \"3.*\"; its "
          "feed-forward block as \"3.mlp\"; separated by commas.")


def controls(where=st) -> tuple[str | None, str]:
    """The knock-out box and its mode -> (the parts as typed, None when empty; the mode)."""
    c1, c2 = where.columns([3, 2])
    spec = state.url_text_input(
        c1, "Knock out (heads or blocks)", KEY, MAX_CHARS, placeholder="e.g. 1.1, 2.*, 3.mlp",
        help=SYNTAX + " Each prediction is shown with every part on and with these off.")
    mode = c2.radio("Knocked-out parts become", list(explain_access.ABLATION_MODES),
                    format_func=MODE_LABELS.__getitem__, horizontal=True,
                    key=state.url_key(MODE_KEY, str, default="zero",
                                      choices=tuple(explain_access.ABLATION_MODES)),
                    help="zero: the head's output (its slice of the attention output "
                         "projection's input) or the block's output is set to 0. mean: to its "
                         "average over a fixed set of reference sentences, so the rest of the "
                         "model still sees a typical value.")
    return canonical(spec), mode


# one entry of a spec, as engine/components/ablation.py's parse reads it
_ENTRY = re.compile(r"^(\d+)\.(\d+|\*|mlp)$")


def canonical(spec: str | None) -> str | None:
    """The parts `spec` names, each once and in the order the engine's canonical spec lists
    them (Ablation.spec: by layer, its heads or "L.*", then "L.mlp"), joined by ", "; None
    when it names none. A spec with an entry the engine would refuse is kept as typed
    (spaces tidied), so that the engine's refusal names that entry."""
    text = " ".join(str(spec or "").split()).strip(" ,")
    entries = [e.strip() for e in text.split(",")]
    found = [_ENTRY.match(e) for e in entries]
    if not text or not all(found):
        return text or None
    layers: dict[int, dict] = {}
    for m in found:
        layer = layers.setdefault(int(m.group(1)), {"heads": set(), "all": False, "mlp": False})
        what = m.group(2)
        if what == "mlp":
            layer["mlp"] = True
        elif what == "*":
            layer["all"] = True
        else:
            layer["heads"].add(int(what))
    out = []
    for n, layer in sorted(layers.items()):
        out += [f"{n}.*"] if layer["all"] else [f"{n}.{h}" for h in sorted(layer["heads"])]
        out += [f"{n}.mlp"] if layer["mlp"] else []
    return ", ".join(out)


def heads_of(spec: str | None) -> set[tuple[int, int]]:
    """The single heads (layer, head), from 1, that `spec` names."""
    return {(int(a), int(b)) for a, b in re.findall(r"(\d+)\.(\d+)\b", spec or "")}


def toggled(spec: str | None, layer: int, head: int) -> str:
    """`spec` with head layer.head (from 1) switched: off when on, on when off."""
    parts = [p.strip() for p in (spec or "").split(",") if p.strip()]
    name = f"{layer}.{head}"
    parts = [p for p in parts if p != name] if name in parts else parts + [name]
    return ", ".join(parts)


def _key() -> str:
    return state.url_key(KEY, str, default="", max_chars=MAX_CHARS)


def current() -> str | None:
    """The parts switched off now (in the link on a page without the box too), as
    `canonical` writes them."""
    return canonical(st.session_state.get(_key(), ""))


def set_spec(spec: str) -> None:
    """Put `spec` in the box (before the box is drawn in this run)."""
    st.session_state[_key()] = spec
