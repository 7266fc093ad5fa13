"""Encodings kept on disk (engine.cache.EncodingStore): a later Engine (or process) gets the
same arrays without loading the model; a changed model, a torn file or another text is a miss;
the folder stays under its cap."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.api import Engine, encoding_store
from engine.cache import EncodingStore
from engine.errors import EngineError
from tests.zoo import BERT_SENTENCES

ROOT = Path(__file__).resolve().parents[2]
TEXTS = list(BERT_SENTENCES[:3])


@pytest.fixture
def bert(zoo, model_dir, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path / "cache"))  # digests of its files
    return str(zoo.copy("bert", model_dir / "tiny-bert").resolve())


def _store(tmp_path, mb: float = 64) -> EncodingStore:
    return EncodingStore(tmp_path / "store", int(mb * 2**20))


def _same(got, ref):
    for g, r in zip(got, ref):
        assert (g.model_id, g.family, g.text, g.words, g.tokens, g.layer_names) == \
               (r.model_id, r.family, r.text, r.words, r.tokens, r.layer_names)
        np.testing.assert_array_equal(g.token_to_word, r.token_to_word)
        np.testing.assert_array_equal(g.hidden_states, r.hidden_states)


def test_a_later_engine_reads_the_encodings_without_loading_the_model(bert, tmp_path):
    first = Engine(store=_store(tmp_path))
    ref = first.encode(bert, TEXTS)
    assert len(list((tmp_path / "store").glob("*.npz"))) == len(TEXTS)
    later = Engine(store=_store(tmp_path))
    assert later.has_encodings(bert, TEXTS)
    _same(later.encode(bert, TEXTS), ref)
    assert not later.is_loaded(bert)
    # a text it has not seen, or one asking for attention maps (not stored), runs the model
    assert not later.has_encodings(bert, TEXTS + ["the bank ."])
    enc, = later.encode(bert, TEXTS[:1], attentions=True)
    assert later.is_loaded(bert) and enc.attentions is not None
    # ... and the encoding with maps replaces the stored one: a third engine gets the maps
    third = Engine(store=_store(tmp_path))
    got, = third.encode(bert, TEXTS[:1], attentions=True)
    assert not third.is_loaded(bert)
    np.testing.assert_array_equal(got.attentions, enc.attentions)


def test_a_changed_model_is_a_miss(bert, tmp_path):
    Engine(store=_store(tmp_path)).encode(bert, TEXTS)
    cfg = Path(bert) / "config.json"
    data = json.loads(cfg.read_text())
    data["layer_norm_eps"] = 1e-3        # a different model, same folder and id
    cfg.write_text(json.dumps(data))
    later = Engine(store=_store(tmp_path))
    assert not later.has_encodings(bert, TEXTS)
    fresh = later.encode(bert, TEXTS)
    assert later.is_loaded(bert)
    assert len(list((tmp_path / "store").glob("*.npz"))) == 2 * len(TEXTS)
    _same(fresh, Engine().encode(bert, TEXTS))


def test_a_torn_file_is_computed_again_and_replaced(bert, tmp_path):
    ref = Engine(store=_store(tmp_path)).encode(bert, TEXTS[:1])
    path, = (tmp_path / "store").glob("*.npz")
    path.write_bytes(path.read_bytes()[:200])
    later = Engine(store=_store(tmp_path))
    _same(later.encode(bert, TEXTS[:1]), ref)
    assert later.is_loaded(bert)
    _same(Engine(store=_store(tmp_path)).encode(bert, TEXTS[:1]), ref)   # whole again


def test_a_file_naming_another_text_is_not_served(bert, tmp_path):
    store = _store(tmp_path)
    eng = Engine(store=store)
    eng.encode(bert, TEXTS[:2])
    a, b = (tmp_path / "store" / f"{store.name(eng._store_identity(bert) + k)}.npz"
            for k in [(t.text, t.words, eng.options) for t in map(_word_text, TEXTS[:2])])
    a.write_bytes(b.read_bytes())            # the first text's name now holds the second's
    later = Engine(store=_store(tmp_path))
    got, = later.encode(bert, TEXTS[:1])
    assert got.text == TEXTS[0] and later.is_loaded(bert)


def _word_text(t):
    from engine.text import to_word_text
    return to_word_text(t)


def test_the_folder_stays_under_its_cap(bert, tmp_path):
    Engine(store=_store(tmp_path)).encode(bert, TEXTS[:1])
    size = next((tmp_path / "store").glob("*.npz")).stat().st_size
    cap = 3.5 * size / 2**20                 # room for three files
    eng = Engine(store=_store(tmp_path, cap))
    texts = [f"the bank {w} ." for w in ("sat", "river", "money", "closed", "open", "sold")]
    eng.encode(bert, texts)
    files = list((tmp_path / "store").glob("*.npz"))
    assert sum(p.stat().st_size for p in files) <= cap * 2**20
    assert 1 <= len(files) < len(texts)


def test_no_store_for_half_precision_or_without_one(bert, tmp_path):
    assert Engine(dtype="float16", store=_store(tmp_path))._store_identity(bert) is None
    assert Engine()._store_identity(bert) is None
    assert Engine(device="cpu", store=_store(tmp_path))._store_identity(bert) is not None


def test_a_gpu_host_with_its_gpus_hidden_runs_on_the_cpu_and_keeps_the_store(bert, tmp_path,
                                                                             monkeypatch):
    """CUDA_VISIBLE_DEVICES="" on a GPU host: the run is on the CPU, so its encodings are
    stored (the device and the store ask engine.families.base.gpu_driver_present alone)."""
    from engine.families import base

    node = tmp_path / "nvidiactl"
    node.touch()
    monkeypatch.setattr(base, "GPU_DEVICE_NODES", (str(node),))    # a driver is loaded
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert not base.gpu_driver_present() and base.resolve_device("auto") == "cpu"
    assert Engine(store=_store(tmp_path))._store_identity(bert) is not None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert base.gpu_driver_present()
    assert Engine(store=_store(tmp_path))._store_identity(bert) is None    # maybe a GPU run


def test_only_the_family_base_asks_whether_there_is_a_gpu():
    owners = {p.relative_to(ROOT).as_posix() for p in (ROOT / "engine").rglob("*.py")
              if any(k in p.read_text() for k in ("CUDA_VISIBLE_DEVICES", "/proc/driver",
                                                   "/dev/nvidia"))}
    assert owners == {"engine/families/base.py"}


def test_the_apps_store_follows_its_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path))
    monkeypatch.setenv("CTXLENS_ENCODING_CACHE_MB", "0")
    assert encoding_store() is None
    monkeypatch.setenv("CTXLENS_ENCODING_CACHE_MB", "8")
    store = encoding_store()
    assert store.folder == tmp_path / "encodings" and store.max_bytes == 8 * 2**20
    monkeypatch.setenv("CTXLENS_ENCODING_CACHE_MB", "lots")
    with pytest.raises(EngineError, match="CTXLENS_ENCODING_CACHE_MB"):
        encoding_store()


def test_a_fresh_process_reads_them_without_importing_torch(bert, tmp_path, model_dir):
    ref = Engine(store=encoding_store()).encode(bert, TEXTS)
    script = (
        "import json, sys, numpy as np\n"
        "from engine.api import Engine, encoding_store\n"
        "e = Engine(store=encoding_store())\n"
        f"encs = e.encode({bert!r}, {TEXTS!r})\n"
        f"np.save({str(tmp_path / 'fresh.npy')!r}, np.concatenate("
        "[x.hidden_states for x in encs], axis=1))\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'loaded': e.is_loaded("
        f"{bert!r})}}))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "CTXLENS_CACHE": str(tmp_path / "cache"),
                               "CTXLENS_MODEL_DIRS": str(model_dir)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"torch": False, "loaded": False}
    np.testing.assert_array_equal(np.load(tmp_path / "fresh.npy"), np.concatenate(
        [x.hidden_states for x in ref], axis=1))


def test_an_encoding_larger_than_the_cap_is_not_written(bert, tmp_path, monkeypatch):
    """A long sentence's attention maps (370 MB on SmolLM2) were written whole to a 256 MB
    store, then pruned at once; the other files went with them."""
    store = _store(tmp_path)
    Engine(store=store).encode(bert, TEXTS[:1])
    kept = list((tmp_path / "store").glob("*.npz"))
    written = []
    monkeypatch.setattr(np, "savez", lambda *a, **k: written.append(1))
    big = Engine(store=_store(tmp_path, mb=0.001)).encode(bert, TEXTS[1:2])[0]
    assert big.hidden_states.nbytes > 0.001 * 2**20 and written == []
    assert list((tmp_path / "store").glob("*.npz")) == kept
