"""AllenNLP/bilm-tf checkpoint files <-> ElmoBiLm, both ways, and the LM-softmax companion.

A checkpoint directory holds options.json and an HDF5 file of TensorFlow variables (names as
in the released ELMo weight files). TF stores dense kernels as (in, out); PyTorch's Linear and
Conv1d hold (out, in[, width]), hence the transposes below. The optional companion
lm_softmax.safetensors + vocab.txt holds bilm-tf's softmax, shared by both directions.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np
import torch

from engine.families.base import ModelUnavailable
from engine.families.elmo_modules import ElmoBiLm, ElmoOptions

WEIGHTS_FILE = "weights.hdf5"
OPTIONS_FILE = "options.json"
SOFTMAX_FILE = "lm_softmax.safetensors"
VOCAB_FILE = "vocab.txt"
PROGRESS_BYTES = 50 << 20  # show a progress bar for weight files larger than this


class Softmax(NamedTuple):
    weight: torch.Tensor   # [V, proj]
    bias: torch.Tensor     # [V]
    vocab: tuple[str, ...]


def _single(directory: Path, patterns: tuple[str, ...], what: str) -> Path:
    for pattern in patterns:
        hits = sorted(directory.glob(pattern))
        if len(hits) == 1:
            return hits[0]
    raise ModelUnavailable(f"{directory} needs exactly one ELMo {what} "
                           f"({' or '.join(patterns)})")


def find_files(directory: Path) -> tuple[Path, Path]:
    """(options.json, weights.hdf5) of a checkpoint directory; AllenNLP's download names
    (..._options.json, ..._weights.hdf5) and a lone *.hdf5 are accepted too."""
    options = _single(directory, (OPTIONS_FILE, "*options*.json"), "options file")
    weights = _single(directory, (WEIGHTS_FILE, "*weights*.hdf5", "*.hdf5"), "weight file")
    return options, weights


def read_options(path: Path) -> ElmoOptions:
    return ElmoOptions.from_dict(json.loads(path.read_text()))


_CELL_RE = re.compile(r"RNN_(\d)/RNN/MultiRNNCell/Cell(\d+)/LSTMCell/(\w+)")


def _cell(direction: int, layer: int) -> str:
    # bilm-tf: RNN_0 is the forward LM, RNN_1 the backward LM; Cell{k} is layer k
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def tf_arrays(model: ElmoBiLm) -> Iterator[tuple[str, np.ndarray]]:
    """The model's parameters as (TF variable name, array in TF layout)."""
    def np_(t: torch.Tensor) -> np.ndarray:
        return t.detach().float().cpu().numpy()

    cnn = model.char_cnn
    # the file has no batch-padding row: our row 0 is an addition (see elmo_chars)
    yield "char_embed", np_(cnn.char_embedding.weight[1:])
    for i, conv in enumerate(cnn.convs):
        # TF conv2d kernel (1, width, char_dim, n) <- Conv1d (n, char_dim, width)
        yield f"CNN/W_cnn_{i}", np_(conv.weight.permute(2, 1, 0))[None]
        yield f"CNN/b_cnn_{i}", np_(conv.bias)
    for k, hw in enumerate(cnn.highways):
        for part in ("transform", "carry"):
            lin = getattr(hw, part)
            yield f"CNN_high_{k}/W_{part}", np_(lin.weight.T)
            yield f"CNN_high_{k}/b_{part}", np_(lin.bias)
    yield "CNN_proj/W_proj", np_(cnn.projection.weight.T)
    yield "CNN_proj/b_proj", np_(cnn.projection.bias)
    for d, stack in enumerate((model.forward_layers, model.backward_layers)):
        for k, lstm in enumerate(stack):
            # TF multiplies concat([x, h]) by one kernel W_0 (in + proj, 4 * cell)
            w = torch.cat([lstm.input_linearity.weight, lstm.state_linearity.weight], dim=1)
            yield f"{_cell(d, k)}/W_0", np_(w.T)
            yield f"{_cell(d, k)}/B", np_(lstm.state_linearity.bias)
            yield f"{_cell(d, k)}/W_P_0", np_(lstm.state_projection.weight.T)


def _assign(model: ElmoBiLm, name: str, array: np.ndarray) -> None:
    """Copy one TF variable into the model (the inverse of tf_arrays)."""
    t = torch.from_numpy(np.asarray(array, dtype=np.float32))
    cnn = model.char_cnn
    if name == "char_embed":
        targets = [(cnn.char_embedding.weight[1:], t)]
    elif name.startswith("CNN/"):
        kind, i = name[4:].rsplit("_", 1)
        conv = cnn.convs[int(i)]
        targets = [(conv.weight, t[0].permute(2, 1, 0))] if kind == "W_cnn" else [(conv.bias, t)]
    elif name.startswith("CNN_high_"):
        k, leaf = name[len("CNN_high_"):].split("/")
        kind, part = leaf.split("_", 1)
        lin = getattr(cnn.highways[int(k)], part)
        targets = [(lin.weight, t.T)] if kind == "W" else [(lin.bias, t)]
    elif name.startswith("CNN_proj/"):
        p = cnn.projection
        targets = [(p.weight, t.T)] if name.endswith("W_proj") else [(p.bias, t)]
    else:
        d, k, leaf = _CELL_RE.fullmatch(name).groups()
        lstm = (model.forward_layers, model.backward_layers)[int(d)][int(k)]
        if leaf == "W_0":
            w = t.T
            targets = [(lstm.input_linearity.weight, w[:, :lstm.input_size]),
                       (lstm.state_linearity.weight, w[:, lstm.input_size:])]
        elif leaf == "B":
            targets = [(lstm.state_linearity.bias, t)]
        else:
            targets = [(lstm.state_projection.weight, t.T)]
    for param, value in targets:
        if tuple(param.shape) != tuple(value.shape):
            raise ModelUnavailable(f"{name} has shape {tuple(array.shape)}, which does not "
                                   "match options.json")
        param.copy_(value)


def load_allennlp(directory: Path, progress: bool = True, impl: str = "fast") -> ElmoBiLm:
    """An ElmoBiLm with the weights of an AllenNLP/bilm-tf checkpoint directory."""
    import h5py
    from tqdm import tqdm

    options_path, weights_path = find_files(Path(directory))
    model = ElmoBiLm(read_options(options_path), impl=impl)
    names = [name for name, _ in tf_arrays(model)]
    show = progress and weights_path.stat().st_size > PROGRESS_BYTES
    with h5py.File(weights_path, "r") as f, torch.no_grad():
        missing = [n for n in names if n not in f]
        if missing:
            raise ModelUnavailable(f"{weights_path.name} lacks {missing[0]} "
                                   f"({len(missing)} ELMo variables missing)")
        for name in tqdm(names, desc=f"ELMo {weights_path.name}", disable=not show):
            _assign(model, name, f[name][...])
        model.char_cnn.char_embedding.weight[0].zero_()
    return model.eval()


def save_allennlp(model: ElmoBiLm, directory: Path, options: dict | None = None,
                  softmax: Softmax | None = None) -> Path:
    """Write options.json + weights.hdf5 in the layout load_allennlp (and AllenNLP) reads."""
    import h5py

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    options = options if options is not None else model.options.to_dict()
    (directory / OPTIONS_FILE).write_text(json.dumps(options, indent=2))
    with h5py.File(directory / WEIGHTS_FILE, "w") as f:
        for name, array in tf_arrays(model):
            f.create_dataset(name, data=array)
    if softmax is not None:
        save_softmax(directory, softmax)
    return directory


def save_softmax(directory: Path, softmax: Softmax) -> None:
    from safetensors.torch import save_file

    weight, bias, vocab = softmax
    if weight.shape[0] != len(vocab) or bias.shape != (len(vocab),):
        raise ValueError("softmax: weight [V, proj] and bias [V] need one row per vocab word")
    save_file({"softmax.weight": weight.detach().float().cpu().contiguous(),
               "softmax.bias": bias.detach().float().cpu().contiguous()},
              str(Path(directory) / SOFTMAX_FILE))
    (Path(directory) / VOCAB_FILE).write_text("\n".join(vocab) + "\n", encoding="utf-8")


def load_softmax(directory: Path) -> Softmax | None:
    """The LM softmax companion, or None when the checkpoint has none."""
    path, vocab_path = Path(directory) / SOFTMAX_FILE, Path(directory) / VOCAB_FILE
    if not path.exists():
        return None
    if not vocab_path.exists():
        raise ModelUnavailable(f"{path.name} needs {VOCAB_FILE} beside it (one word a line)")
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    vocab = tuple(vocab_path.read_text(encoding="utf-8").splitlines())
    weight, bias = tensors["softmax.weight"], tensors["softmax.bias"]
    if weight.shape[0] != len(vocab) or bias.shape != (len(vocab),):
        raise ModelUnavailable(f"{path.name} has {weight.shape[0]} rows but {VOCAB_FILE} "
                               f"has {len(vocab)} words")
    return Softmax(weight, bias, vocab)
