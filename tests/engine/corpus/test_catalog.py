"""Where and how the app builds Brown for a model: folders, default layers, the size shown."""
import pytest

from engine.corpus import catalog
from engine.registry import load_registry


@pytest.mark.parametrize("n_states,expected", [
    (3, [0, 1, 2]),                           # elmo-brown: every layer
    (7, list(range(7))),                      # minilm-l6: every layer
    (13, [0, 2, 4, 6, 8, 10, 12]),            # bert-base
    (31, [0, 5, 10, 15, 20, 25, 30]),         # smollm2-135m
])
def test_default_layers_are_every_layer_or_seven_evenly_spaced_from_the_bottom_to_the_top(
        n_states, expected):
    assert catalog.default_layers(n_states) == expected


def test_each_choice_of_layers_has_its_own_folder_and_every_layer_keeps_the_old_name(
        tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "DEFAULT_DIR", tmp_path)
    every = catalog.brown_index_path("minilm-l6")
    assert every == tmp_path / "brown-minilm-l6"
    assert catalog.brown_index_path("minilm-l6", range(7), 7) == every
    assert catalog.brown_index_path("minilm-l6", [6, 0, 3], 7) == \
        tmp_path / "brown-minilm-l6-L0-3-6"
    assert catalog.brown_index_path("minilm-l6", [0, 3, 6], 7) != \
        catalog.brown_index_path("minilm-l6", [0, 3], 7)
    # a folder model's id is a path: it becomes one folder name, not a path under DEFAULT_DIR
    odd = catalog.brown_index_path("/models/my bert", [0])
    assert odd.parent == tmp_path and "/" not in odd.name


def test_every_installed_model_is_offered_with_the_suggested_one_first():
    registry = load_registry()
    models = catalog.brown_index_models(registry)
    assert models[0] == catalog.BROWN_INDEX_MODEL
    assert len(models) == len(set(models)) and set(models) <= set(registry)
    assert {"minilm-l6", "smollm2-135m", "elmo-brown"} <= set(models)    # the page's defaults


def test_the_size_estimate_matches_the_measured_brown_index():
    """The page's estimate against the Brown index the corpus bench built (minilm-l6)."""
    import json
    from pathlib import Path

    built = json.loads((Path(__file__).resolve().parents[3] / "results" / "corpus.json")
                       .read_text())["build"]
    assert built["model"] == "minilm-l6" and built["occurrences"] == catalog.BROWN_OCCURRENCES
    assert catalog.bytes_per_row(384) == pytest.approx(built["bytes_per_row"], rel=0.02)
    assert catalog.bytes_per_row(576) > catalog.bytes_per_row(384) > catalog.bytes_per_row(256)


def test_the_apps_indexes_live_under_ctxlens_cache(tmp_path):
    """CTXLENS_CACHE moves converted weights and traced graphs; the app's indexes follow it
    (they stayed in ~/.cache/ctxlens/indexes)."""
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "from engine.corpus import catalog; "
                          "print(catalog.brown_index_path('minilm-l6'))"],
                         env={**os.environ, "CTXLENS_CACHE": str(tmp_path / "c")},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(tmp_path / "c" / "indexes" / "brown-minilm-l6")
