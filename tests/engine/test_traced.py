"""Traced encoder graphs (engine/families/hf/traced.py): the same hidden states as the model, built
once into the engine's cache, used by batch commands without transformers, never kept when
they differ, rebuilt when the model changes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file, save_file

from engine.api import Engine
from engine.families.hf import traced
from engine.registry import availability, load_registry

ROOT = Path(__file__).resolve().parents[2]

TEXTS = ["He sat on the bank of the river .",
         "The bank raised its rates again , didn't it ?",
         "Café owners re-opened on 12 March .",
         "The judge sent the man to [MASK] for ten years .",
         "A much longer sentence about the committee , the budget and the new library that "
         "would finally open in the spring after years of debate ."]


def _graphs(cache: Path) -> list[Path]:
    root = cache / "traced"
    return sorted(p for p in root.glob("*/*") if p.is_dir()) if root.is_dir() else []


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _assert_same(got, ref):
    for g, r in zip(got, ref):
        assert g.tokens == r.tokens and g.words == r.words
        np.testing.assert_array_equal(g.token_to_word, r.token_to_word)
        assert g.layer_names == r.layer_names
        assert g.hidden_states.shape == r.hidden_states.shape
        assert np.abs(g.hidden_states - r.hidden_states).max() <= 1e-5


def _bundled_berts() -> list[str]:
    return [m for m, e in load_registry().items()
            if e.family == "bert" and availability(e) == "bundled"]


@pytest.mark.parametrize("model", _bundled_berts())
def test_a_traced_graph_gives_the_models_hidden_states(cache, model):
    """Every bundled BERT (an overlay, minilm-l6-mlm, included): tokens, alignment and every
    layer's vectors as the model's own forward gives them, for all layers and for a subset."""
    fast = Engine(cache_size=0, traced=True)
    plain = Engine(cache_size=0)
    _assert_same(fast.encode(model, TEXTS, batch_size=2), plain.encode(model, TEXTS))
    graphs = _graphs(cache)
    top = json.loads((graphs[0] / traced.MANIFEST_FILE).read_text())["n_layers"]
    cached = Engine(cache_size=0, traced=True)       # finds the graph: loads no model
    _assert_same(cached.encode(model, TEXTS[:3], layers=(0, 2, top)),
                 plain.encode(model, TEXTS[:3], layers=(0, 2, top)))
    assert not cached.is_loaded(model)
    # layers that stop below the top go to the model, which runs only the blocks they need
    _assert_same(cached.encode(model, TEXTS[:3], layers=(0, 2)),
                 plain.encode(model, TEXTS[:3], layers=(0, 2)))
    assert cached.is_loaded(model)
    assert len(graphs) == 1
    meta = json.loads((graphs[0] / traced.MANIFEST_FILE).read_text())
    assert meta["model_id"] == model and meta["max_abs_diff"] <= traced.TOLERANCE
    # a request for attention maps goes to the model: a graph has none
    enc, = fast.encode(model, TEXTS[:1], attentions=True)
    assert enc.attentions is not None and enc.attentions.shape[0] == meta["n_layers"]


@pytest.mark.parametrize("pool", ["mean", "first"])
def test_a_traced_graph_pools_word_vectors_as_the_encodings_do(cache, pool):
    # batch work pools inside the graph's batches (no Encoding a text): the same word vectors
    from engine.text import to_word_text

    model = _bundled_berts()[0]
    texts = [to_word_text(t) for t in TEXTS]
    fast = Engine(cache_size=0, traced=True)
    ref = [e.word_vectors(pool) for e in Engine(cache_size=0).encode_words(model, texts)]
    top = len(ref[0]) - 1
    for layers in (None, (top, 0)):
        got = fast.word_vectors(model, texts, batch_size=2, layers=layers, pool=pool)
        assert fast.hidden_state_encoder(model, layers=layers).__class__.__name__ == \
            "TracedEncoder"
        for g, r in zip(got, ref):
            r = r if layers is None else r[list(layers)]
            assert g.shape == r.shape
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def test_a_cached_graph_runs_in_a_fresh_process_without_transformers(cache, tmp_path):
    """The point of the graph: a second process loads it with torch alone (no model load, no
    transformers import) and gets the vectors the model gives."""
    model = "minilm-l6"
    if model not in _bundled_berts():
        pytest.skip("minilm-l6 is not bundled here")
    Engine(cache_size=0, traced=True).hidden_state_encoder(model, progress=False)
    script = (
        "import json, sys, numpy as np\n"
        "from engine.api import Engine\n"
        "e = Engine(cache_size=0, traced=True)\n"
        f"encs = e.encode({model!r}, {TEXTS!r})\n"
        f"np.save({str(tmp_path / 'fresh.npy')!r}, np.concatenate("
        "[x.hidden_states for x in encs], axis=1))\n"
        "print(json.dumps({'transformers': 'transformers' in sys.modules,\n"
        f"                  'model_loaded': e.is_loaded({model!r})}}))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "CTXLENS_CACHE": str(cache)},
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"transformers": False,
                                                        "model_loaded": False}
    assert "tracing" not in proc.stderr      # the graph came from the cache
    ref = np.concatenate([x.hidden_states for x in Engine(cache_size=0).encode(model, TEXTS)],
                         axis=1)
    assert np.abs(np.load(tmp_path / "fresh.npy") - ref).max() <= 1e-5


def test_the_cli_traces_once_and_again_when_the_model_changes(zoo, cache, model_dir, tmp_path):
    path = zoo.copy("bert", model_dir / "tiny-bert")
    src = tmp_path / "in.txt"
    src.write_text("the bank was closed .\nthe river bank was muddy .\nshe sat down .\n")
    env = {**os.environ, "CTXLENS_CACHE": str(cache), "CTXLENS_MODEL_DIRS": str(model_dir)}

    def embed(name):
        proc = subprocess.run([sys.executable, "-m", "engine", "embed", "--model", str(path),
                               "--input", str(src), "--output", str(tmp_path / name)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr, np.load(tmp_path / name)["vectors"]

    err1, first = embed("a.npz")
    assert "tracing" in err1
    built = _graphs(cache)
    assert len(built) == 1
    err2, second = embed("b.npz")
    assert "tracing" not in err2 and _graphs(cache) == built
    np.testing.assert_array_equal(first, second)
    untraced = np.load(_embed_untraced(path, src, tmp_path))
    assert np.abs(first - untraced).max() <= 1e-5
    weights = path / "model.safetensors"
    tensors = load_file(weights)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 0.01         # the model changes (its mtime alone is no key)
    mtime = weights.stat().st_mtime_ns
    save_file(tensors, weights, metadata={"format": "pt"})
    os.utime(weights, ns=(mtime + 10**9, mtime + 10**9))     # a coarse clock
    err3, changed = embed("c.npz")
    assert "tracing" in err3 and not np.array_equal(changed, first)
    after = _graphs(cache)
    assert len(after) == 1 and after != built      # the old graph is gone


def _embed_untraced(path, src, tmp_path) -> Path:
    from engine.cli.embed import embed_pooled
    from engine.text import to_word_text

    texts = [to_word_text(line) for line in src.read_text().splitlines()]
    per_text = embed_pooled(Engine(cache_size=0), str(path), texts, 32, "mean")
    out = tmp_path / "untraced.npy"
    np.save(out, np.concatenate([wv.transpose(1, 0, 2) for wv in per_text]))
    return out


def test_a_graph_that_differs_from_the_model_is_not_kept(zoo, cache, model_dir, monkeypatch,
                                                         capsys):
    path = zoo.copy("bert", model_dir / "tiny-bert")
    monkeypatch.setattr(traced, "TOLERANCE", -1.0)     # no graph can pass
    fast = Engine(cache_size=0, traced=True)
    got = fast.encode(str(path), ["the bank was closed ."])
    assert "runs untraced" in capsys.readouterr().err
    folder, = _graphs(cache)
    assert not (folder / traced.GRAPH_FILE).exists() and traced.refused(folder)
    assert fast.is_loaded(str(path))                  # the model itself answered
    _assert_same(got, Engine(cache_size=0).encode(str(path), ["the bank was closed ."]))
    # the refusal is remembered: the next engine neither traces nor says so again
    monkeypatch.setattr(traced, "build", lambda *a, **k: pytest.fail("traced again"))
    again = Engine(cache_size=0, traced=True)
    assert again.hidden_state_encoder(str(path)) is again.adapter(str(path))
    err = capsys.readouterr().err
    assert "tracing" not in err and "untraced" not in err


def _bundled_gpts() -> list[str]:
    return [m for m, e in load_registry().items()
            if e.family == "gpt" and availability(e) == "bundled"]


# What each bundled GPT's graph does, as measured: SmolLM2's matches its model; gpt-brown's
# large GPT-2 residual stream differs by 4.6e-5 between the padded trace and the model's
# unpadded causal path (engine/families/hf/traced.py), so it runs untraced.
BUNDLED_GPT_TRACED = {"smollm2-135m": True, "gpt-brown": False}


# SmolLM2 (converted from its GGUF into this test's own cache, then traced): 51-132 s, slow by
# nature (make test-all)
@pytest.mark.parametrize("model", [pytest.param(m, marks=pytest.mark.slow_by_nature)
                                   if m == "smollm2-135m" else m for m in _bundled_gpts()])
def test_a_bundled_gpt_is_traced_where_its_graph_matches_and_runs_untraced_where_not(cache,
                                                                                     model):
    """Every bundled GPT gives the model's own tokens (byte-level BPE decoded as the engine
    reads them) and vectors: from the graph where it passes its check, else from the model,
    each as measured (BUNDLED_GPT_TRACED)."""
    assert model in BUNDLED_GPT_TRACED, f"say whether {model}'s traced graph matches it"
    fast = Engine(cache_size=0, traced=True)
    encoder = fast.hidden_state_encoder(model, progress=False)
    _assert_same(fast.encode(model, TEXTS), Engine(cache_size=0).encode(model, TEXTS))
    folder, = _graphs(cache)
    if BUNDLED_GPT_TRACED[model]:
        assert isinstance(encoder, traced.TracedEncoder)
        assert (folder / traced.GRAPH_FILE).is_file() and not traced.refused(folder)
    else:
        assert encoder is fast.adapter(model)
        assert "differs from the model" in traced.refused(folder)
        assert not (folder / traced.GRAPH_FILE).exists()


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_gpt_is_traced_where_its_graph_matches_and_runs_untraced_where_not(zoo, cache, model_dir,
                                                                            monkeypatch, arch):
    """A GPT built here (no bundled model needed): its graph matches and is kept; the same
    model whose graph is held to a bound no graph meets is refused, and the model answers."""
    path = str(zoo.copy(f"causal:{arch}", model_dir / arch))
    texts = TEXTS[:3]                 # what the tiny tokenizers and 64 positions take
    plain = Engine(cache_size=0).encode(path, texts)
    fast = Engine(cache_size=0, traced=True)
    assert isinstance(fast.hidden_state_encoder(path, progress=False), traced.TracedEncoder)
    _assert_same(fast.encode(path, texts), plain)
    folder, = _graphs(cache)
    assert (folder / traced.GRAPH_FILE).is_file() and not traced.refused(folder)
    import shutil

    shutil.rmtree(cache / "traced")
    monkeypatch.setattr(traced, "TOLERANCE", -1.0)
    refusing = Engine(cache_size=0, traced=True)
    assert refusing.hidden_state_encoder(path, progress=False) is refusing.adapter(path)
    folder, = _graphs(cache)
    assert "differs from the model" in traced.refused(folder)
    assert not (folder / traced.GRAPH_FILE).exists()
    _assert_same(refusing.encode(path, texts), plain)


def test_an_interrupted_build_leaves_nothing_and_a_broken_graph_is_rebuilt(zoo, cache, model_dir,
                                                                           monkeypatch):
    import torch

    path = zoo.copy("bert", model_dir / "tiny-bert")
    real_save = torch.jit.save

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch.jit, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Engine(cache_size=0, traced=True).hidden_state_encoder(str(path), progress=False)
    assert _graphs(cache) == [] and not list((cache / "traced").rglob(".tmp-*"))
    monkeypatch.setattr(torch.jit, "save", real_save)
    first = Engine(cache_size=0, traced=True).hidden_state_encoder(str(path), progress=False)
    assert isinstance(first, traced.TracedEncoder)
    for broken in (traced.GRAPH_FILE, traced.TOKENIZER_FILE):
        folder = Engine(cache_size=0, traced=True).hidden_state_encoder(
            str(path), progress=False).folder
        (folder / broken).write_bytes(b"not a graph, not a tokenizer")
        again = Engine(cache_size=0, traced=True)
        rebuilt = again.hidden_state_encoder(str(path), progress=False)
        assert isinstance(rebuilt, traced.TracedEncoder) and again.is_loaded(str(path))
        assert traced.load(rebuilt.folder, str(path), "bert") is not None


def test_only_cpu_float32_and_traceable_families_are_traced(cache):
    assert traced.usable("cpu", "float32")
    assert not traced.usable("cpu", "bfloat16")
    from engine.families import family

    assert family("bert").tracer == family("gpt").tracer == traced.__name__
    assert not family("elmo").tracer
