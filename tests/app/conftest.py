"""App tests run the real pages against the real engine.api.Engine and tiny random real
checkpoints (tests/zoo.py), copied once per session into a configured model directory
(CTXLENS_MODEL_DIRS) and chosen in the sidebar through the URL. Tests marked slow load the
bundled models instead."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import streamlit as st

from app import engine_access

from tests.app import helpers

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "app" / "pages"

# Sentences typed by the app tests, besides the presets: the tiny vocabularies cover them all.
TEST_SENTENCES = (
    "The bank is open.", "A river bank.", "Nothing here.", "The bank closed.",
    "Bank holiday today.", "Bank day.", "A brand new line about a mouse.", "Cats sleep.",
    "Dogs bark loudly.", "A bat flew.", "He swung the bat.", "The bat slept.",
    "The mouse number 0 ran.", "word", "mouse here", "a mouse",
)


@dataclass(frozen=True)
class TinyModels:
    """Model ids (folder paths) of the tiny checkpoints, one per sidebar family."""

    root: Path
    elmo: str
    gpt: str
    bert: str          # no masked-LM head, like the bundled minilm-l6
    bert_mlm: str

    def query(self) -> dict[str, str]:
        return {"model_elmo": self.elmo, "model_gpt": self.gpt, "model_bert": self.bert}


def vocabulary_sentences() -> tuple[str, ...]:
    with open(ROOT / "assets" / "presets.toml", "rb") as f:
        presets = tomllib.load(f)["presets"]
    return tuple(s for p in presets.values() for s, _ in p["sentences"]) + TEST_SENTENCES


@pytest.fixture(scope="session")
def tiny_checkpoints(zoo, tmp_path_factory) -> TinyModels:
    root = tmp_path_factory.mktemp("tiny-models")
    sentences = vocabulary_sentences()
    return TinyModels(
        root=root,
        elmo=str(zoo.copy("elmo", root / "elmo", sentences=sentences).resolve()),
        gpt=str(zoo.copy("causal:gpt2", root / "gpt2", corpus=sentences,
                         vocab_size=1000).resolve()),
        bert=str(zoo.copy("bert", root / "bert", masked_lm=False,
                          sentences=sentences).resolve()),
        bert_mlm=str(zoo.copy("bert", root / "bert-mlm", sentences=sentences).resolve()))


@pytest.fixture
def tiny_engine(tiny_checkpoints, monkeypatch) -> TinyModels:
    """The real Engine with the tiny models offered in the sidebar and chosen by every page
    that tests/app/helpers opens. The Engine (with its loaded models) is kept across tests;
    derived results (the Engine's result cache) are cleared so each test computes its own."""
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(tiny_checkpoints.root))
    monkeypatch.setattr(helpers, "DEFAULT_QUERY", tiny_checkpoints.query())
    engine_access.get_engine().results.clear()
    yield tiny_checkpoints
    engine_access.get_engine().results.clear()
