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
    assert eng.resolved("toy-1").capabilities == {"hidden_states"}     # no attention


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
    assert engine.family_name(str(folder)) == "toy"
    assert engine.resolved(str(folder)).capabilities == {"hidden_states"}
    assert engine.encode(str(folder), ["The bank ."])[0].family == "toy"
    assert toy_family == [folder]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelUnavailable, match="no model files that a known family reads "
                                               r"\(ELMo, GPT, BERT, Toy\)"):
        engine.family_name(str(empty))


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


def test_what_a_model_can_do_is_what_its_checkpoint_gives_within_its_familys_row():
    from engine.families import ENCODER, WITH_LM, WITH_MLM_HEAD
    from engine.registry import ModelEntry

    plain = ModelEntry(id="b", family="bert")
    assert plain.capabilities == {"hidden_states", "attention", "query_key"}
    mlm = ModelEntry(id="m", family="bert", capabilities=WITH_MLM_HEAD)
    assert {"masked_lm", "fill_blank"} <= mlm.capabilities and "next_word" not in mlm.capabilities
    gpt = ModelEntry(id="g", family="gpt", capabilities=WITH_LM)
    assert [c for c in ("masked_lm", "fill_blank", "next_word", "previous_word", "logit_lens")
            if c in gpt.capabilities] == ["fill_blank", "next_word", "logit_lens"]
    elmo = ModelEntry(id="e", family="elmo", capabilities=ENCODER)
    assert "scalar_mix" in elmo.capabilities and "next_word" not in elmo.capabilities
    # what the architecture rules out is left out, with its reason kept beside
    deberta = ModelEntry(id="d", family="bert", capabilities=WITH_MLM_HEAD,
                         cannot={"query_key": "relative positions"})
    assert "query_key" not in deberta.capabilities and deberta.cannot == {
        "query_key": "relative positions"}
    assert ModelEntry(id="x", family="not-registered").capabilities == frozenset()


def test_a_users_registry_keeps_its_fills_blank_words(tmp_path):
    """users' models.toml files say what a checkpoint fills with `fills_blank`; it is read once,
    into the entry's capabilities, and a word it does not know is one clear error."""
    from engine.registry import load_registry

    toml = tmp_path / "models.toml"
    toml.write_text('[models.a]\nfamily = "bert"\nfills_blank = "masked-lm"\n'
                    '[models.b]\nfamily = "gpt"\nfills_blank = "both-sides"\n'
                    '[models.c]\nfamily = "bert"\n')
    got = load_registry(toml, user=None)
    assert "masked_lm" in got["a"].capabilities and "next_word" in got["b"].capabilities
    assert "fill_blank" not in got["c"].capabilities
    toml.write_text('[models.a]\nfamily = "bert"\nfills_blank = "mlm"\n')
    with pytest.raises(EngineError, match="fills_blank = 'mlm'"):
        load_registry(toml, user=None)
