"""tests/zoo.py: a checkpoint is built once for its kind and options, by one process of
however many ask at once, whole or not at all, quietly; a copy is the test's own."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.zoo import BERT_SENTENCES, BUILDERS, Zoo

ROOT = Path(__file__).resolve().parent.parent


def test_the_same_kind_and_options_are_one_build(tmp_path):
    zoo = Zoo(tmp_path)
    first = zoo.path("bert")
    built = (first / "model.safetensors").stat().st_mtime_ns
    # the defaults spelt out are the same checkpoint
    assert zoo.path("bert", masked_lm=True, sentences=list(BERT_SENTENCES)) == first
    assert zoo.builds == 1
    again = Zoo(tmp_path)                      # another worker's Zoo finds it built
    assert again.path("bert") == first and again.builds == 0
    assert (first / "model.safetensors").stat().st_mtime_ns == built


def test_other_options_or_kinds_are_other_checkpoints(tmp_path):
    zoo = Zoo(tmp_path)
    folders = [zoo.path("bert"), zoo.path("bert", masked_lm=False),
               zoo.path("bert", sentences=["A mouse ran."]), zoo.path("causal:gpt2"),
               zoo.path("causal:llama"), zoo.path("arch:gpt2"), zoo.path("elmo"),
               zoo.path("elmo", seed=1)]
    assert len(set(folders)) == len(folders) == zoo.builds
    architectures = [json.loads((f / "config.json").read_text())["architectures"]
                     for f in folders[:2]]
    assert architectures == [["BertForMaskedLM"], ["BertModel"]]
    assert "mouse" in json.loads((folders[2] / "tokenizer.json").read_text())["model"]["vocab"]
    assert (folders[6] / "weights.hdf5").read_bytes() != (folders[7] / "weights.hdf5").read_bytes()


def test_an_unknown_option_is_refused_not_built(tmp_path):
    with pytest.raises(TypeError):
        Zoo(tmp_path).path("bert", masked=False)
    assert not list(tmp_path.iterdir())


def test_a_copy_is_the_tests_own(tmp_path):
    zoo = Zoo(tmp_path / "zoo")
    shared = zoo.path("causal:gpt2")
    before = {f.name: f.read_bytes() for f in shared.iterdir()}
    mine = zoo.copy("causal:gpt2", tmp_path / "mine")
    assert mine == tmp_path / "mine" and {f.name for f in mine.iterdir()} == set(before)
    (mine / "config.json").write_text("{}")
    (mine / "model.safetensors").unlink()
    (mine / "extra.txt").write_text("x")
    assert {f.name: f.read_bytes() for f in shared.iterdir()} == before
    assert zoo.builds == 1


def test_a_failed_build_leaves_no_folder(tmp_path, monkeypatch):
    def half_then_fail(path, arch):
        (Path(path) / "config.json").write_text("{}")
        raise RuntimeError("interrupted")

    monkeypatch.setitem(BUILDERS, "causal", half_then_fail)
    zoo = Zoo(tmp_path)
    with pytest.raises(RuntimeError, match="interrupted"):
        zoo.path("causal:gpt2")
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []
    assert zoo.builds == 0


def test_a_build_draws_no_progress_bar_and_leaves_the_bars_on(tmp_path, capfd):
    from transformers.utils import logging

    was = logging.is_progress_bar_enabled()
    logging.enable_progress_bar()        # on, as a user's run has them: save_pretrained draws
    try:
        Zoo(tmp_path).path("arch:gpt2")
        assert logging.is_progress_bar_enabled()
    finally:
        if not was:
            logging.disable_progress_bar()
    out, err = capfd.readouterr()
    assert "Writing model shards" not in out + err


# each process waits for "go" after its imports, so that both ask for the checkpoint at once
ASKER = """
import sys, time
from pathlib import Path
from tests.zoo import Zoo
root = Path(sys.argv[1])
(root / f"ready-{sys.argv[2]}").touch()
while not (root / "go").exists():
    time.sleep(0.01)
zoo = Zoo(root / "zoo")
print(zoo.path("elmo", seed=7), zoo.builds)
"""


def test_two_processes_asking_at_once_get_one_build(tmp_path):
    askers = [subprocess.Popen([sys.executable, "-c", ASKER, str(tmp_path), str(i)], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for i in range(2)]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{i}").exists() for i in range(2)):
        assert time.monotonic() < deadline and all(a.poll() is None for a in askers), \
            [a.communicate() for a in askers]
        time.sleep(0.05)
    (tmp_path / "go").touch()
    said = [a.communicate(timeout=120) for a in askers]
    assert [a.returncode for a in askers] == [0, 0], said
    (folder, a), (other, b) = (out.split() for out, _ in said)
    assert folder == other and sorted([a, b]) == ["0", "1"]
    assert (Path(folder) / "weights.hdf5").is_file()
    assert [p.name for p in (tmp_path / "zoo").iterdir() if not p.name.endswith(".lock")] == \
        [Path(folder).name]
