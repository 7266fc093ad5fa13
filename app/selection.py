"""Plotly click and lasso selections as Streamlit reports them, read without Streamlit, and
the small choices the linked views make from them (what to focus, which layers to show)."""
from __future__ import annotations

from typing import Any, Sequence


def points(event: Any) -> list[dict]:
    """The selected points of a chart's widget state ({"selection": {"points": [...]}})."""
    if not event:
        return []
    sel = event.get("selection", {}) if hasattr(event, "get") else {}
    return list(sel.get("points", []) if hasattr(sel, "get") else [])


def clicked_tokens(event: Any) -> list[int]:
    """Token indices clicked in a head view: only the token markers carry a number as
    customdata (the lines carry none)."""
    return clicked_points(event)


def clicked_points(event: Any) -> list[int]:
    """The indices a chart's markers carry as a number in customdata, in click order."""
    return [int(p["customdata"]) for p in points(event)
            if isinstance(p.get("customdata"), (int, float))]


def clicked_cell(event: Any, n_cols: int, curve: int = 1) -> tuple[int, int] | None:
    """A click on a grid of thumbnails drawn as one marker trace (`curve`), row by row: marker
    i is row i // n_cols, column i % n_cols (the first clicked marker; None if none was)."""
    markers = [p for p in points(event) if p.get("curve_number") == curve]
    return divmod(int(markers[0]["point_index"]), n_cols) if markers else None


def toggle_focus(current: str, options: Sequence[str], token: int) -> str:
    """options[0] is "(all)", options[k + 1] token k: a click focuses a token, a second click
    on the focused token shows every token again; an unknown token changes nothing."""
    if not 0 <= token < len(options) - 1:
        return current
    option = options[token + 1]
    return options[0] if current == option else option


def clicked_occurrences(event: Any, n_points: int, n_panels: int) -> tuple[list[int], int | None]:
    """Grid clicks: each point's customdata is [point, panel]; returns the points (in click
    order, no repeats) and the panel of the first."""
    picked, panel = [], None
    for p in points(event):
        data = p.get("customdata")
        if isinstance(data, dict):    # a row of a typed array arrives as {"0": i, "1": k}
            data = [data.get("0"), data.get("1")]
        if not isinstance(data, (list, tuple)) or len(data) < 2 or None in data[:2]:
            continue
        i, k = int(data[0]), int(data[1])
        if 0 <= i < n_points and 0 <= k < n_panels:
            picked.append(i)
            panel = k if panel is None else panel
    return list(dict.fromkeys(picked)), panel


def add_to_selection(current: Sequence[tuple[int, int]],
                     picked: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Clicks that add: one point already selected is taken out again (a second click undoes
    the first); anything else joins the selection, in the order chosen."""
    current = list(current)
    if len(picked) == 1 and picked[0] in current:
        return [o for o in current if o != picked[0]]
    return current + [o for o in picked if o not in current]


def parse_occurrences(text: str) -> list[tuple[int, int]]:
    """A URL's "sentence:word,sentence:word" (0-based); malformed parts are skipped."""
    out = []
    for part in str(text or "").split(","):
        s, _, w = part.partition(":")
        if s.strip().isdigit() and w.strip().isdigit():
            out.append((int(s), int(w)))
    return out


def format_occurrences(ids: Sequence[tuple[int, int]]) -> str:
    return ",".join(f"{s}:{w}" for s, w in ids)


def shown_layers(n_layers: int, every: int, cap: int) -> list[int]:
    """The baseline (0), every k-th layer, and always the top one; k=0 picks the smallest k
    that keeps the grid within `cap` panels (SmolLM2's 31 layers: every 3rd, 11 panels)."""
    if every <= 0:
        every = 1
        while len(shown_layers(n_layers, every, cap)) > cap:
            every += 1
    return sorted(set(range(0, n_layers, every)) | {n_layers - 1})
