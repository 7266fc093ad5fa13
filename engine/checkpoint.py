"""What a Hugging Face checkpoint is, read from its files before any of it loads.

The config decides by mechanism, as transformers' own Auto* mappings do: a `*ForMaskedLM` is a
masked-LM encoder (shown where BERTs are), a `*ForCausalLM` / `*LMHeadModel` a left-to-right LM
(shown where GPTs are), any other text encoder a BERT-like encoder without a head; a model of
images, audio or video is refused. What would run code from the checkpoint (custom modelling
code, pickled weights) is refused here, before transformers sees the folder, and so is a folder
without a tokenizer; every safetensors header is checked against its file before a library
reads it (a corrupt file is one line naming it). The memory a load needs is estimated from the
headers first, then (engine/families/hf/loading.py, before the model is built) from the count
of parameters the config describes, which the weights present must also nearly reach.
"""
from __future__ import annotations

import functools
import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelUnavailable
from engine.families import ENCODER, WITH_LM, WITH_MLM_HEAD, Gives

PICKLED = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
# bytes per parameter of each safetensors dtype, and of the dtypes a load may ask for
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
               "U64": 8, "U32": 4, "U16": 2, "F8_E8M0": 1, "C64": 8,
               "float32": 4, "float16": 2, "bfloat16": 2}
# the safetensors dtypes a header may name: those above, and the packed ones whose elements
# take less than a byte (their byte length is the packing's, not checked here)
SAFETENSORS_DTYPES = frozenset(k for k in DTYPE_BYTES if k.isupper()) | {"F4", "F6_E2M3",
                                                                         "F6_E3M2"}
# a header longer than this is no model's (a 70B model's is well under 1 MB)
MAX_HEADER_BYTES = 100 * 2**20
# files that give a folder a tokenizer: the fast tokenizer itself, or the vocabulary files
# transformers builds one from (WordPiece, byte-level BPE, SentencePiece, tiktoken)
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "*.model", "*.tiktoken")


@dataclass(frozen=True)
class Kind:
    """What a checkpoint is: the family whose views show it and what it gives."""

    family: str          # "bert" (an encoder) or "gpt" (a left-to-right LM)
    gives: Gives         # its head's capabilities, and what its architecture rules out
    architecture: str    # the config's first architecture, or its model_type


# Architectures whose attention scores are more than a scaled query·key, by model_type: the
# neuron view would show numbers the model never used (He et al. 2021, DeBERTa section 3.1:
# content-to-position and position-to-content terms are added to each score).
NOT_QUERY_KEY = {
    "deberta": "DeBERTa adds relative-position terms to query·key, so its attention scores "
               "cannot be split into query and key vectors",
    "deberta-v2": "DeBERTa adds relative-position terms to query·key, so its attention scores "
                  "cannot be split into query and key vectors",
}


# Decoders whose blocks normalise the residual stream after each addition (post-norm), by
# model_type, and OPT's post-norm variant (opt-350m: do_layer_norm_before = false): the final
# stream is no sum of the heads' and blocks' outputs, so no direct logit attribution
POST_NORM = frozenset({"bert", "roberta", "xlm-roberta", "electra", "camembert",
                       "bert-generation"})
NOT_A_SUM = ("a post-norm decoder normalises the residual stream after every attention and "
             "feed-forward addition, so its logit is no sum of its heads' and blocks' outputs")


def _gives(capabilities: frozenset[str], mtype: str, cfg: dict | None = None) -> Gives:
    why = NOT_QUERY_KEY.get(mtype)
    cannot = {"query_key": why} if why else {}
    if cfg is not None and (mtype in POST_NORM or cfg.get("do_layer_norm_before") is False):
        cannot["direct_logit"] = NOT_A_SUM
    return Gives(capabilities, cannot)


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


# the transformers tasks of text models, and the words that name the tasks of other inputs
TEXT_TASKS = ("MASKED_LM", "CAUSAL_LM", "SEQUENCE_CLASSIFICATION", "TOKEN_CLASSIFICATION",
              "QUESTION_ANSWERING", "MULTIPLE_CHOICE", "TEXT_ENCODING")
OTHER_INPUTS = ("IMAGE", "VIDEO", "AUDIO", "SPEECH", "CTC", "VISION", "VISUAL", "DEPTH",
                "OBJECT_DETECTION", "SEGMENTATION", "KEYPOINT", "POSE", "BACKBONE",
                "TIME_SERIES", "SPECTROGRAM", "WAVEFORM", "MULTIMODAL")


@functools.lru_cache(maxsize=1)
def _input_kinds() -> tuple[set[str], set[str]]:
    """model_types transformers lists under a text task, and those under a task of another
    input (image, audio, video, time series, multimodal)."""
    from transformers.models.auto import modeling_auto

    maps = {n.removeprefix("MODEL_FOR_").removesuffix("_MAPPING_NAMES"): getattr(modeling_auto, n)
            for n in dir(modeling_auto)
            if n.startswith("MODEL_FOR_") and n.endswith("_MAPPING_NAMES")}
    text = set().union(*(set(maps.get(t, ())) for t in TEXT_TASKS))
    other = set().union(*(set(m) for task, m in maps.items()
                          if any(w in task for w in OTHER_INPUTS)))
    return text, other


def not_text(cfg: dict, mtype: str) -> str:
    """Why a config is no text model's ("" when it is one). The rule: transformers lists its
    model_type under a text task (masked or causal LM, text classification, QA, ...); one it
    lists under none must be under no task of another input (image, audio, video) either and
    have a token vocabulary (vocab_size). So a ViT, CLIP or wav2vec2 is refused by what it is,
    not after a load that fails on a tokenizer it never had."""
    text, other = _input_kinds()
    if mtype in text:
        return ""
    if mtype in other:
        return f"transformers lists {mtype!r} under tasks of images, audio or video, not text"
    if "vocab_size" not in cfg:
        return "its config has no vocab_size, so no token vocabulary"
    return ""


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
        return Kind("bert", _gives(WITH_MLM_HEAD, mtype), name)
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return Kind("gpt", _gives(WITH_LM, mtype, cfg), name)
    if not archs and not mtype:
        raise ModelUnavailable(f"{where}: its config.json names no architecture or model_type")
    masked, causal, known = _mappings()
    if mtype and mtype not in known:
        raise ModelUnavailable(f"{where}: transformers does not know the architecture "
                               f"{mtype!r}; upgrading transformers may add it")
    why = not_text(cfg, mtype)
    if why:
        raise ModelUnavailable(f"{where} is not a text model ({name}: {why}); ctxlens shows "
                               "language models (BERT-like encoders, GPT-like decoders)")
    if mtype in causal and mtype not in masked:
        if not archs:
            return Kind("gpt", _gives(WITH_LM, mtype, cfg), mtype)
        raise ModelUnavailable(f"{where} is a decoder without its LM head ({name}); ctxlens "
                               "reads decoders through their LM head: use the *ForCausalLM "
                               "checkpoint it was fine-tuned from")
    return Kind("bert", _gives(ENCODER, mtype), name)


def pickled_only(folder: Path) -> str | None:
    """The first pickled weights file of a folder that holds no safetensors file (None: it
    holds safetensors, or no weights at all)."""
    folder = Path(folder)
    if any(folder.glob("*.safetensors")):
        return None
    pickled = sorted(p.name for pattern in PICKLED for p in folder.glob(pattern))
    return pickled[0] if pickled else None


def check_safe(folder: Path) -> None:
    """Refuse a folder whose weights are only pickled: unpickling runs whatever code the file
    names, and transformers would fall back to it where no safetensors file exists."""
    folder = Path(folder)
    if any(folder.glob("*.safetensors")):
        return
    pickled = pickled_only(folder)
    if pickled:
        raise ModelUnavailable(
            f"{folder} holds pickled weights only ({pickled}); unpickling can run code, so "
            "ctxlens loads safetensors only: convert it once with "
            "`model.save_pretrained(dir, safe_serialization=True)` where you trust the file")
    raise ModelUnavailable(f"{folder} holds no *.safetensors weights")


class CorruptCheckpoint(ModelUnavailable):
    """A weights file that is not what its name says (cut short, garbled, inconsistent)."""


def _corrupt(f: Path, why: str) -> CorruptCheckpoint:
    return CorruptCheckpoint(f"{f} is not a usable safetensors file: {why}; download it again "
                             "(or save the model again) and retry")


def read_header(f: Path) -> dict[str, dict]:
    """The tensors of one safetensors file (name -> dtype, shape, data_offsets), read from its
    header and checked against the file's size as the safetensors library checks them, so a
    truncated, garbled or inconsistent file is one line naming it before any library reads
    it: an 8-byte header length, a header within the file, UTF-8 JSON holding an object, each
    tensor a known dtype, a shape of non-negative integers and offsets that tile the data
    exactly (byte lengths that match the shapes, no gap, nothing after the last)."""
    f = Path(f)
    try:
        size = f.stat().st_size
        with open(f, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise _corrupt(f, f"{size} bytes, too short to hold the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES:
                raise _corrupt(f, f"its header claims {n:,} bytes")
            if 8 + n > size:
                raise _corrupt(f, f"cut short: its header claims {n:,} bytes and only "
                                  f"{size - 8:,} follow")
            raw = fh.read(n)
    except OSError as err:
        raise ModelUnavailable(f"{f} cannot be read ({err.strerror or err})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _corrupt(f, "its header is not UTF-8 JSON") from None
    if not isinstance(header, dict):
        raise _corrupt(f, "its header is not a JSON object")
    data = size - 8 - n
    spans = []
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(t, dict):
            raise _corrupt(f, f"tensor {name!r} has no dtype, shape and offsets")
        dtype, shape, offsets = t.get("dtype"), t.get("shape"), t.get("data_offsets")
        if dtype not in SAFETENSORS_DTYPES:
            raise _corrupt(f, f"tensor {name!r} has dtype {dtype!r}, which safetensors lacks")
        if not isinstance(shape, list) or \
                not all(type(d) is int and d >= 0 for d in shape):
            raise _corrupt(f, f"tensor {name!r} has shape {shape!r}, not a list of "
                              "non-negative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(type(o) is int for o in offsets) and 0 <= offsets[0] <= offsets[1]):
            raise _corrupt(f, f"tensor {name!r} has data offsets {offsets!r}")
        if offsets[1] > data:
            raise _corrupt(f, f"cut short: tensor {name!r} ends at byte {offsets[1]:,} of the "
                              f"data and the file holds {data:,}")
        if dtype in DTYPE_BYTES and \
                offsets[1] - offsets[0] != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise _corrupt(f, f"tensor {name!r} of shape {shape} in {dtype} takes "
                              f"{math.prod(shape) * DTYPE_BYTES[dtype]:,} bytes, its offsets "
                              f"{offsets[1] - offsets[0]:,}")
        spans.append((offsets[0], offsets[1], name))
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            raise _corrupt(f, f"tensor {name!r} starts at byte {begin:,} of the data, where "
                              f"the tensor before it ends at {at:,}")
        at = end
    if at != data:
        raise _corrupt(f, f"{data - at:,} bytes follow its last tensor")
    return {k: v for k, v in header.items() if k != "__metadata__"}


def weight_files(folder: Path) -> list[Path]:
    """A folder's safetensors files, every one (an estimate counts a stray file rather than
    miss a shard); where an index names shards, each must be there."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                                .values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise ModelUnavailable(f"{index} is not a readable shard index; download it again "
                                   "and retry") from None
        gone = [s for s in shards if not (folder / s).is_file()]
        if gone:
            raise ModelUnavailable(f"{folder} lacks {gone[0]}, a shard its index names "
                                   f"({len(gone)} of {len(shards)} missing); the download is "
                                   "incomplete: download it again")
    return sorted(folder.glob("*.safetensors"))


def tensor_counts(files) -> dict[str, int]:
    """Each stored tensor's element count, by name, from the files' (checked) headers."""
    return {name: math.prod(t["shape"]) for f in files for name, t in read_header(f).items()}


def parameter_bytes(folder: Path) -> tuple[int, int]:
    """(parameters, bytes as stored) of a folder's safetensors weights, from their headers
    only; a file that is no valid safetensors file is refused (read_header)."""
    n_params = n_bytes = 0
    for f in weight_files(folder):
        for t in read_header(f).values():
            count = math.prod(t["shape"])
            n_params += count
            n_bytes += count * DTYPE_BYTES.get(t["dtype"], 1)
    return n_params, n_bytes


def has_tokenizer(folder: Path) -> bool:
    folder = Path(folder)
    return any(next(folder.glob(pattern), None) is not None for pattern in TOKENIZER_FILES)


def check_tokenizer(folder: Path) -> None:
    """Refuse a folder with no tokenizer files at once: transformers would otherwise build an
    empty tokenizer from the config alone (every word unknown) or fail after loading the model."""
    if not has_tokenizer(folder):
        raise ModelUnavailable(
            f"{folder} holds no tokenizer (tokenizer.json, or the vocabulary files it is built "
            "from: vocab.txt, vocab.json + merges.txt or a SentencePiece *.model); copy the "
            "tokenizer files of the model it was trained from into it")


def problems(folder: Path) -> str | None:
    """Why a Hugging Face model folder cannot be shown (None: nothing seen), read from its
    config and file headers alone (no weights, no transformers model), so that lists can mark
    a broken folder instead of offering it: refused kinds, pickled-only or absent weights,
    files that are no valid safetensors, weights holding no tensor, no tokenizer. A folder
    without a config.json (an ELMo, a GGUF file) is its family's to judge."""
    folder = Path(folder)
    try:
        cfg = read_config(folder)
        if cfg is None:
            return None
        kind_of(cfg, str(folder))
        check_safe(folder)
        n_params, _ = parameter_bytes(folder)
        if n_params == 0:
            return "its safetensors weights hold no tensor"
        if not has_tokenizer(folder):
            return "no tokenizer files (tokenizer.json, vocab.txt, ...)"
    except ModelUnavailable as err:
        return _why(str(err), folder)
    return None


def _why(message: str, folder: Path) -> str:
    """A refusal's first line without the folder's name in front (a list shows it beside)."""
    line = message.strip().splitlines()[0] if message.strip() else "unreadable"
    if line.startswith(str(folder)):
        line = line[len(str(folder)):].lstrip("/: ")
    return line


# weights holding less than this share of the parameters their config describes are not that
# model's: transformers would make up the rest at random
PRESENT_SHARE = 0.9


def check_present(where: str, expected: int, present: int, missing: list[str]) -> None:
    """Refuse weights that hold far fewer parameters than the config describes (`expected`,
    counted on the meta device), naming the first tensors they lack, before the model is built."""
    if expected and present < PRESENT_SHARE * expected:
        named = ", ".join(repr(m) for m in missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise ModelUnavailable(
            f"{where}: its weights hold {present:,} of the {expected:,} parameters its config "
            f"describes (missing {named or 'tensors'}); they are incomplete or another "
            "model's: download or save the model again")


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


def check_memory(folder: Path, dtype: str, device: str, model_id: str,
                 n_params: int | None = None) -> None:
    """One line with the estimate and the options when the model, in `dtype`, would not fit in
    what is free: an out-of-memory kill would take the whole server down with it. `n_params`:
    the count its config describes (the model transformers builds, whatever the weights
    hold); without it, the count in the weights' headers."""
    if n_params is None:
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
