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


def ablate_args(sp) -> None:
    """--ablate and --ablate-mode: the parts knocked out while the command runs
    (engine.components.ablation)."""
    from engine.components.result import ABLATION_MODES

    sp.add_argument("--ablate", metavar="SPEC", help='parts knocked out meanwhile, from 1, comma '
                    'separated: "L.H" head H of layer L, "L.*" all of layer L\'s heads, '
                    '"L.mlp" its feed-forward block (e.g. "3.2,5.*,6.mlp")')
    sp.add_argument("--ablate-mode", choices=ABLATION_MODES, default="zero",
                    help="zero (default): their outputs set to zero; mean: to their mean over "
                         "a fixed set of 16 everyday sentences")


def ablated_fields(engine, model: str, ablate: str | None, mode: str) -> dict:
    """{"ablated": the canonical spec, "ablate_mode": mode} when parts are knocked out, else
    {} (the JSON of a run without --ablate keeps its shape)."""
    if not ablate:
        return {}
    from engine.components import ablation

    parsed = ablation.parse(ablate, ablation.sites(engine.adapter(model)))
    return {"ablated": parsed.spec, "ablate_mode": mode}
