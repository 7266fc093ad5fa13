"""Whether a local folder holds an ELMo checkpoint, and what it gives. Kept apart from the
adapter (which imports torch) so that the registry can ask before anything loads."""
from __future__ import annotations

from pathlib import Path

from engine.families import ENCODER, WITH_LM, Gives


def claims_dir(path: Path) -> bool:
    return (path / "options.json").exists()


def gives_of_dir(path: Path) -> Gives:
    # both LMs need the softmax over the vocabulary, which only a trained LM's folder ships
    return Gives(WITH_LM if (path / "lm_softmax.safetensors").exists() else ENCODER)
