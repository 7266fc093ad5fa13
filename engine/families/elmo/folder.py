"""Whether a local folder holds an ELMo checkpoint, and whether it can fill a blank. Kept apart
from the adapter (which imports torch) so that the registry can ask before anything loads."""
from __future__ import annotations

from pathlib import Path


def claims_dir(path: Path) -> bool:
    return (path / "options.json").exists()


def fills_blank_of_dir(path: Path) -> str:
    # both LMs need the softmax over the vocabulary, which only a trained LM's folder ships
    return "both-sides" if (path / "lm_softmax.safetensors").exists() else ""
