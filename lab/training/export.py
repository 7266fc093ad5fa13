"""Writing trained transformers to assets/models/<id>/ as fp16 safetensors, after checking that
fp16 rounding costs nothing measurable on the held-out metric."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable

import torch

MAX_FILE_BYTES = 16 * 2**20


def fp16_check(model: torch.nn.Module, metric: Callable[[torch.nn.Module], float]) -> dict:
    """The held-out metric with float32 weights and with weights rounded through float16."""
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.half().float())
    return {"float32": metric(model), "float16_rounded": metric(rounded)}


def write_safetensors_model(model, out: Path, fp16: bool = True) -> None:
    half = copy.deepcopy(model).half() if fp16 else model
    half.save_pretrained(out, safe_serialization=True)
    for f in out.iterdir():
        if f.stat().st_size > MAX_FILE_BYTES:
            raise RuntimeError(f"{f} is {f.stat().st_size} bytes; bundled files stay under 16 MiB")
