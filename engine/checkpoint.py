"""What a Hugging Face checkpoint is, read from its files before any of it loads.

The config decides by mechanism, as transformers' own Auto* mappings do: a `*ForMaskedLM` is a
masked-LM encoder (shown where BERTs are), a `*ForCausalLM` / `*LMHeadModel` a left-to-right LM
(shown where GPTs are), any other encoder a BERT-like encoder without a head. What would run code
from the checkpoint (custom modelling code, pickled weights) is refused here, before transformers
sees the folder; the memory a load needs is estimated from the safetensors headers alone.
"""
from __future__ import annotations

import functools
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelUnavailable

PICKLED = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
# bytes per parameter of each safetensors dtype, and of the dtypes a load may ask for
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
               "float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class Kind:
    """What a checkpoint is: the family whose views show it and how it fills a blank."""

    family: str          # "bert" (an encoder) or "gpt" (a left-to-right LM)
    fills_blank: str     # "masked-lm", "both-sides" or ""
    architecture: str    # the config's first architecture, or its model_type


def read_config(folder: Path) -> dict | None:
    f = Path(folder) / "config.json"
    if not f.is_file():
        return None
    try:
        cfg = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelUnavailable(f"{f} is not a readable JSON config: {err}") from err
    if not isinstance(cfg, dict):
        raise ModelUnavailable(f"{f} is not a model config (a JSON object)")
    return cfg


@functools.lru_cache(maxsize=1)
def _mappings() -> tuple[set[str], set[str], set[str]]:
    """model_types with a masked-LM head, with a causal-LM head, and every known one."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES)

    return (set(MODEL_FOR_MASKED_LM_MAPPING_NAMES), set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
            set(CONFIG_MAPPING_NAMES))


def kind_of(cfg: dict, where: str = "the model") -> Kind:
    """The Kind a config declares, or a one-line refusal naming what it is instead. The named
    architectures decide where they can; transformers' mappings (whose import loads torch)
    are read only for what they leave open: custom code, or a checkpoint without a head."""
    archs = [a for a in cfg.get("architectures") or [] if isinstance(a, str)]
    mtype = str(cfg.get("model_type", ""))
    name = archs[0] if archs else mtype or "?"
    if cfg.get("auto_map") and mtype not in _mappings()[2]:
        raise ModelUnavailable(
            f"{where} needs its own modelling code ({mtype!r}, trust_remote_code), which "
            "ctxlens never runs; pick a checkpoint of an architecture transformers ships")
    if cfg.get("is_encoder_decoder"):
        raise ModelUnavailable(f"{where} is an encoder-decoder ({name}); ctxlens shows "
                               "encoders (BERT-like) and decoders (GPT-like)")
    if any(a.endswith("ForMaskedLM") for a in archs):
        return Kind("bert", "masked-lm", name)
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return Kind("gpt", "both-sides", name)
    if not archs and not mtype:
        raise ModelUnavailable(f"{where}: its config.json names no architecture or model_type")
    masked, causal, known = _mappings()
    if mtype and mtype not in known:
        raise ModelUnavailable(f"{where}: transformers does not know the architecture "
                               f"{mtype!r}; upgrading transformers may add it")
    if mtype in causal and mtype not in masked:
        if not archs:
            return Kind("gpt", "both-sides", mtype)
        raise ModelUnavailable(f"{where} is a decoder without its LM head ({name}); ctxlens "
                               "reads decoders through their LM head: use the *ForCausalLM "
                               "checkpoint it was fine-tuned from")
    return Kind("bert", "", name)


def check_safe(folder: Path) -> None:
    """Refuse a folder whose weights are only pickled: unpickling runs whatever code the file
    names, and transformers would fall back to it where no safetensors file exists."""
    folder = Path(folder)
    if any(folder.glob("*.safetensors")):
        return
    pickled = sorted(p.name for pattern in PICKLED for p in folder.glob(pattern))
    if pickled:
        raise ModelUnavailable(
            f"{folder} holds pickled weights only ({pickled[0]}); unpickling can run code, so "
            "ctxlens loads safetensors only: convert it once with "
            "`model.save_pretrained(dir, safe_serialization=True)` where you trust the file")
    raise ModelUnavailable(f"{folder} holds no *.safetensors weights")


def parameter_bytes(folder: Path) -> tuple[int, int]:
    """(parameters, bytes as stored) of a folder's safetensors files, from their headers only."""
    n_params = n_bytes = 0
    for f in sorted(Path(folder).glob("*.safetensors")):
        with open(f, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            if size > 100 * 2**20:
                raise ModelUnavailable(f"{f} has a malformed safetensors header")
            header = json.loads(fh.read(size))
        for key, t in header.items():
            if key == "__metadata__" or not isinstance(t, dict):
                continue
            count = 1
            for d in t.get("shape", []):
                count *= int(d)
            n_params += count
            n_bytes += count * DTYPE_BYTES.get(t.get("dtype", "F32"), 4)
    return n_params, n_bytes


def free_memory_bytes(device: str) -> int:
    """Memory a load may take: the GPU's free memory on CUDA, else MemAvailable of the host."""
    if device == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


# a load holds the weights plus activations and allocator slack: asking for this share of what
# is free leaves the server and the other sessions room
MEMORY_SHARE = 0.8


def check_memory(folder: Path, dtype: str, device: str, model_id: str) -> None:
    """One line with the estimate and the options when the weights, in `dtype`, would not fit
    in what is free: an out-of-memory kill would take the whole server down with it."""
    n_params, _ = parameter_bytes(folder)
    need = n_params * DTYPE_BYTES.get(dtype, 4)
    free = free_memory_bytes(device)
    if need > MEMORY_SHARE * free:
        where = "GPU memory" if device == "cuda" else "memory"
        options = ("a smaller model" if dtype != "float32" or device != "cuda"
                   else "--dtype bfloat16 (half the memory)")
        if device != "cuda":
            options = "a machine with a GPU and --dtype bfloat16, or a smaller model"
        raise ModelUnavailable(
            f"{model_id} has {n_params / 1e9:.2f}B parameters: about {need / 2**30:.1f} GB in "
            f"{dtype}, and {free / 2**30:.1f} GB of {where} is free; use {options}")
