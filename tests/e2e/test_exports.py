"""Downloads read back in a real browser (issue 60 §3): the CSV and the NPZ a page offers hold
the numbers its charts draw, read from plotly's own data on the page (its _fullData), and the
ELMo weights page's bars are the softmax of the s it shows, computed here, not by the app."""
from __future__ import annotations

import csv
import io
import json
import re

import h5py
import numpy as np
from playwright.sync_api import expect

from engine.registry import ASSETS
from tests.e2e.helpers import BROWSER_MARKS, DRAW_MS, WAIT_MS, _download, _goto, idle, rerun

pytestmark = BROWSER_MARKS

# the traces of the first chart `find` (a JS predicate on the plot element) matches, as plotly
# drew them (its _fullData, typed arrays decoded), as plain lists; null until drawn
TRACES = ("(find) => { const el = [...document.querySelectorAll('.js-plotly-plot')]"
          ".find(e => e.layout && new Function('e', 'return ' + find)(e)); "
          "const list = (v) => v && typeof v === 'object' && v.length !== undefined "
          "? Array.from(v, list) : v; "
          "return el && el._fullData && el.querySelector('.main-svg') ? {title: "
          "el.layout.title && el.layout.title.text, traces: el._fullData.map(t => ({x: list(t.x), "
          "y: list(t.y), z: list(t.z), text: list(t.text), customdata: list(t.customdata), "
          "name: t.name}))} : null; }")
# the ELMo weights page's two charts: the bars (subplot title "softmax(s): ...") and the mixed
# vectors' PCA (subplot title "mixed vectors (PCA)")
BARS = "(e.layout.annotations || []).some(a => /^softmax\\(s\\)/.test(a.text))"
SCATTER = "(e.layout.annotations || []).some(a => a.text === 'mixed vectors (PCA)')"
ELMO = ASSETS / "models" / "elmo-brown"          # the ELMo family's default model
LINKED_S, LINKED_GAMMA = (1.5, -0.5, 0.7), 1.5
TARGET = "mouse"                                   # the mouse preset's word


def _drawn(page, find: str, timeout: int = DRAW_MS) -> dict:
    page.wait_for_function(f"(f) => ({TRACES})(f) !== null", arg=find, timeout=timeout)
    return page.evaluate(TRACES, find)


def _softmax(s) -> np.ndarray:
    e = np.exp(np.asarray(s, float) - np.max(s))
    return e / e.sum()


def _sliders(page) -> np.ndarray:
    """The s of each layer as its slider shows it (aria-valuetext, its thumb's label: the
    range input's own value is snapped to the 0.1 step, where a learned s has 2 decimals)."""
    sliders = page.get_by_role("slider", name=re.compile(r"^s for "))
    return np.array([float(sliders.nth(i).get_attribute("aria-valuetext"))
                     for i in range(sliders.count())])


def _save(page, button, path):
    with page.expect_download(timeout=WAIT_MS) as info:
        button.click()
    info.value.save_as(path)
    return path


def _elmo_layers(sentences: list[str], word: str) -> np.ndarray:
    """The bundled biLM's layers at the first `word` of each sentence, encoded in this
    process: [layers, sentences, dim]."""
    from engine.api import Engine

    encs = Engine(device="cpu").encode(ELMO.name, sentences)
    first = [next(i for i, w in enumerate(e.words) if w.lower() == word) for e in encs]
    return np.stack([e.word_vectors("mean")[:, i] for e, i in zip(encs, first)], axis=1
                    ).astype(np.float64)


def _pca(x: np.ndarray) -> np.ndarray:
    """Two principal axes of the points [n, dim] (centred, unit RMS norm), by numpy's SVD."""
    x = x.astype(np.float64) - x.mean(axis=0)
    x /= np.sqrt((x ** 2).sum(axis=1).mean())
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    return x @ vt[:2].T


def test_the_elmo_mix_bars_are_the_softmax_of_s_and_the_csv_and_npz_hold_what_is_drawn(
        server, browser, tmp_path):
    """The ELMo weights page opened with s and γ in its link: one bar per layer of the bundled
    biLM (its options.json and weights.hdf5 say how many), each the softmax of the s its
    slider shows, summing to 1; the weights CSV holds those bars and s; the embeddings NPZ's
    mixed vectors are γ Σ_j bar_j · layer_j of its own layers, and their PCA is the scatter
    drawn (each axis up to its sign). Then "Learn the mix": the bars are still the softmax of
    the sliders, now the learned weights the page reports."""
    options = json.loads((ELMO / "options.json").read_text())
    n_lstm = options["lstm"]["n_layers"]
    with h5py.File(ELMO / "weights.hdf5", "r") as f:      # the checkpoint the page loads
        assert [k for k in f if k.startswith("RNN_")] == [f"RNN_{k}" for k in range(n_lstm)]
    n_layers = 1 + n_lstm                     # the char CNN, then each biLSTM layer

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, server, "elmo", preset="mouse", **{f"mix_s{j}": str(v)
                                                   for j, v in enumerate(LINKED_S)},
          mix_gamma=str(LINKED_GAMMA))
    bars = _drawn(page, BARS)
    scatter = _drawn(page, SCATTER)
    idle(page)
    assert "elmo-brown" in scatter["title"], scatter["title"]

    # the bars: softmax(s) of the sliders' s (the link's), one per layer, summing to 1
    s = _sliders(page)
    np.testing.assert_allclose(s, LINKED_S)
    weights, gamma_bar = bars["traces"]
    w = np.array(weights["y"], float)
    assert len(w) == len(weights["x"]) == n_layers, weights["x"]
    assert abs(w.sum() - 1) <= 1e-9, w.sum()
    np.testing.assert_allclose(w, _softmax(s), rtol=0, atol=1e-9)
    assert weights["text"] == [f"{v:.2f}" for v in _softmax(LINKED_S)]
    gamma = float(gamma_bar["y"][0])
    assert gamma == LINKED_GAMMA

    # the weights CSV: a row per bar, its layer, s, softmax(s) and γ
    table = list(csv.DictReader(io.StringIO(
        _download(page, "Export elmo-mix-weights", "CSV", tmp_path).decode())))
    assert [r["layer"] for r in table] == weights["x"]
    np.testing.assert_allclose([float(r["softmax_s"]) for r in table], w, rtol=0, atol=1e-12)
    np.testing.assert_allclose([float(r["s"]) for r in table], s, rtol=0, atol=1e-12)
    assert {float(r["gamma"]) for r in table} == {gamma}

    # the embeddings NPZ: its mixed vectors are the bars' mix of the biLM's layers, encoded
    # here; its own layers' vectors are those layers (its "layers" overwrote them once: the
    # names of its info)
    npz = np.load(_save(page, page.get_by_role("button", name="Embeddings (NPZ)"),
                        tmp_path / "mix.npz"), allow_pickle=False)
    mixed, sentences = npz["mixed"], [str(v) for v in npz["meta_sentence"]]
    n = sum(len(t["x"]) for t in scatter["traces"] if t["customdata"] is not None)
    assert mixed.shape[0] == len(sentences) == n, (mixed.shape, n)
    assert str(npz["model"][0]) == "elmo-brown"
    assert [str(v) for v in npz["s"]] == [f"{v:g}" for v in s]
    assert [str(v) for v in npz["gamma"]] == [f"{gamma:g}"]
    layers = _elmo_layers(sentences, TARGET)
    assert layers.shape == (n_layers, *mixed.shape), layers.shape
    scale = np.abs(layers).max()
    np.testing.assert_allclose(mixed, gamma * np.tensordot(w, layers, 1), rtol=0,
                               atol=1e-4 * scale)
    np.testing.assert_allclose(npz["vectors"], layers, rtol=0, atol=1e-4 * scale)
    assert [str(v) for v in npz["layers"]] == weights["x"]

    # the scatter: the PCA of the NPZ's mixed vectors, point by point (customdata: the row)
    drawn = np.full((n, 2), np.nan)
    for t in scatter["traces"]:
        if t["customdata"] is not None:
            drawn[np.array(t["customdata"], int)] = np.column_stack([t["x"], t["y"]])
    assert not np.isnan(drawn).any()
    mine = _pca(mixed)
    for axis in range(2):
        sign = np.sign(mine[:, axis] @ drawn[:, axis]) or 1.0
        np.testing.assert_allclose(sign * mine[:, axis], drawn[:, axis], rtol=0,
                                   atol=1e-4 * np.abs(mine).max(), err_msg=f"axis {axis}")

    # learned: the sliders move to the learned s, and the bars follow as their softmax
    with rerun(page):
        page.get_by_role("button", name="Learn the mix").click()
    said = page.get_by_text(re.compile(r"^Learned weights: "))
    expect(said).to_be_visible()
    learned = [float(v) for v in re.findall(r"\d\.\d\d", said.inner_text().split(";")[0])]
    s = _sliders(page)
    assert not np.allclose(s, LINKED_S), s
    page.wait_for_function(f"(f) => {{ const b = ({TRACES})(f); return b && "
                           f"Math.abs(b.traces[0].y[0] - {float(_softmax(s)[0])!r}) < 1e-9; }}",
                           arg=BARS, timeout=WAIT_MS)
    w = np.array(_drawn(page, BARS)["traces"][0]["y"], float)
    assert abs(w.sum() - 1) <= 1e-9, w.sum()
    np.testing.assert_allclose(w, _softmax(s), rtol=0, atol=1e-9)
    # the report's weights are the unrounded s's; the sliders keep s to 2 decimals
    np.testing.assert_allclose(w, learned, rtol=0, atol=0.01)
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def test_the_attention_csv_and_npz_hold_the_heatmap_drawn(server, browser, tmp_path):
    """The Attention page at layer 3, head 3 of SmolLM2: the Heatmap tab's CSV is the map drawn
    (a row per query token, a column per key token: a causal map is not its transpose), and
    the Model view's NPZ holds it at [layer 3, head 3] of every layer's and head's maps."""
    layer, head = 3, 3
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, server, "attention", preset="mouse", att_layer=str(layer),
          att_head=str(head - 1))
    page.get_by_role("tab", name="Heatmap").click()
    # the theme writes titles in bold (twice)
    heat = _drawn(page, "e.data[0].type === 'heatmap' && /, layer 3, head 3(<\\/b>)*$/"
                        ".test((e.layout.title || {}).text)")
    idle(page)
    assert "smollm2-135m, layer 3, head 3" in heat["title"], heat["title"]
    z = np.array(heat["traces"][0]["z"], float)
    n = len(z)
    assert z.shape == (n, n) and n > 3
    np.testing.assert_allclose(z.sum(axis=1), 1, atol=1e-5)           # each query's row
    assert np.abs(np.triu(z, 1)).max() <= 1e-6                         # none to a later token
    assert np.abs(z - z.T).max() > 0.05

    rows = list(csv.reader(io.StringIO(
        _download(page, "Export head-heatmap", "CSV", tmp_path).decode())))
    header, body = rows[0], rows[1:]
    assert header[-1] == "row_token" and len(header) == n + 1 and len(body) == n
    assert [r[-1] for r in body] == header[:-1]
    np.testing.assert_allclose(np.array([r[:-1] for r in body], float), z, rtol=0, atol=1e-7)

    page.get_by_role("tab", name="Model view").click()
    button = _opened(page, "Export model-view").get_by_role("button", name="NPZ", exact=True)
    npz = np.load(_save(page, button, tmp_path / "maps.npz"), allow_pickle=False)
    maps = npz["attentions"]
    assert maps.shape == (30, 9, n, n), maps.shape                     # SmolLM2-135M
    assert list(npz["layers"]) == list(range(1, 31)) and str(npz["model"]) == "smollm2-135m"
    assert [str(t) for t in npz["tokens"]] == header[:-1]
    np.testing.assert_allclose(maps[layer - 1, head - 1], z, rtol=0, atol=1e-7)
    others = [(l, h) for l in range(30) for h in range(9) if (l, h) != (layer - 1, head - 1)]
    assert min(np.abs(maps[l, h] - z).max() for l, h in others) > 1e-4   # no other map is it
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def _opened(page, expander: str):
    """The visible expander whose label holds `expander`, opened (its buttons then show)."""
    details = page.locator("details").filter(has_text=expander, visible=True).first
    details.wait_for()
    if details.get_attribute("open") is None:
        details.locator("summary").click()
    return details
