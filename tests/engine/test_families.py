"""The family table: the engine loads any registered family, docs/development.md shows the
table."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from engine import families
from engine.api import Engine
from engine.errors import EngineError
from engine.registry import ModelEntry
from engine.result import Encoding

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def toy_family(monkeypatch):
    from tests import toy_family

    loaded = []
    real_load = toy_family.load

    def load(model_id, path, options, progress=True):
        loaded.append(Path(path))
        return real_load(model_id, path, options, progress)

    monkeypatch.setattr(toy_family, "load", load)
    families.register(toy_family.FAMILY)
    yield loaded
    families.unregister("toy")


def test_a_family_registered_at_run_time_loads_through_the_engine(toy_family, tmp_path,
                                                                   monkeypatch):
    folder = tmp_path / "toy-model"
    folder.mkdir()
    monkeypatch.setattr("engine.registry.ASSETS", tmp_path)
    eng = Engine(device="cpu")
    eng.registry["toy-1"] = ModelEntry(id="toy-1", family="toy", name="Toy", licence="-",
                                       size="0", bundled=True, path="toy-model")
    enc = eng.encode("toy-1", ["a b c"])[0]
    assert toy_family == [folder]
    assert enc.family == "toy" and enc.hidden_states.shape == (3, 3, 4)
    assert families.family("toy").can("hidden_states") and not families.family("toy").can("attention")


def test_a_local_folder_of_a_new_family_is_recognised_by_its_own_probe(toy_family, tmp_path,
                                                                      monkeypatch):
    """The registry asks each family's folder probe, so a folder of the new family's files
    loads by path with no edit in the registry; a folder no family reads is one clear error
    that names the families."""
    from engine.errors import ModelUnavailable

    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(tmp_path))
    folder = tmp_path / "my-toy"
    folder.mkdir()
    (folder / "toy.json").write_text("{}")
    engine = Engine(cache_size=0)
    assert engine.family(str(folder)) == "toy"
    assert engine.fills_blank(str(folder)) == ""
    assert engine.encode(str(folder), ["The bank ."])[0].family == "toy"
    assert toy_family == [folder]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelUnavailable, match="no model files that a known family reads "
                                               r"\(ELMo, GPT, BERT, Toy\)"):
        engine.family(str(empty))


def test_an_unknown_family_is_one_clear_error():
    with pytest.raises(EngineError, match=r"unknown model family 'nope' \(known: elmo, gpt, bert"):
        families.family("nope")
    with pytest.raises(ValueError, match="unknown capabilities"):
        families.Family("x", "X", "x", frozenset({"telepathy"}))


def test_results_only_accept_registered_families():
    with pytest.raises(ValueError, match="family"):
        Encoding(model_id="m", family="toy", text="a", words=("a",), tokens=("a",),
                 token_to_word=np.zeros(1, int), hidden_states=np.zeros((1, 1, 2), np.float32))


def test_the_docs_show_the_table_as_it_is():
    readme = (ROOT / "docs" / "development.md").read_text()
    readme = readme[readme.index("The family table"):readme.index("tests/test_layering.py")]
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| ([\w.]+)[^|]*\| ([^|]+) \|$", readme, re.M)
    shown = {name: (label, module, {c.strip().lower().replace(" ", "_") for c in caps.split(",")})
             for name, label, module, caps in rows}
    actual = {f.name: (f.label, f.module, set(f.capabilities))
              for f in families.FAMILIES.values()}
    assert shown == actual


def test_what_a_model_can_do_is_its_familys_row_less_the_heads_its_checkpoint_lacks():
    from engine.registry import ModelEntry, model_can

    plain = ModelEntry(id="b", family="bert")
    assert model_can(plain, "attention") and not model_can(plain, "masked_lm")
    assert not model_can(plain, "fill_blank")
    mlm = ModelEntry(id="m", family="bert", fills_blank="masked-lm")
    assert model_can(mlm, "masked_lm") and model_can(mlm, "fill_blank")
    assert not model_can(mlm, "next_word")
    gpt = ModelEntry(id="g", family="gpt", fills_blank="both-sides")
    assert [c for c in ("masked_lm", "fill_blank", "next_word", "previous_word", "logit_lens")
            if model_can(gpt, c)] == ["fill_blank", "next_word", "logit_lens"]
    elmo = ModelEntry(id="e", family="elmo")
    assert model_can(elmo, "scalar_mix") and not model_can(elmo, "next_word")
