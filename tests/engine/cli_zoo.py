"""What the CLI tests share: a tiny BERT and GPT-2 (tests/arch_zoo.py) in one folder that is
then configured as a model directory, and one run of the CLI as (exit code, stdout, stderr)."""
from __future__ import annotations

from pathlib import Path

from engine.cli import main
from tests.arch_zoo import save_arch


def bert_and_gpt2(tmp_path_factory, label: str) -> dict[str, Path]:
    root = tmp_path_factory.mktemp(label)
    return {"bert": save_arch("bert", root / "bert"), "gpt2": save_arch("gpt2", root / "gpt2")}


def folder_of(models: dict[str, Path]) -> str:
    """The model directory to configure (CTXLENS_MODEL_DIRS) for `models`."""
    return str(next(iter(models.values())).parent)


def run(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err
