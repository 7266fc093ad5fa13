"""Flags that several commands share: the model, the device and dtype, a list of layers."""
from __future__ import annotations

import argparse

from engine.errors import EngineError


def model_args(sp) -> None:
    sp.add_argument("--model", required=True, help="registry id (see `ctxlens models`), a "
                    "Hugging Face hub id (org/name) or a model directory under "
                    "CTXLENS_MODEL_DIRS")
    device_args(sp)


def device_args(sp) -> None:
    sp.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    sp.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])


def layers_arg(value: str) -> tuple[int, ...] | None:
    """--layers for argparse: engine.families.base.parse_layers, its refusal a usage error."""
    from engine.families.base import parse_layers

    try:
        return parse_layers(value)
    except EngineError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
