"""AllenNLP/bilm-tf checkpoint files <-> ElmoBiLm, both ways, and the LM-softmax companion.

A checkpoint directory holds options.json and an HDF5 file of TensorFlow variables (names as
in the released ELMo weight files). TF stores dense kernels as (in, out); PyTorch's Linear and
Conv1d hold (out, in[, width]), hence the transposes below. The optional companion
lm_softmax.safetensors + vocab.txt holds bilm-tf's softmax, shared by both directions.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import numpy as np
import torch

from engine.errors import ModelUnavailable
from engine.families.elmo.modules import ElmoBiLm, ElmoOptions

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


class TfVariable(NamedTuple):
    """One TF variable of the file and the module tensors it fills."""

    name: str
    params: tuple[torch.Tensor, ...]                          # parameters (or views of them)
    to_tf: Callable[..., torch.Tensor]                        # params -> TF layout
    from_tf: Callable[[torch.Tensor], tuple[torch.Tensor, ...]]  # TF layout -> params


def _same(w: torch.Tensor) -> torch.Tensor:
    return w


def _one(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (t,)


def _dense(name: str, linear: torch.nn.Linear) -> Iterator[TfVariable]:
    # TF kernels are (in, out); nn.Linear holds (out, in)
    yield TfVariable(f"{name}/W", (linear.weight,), lambda w: w.T, lambda t: (t.T,))
    yield TfVariable(f"{name}/b", (linear.bias,), _same, _one)


def tf_variables(model: ElmoBiLm) -> Iterator[TfVariable]:
    """Every variable of a bilm-tf weight file, in file order, mapped onto the model."""
    cnn = model.char_cnn
    # the file has no batch-padding row: our row 0 is an addition (see chars.py)
    yield TfVariable("char_embed", (cnn.char_embedding.weight[1:],), _same, _one)
    for i, conv in enumerate(cnn.convs):
        # TF conv2d kernel (1, width, char_dim, n_filters) <-> Conv1d (n_filters, char_dim, width)
        yield TfVariable(f"CNN/W_cnn_{i}", (conv.weight,), lambda w: w.permute(2, 1, 0)[None],
                         lambda t: (t[0].permute(2, 1, 0),))
        yield TfVariable(f"CNN/b_cnn_{i}", (conv.bias,), _same, _one)
    for k, hw in enumerate(cnn.highways):
        for part in ("transform", "carry"):
            for v in _dense(f"CNN_high_{k}", getattr(hw, part)):
                yield v._replace(name=f"{v.name}_{part}")          # W_carry, b_transform, ...
    for v in _dense("CNN_proj", cnn.projection):
        yield v._replace(name=f"{v.name}_proj")
    for d, stack in enumerate((model.forward_layers, model.backward_layers)):
        for k, lstm in enumerate(stack):
            # bilm-tf: RNN_0 is the forward LM, RNN_1 the backward LM; Cell{k} is layer k
            cell = f"RNN_{d}/RNN/MultiRNNCell/Cell{k}/LSTMCell"
            # TF multiplies concat([x, h]) by one kernel W_0 (in + proj, 4 * cell): split it
            # at the input size into the input and the recurrent weights
            n_in = lstm.input_size
            yield TfVariable(f"{cell}/W_0",
                             (lstm.input_linearity.weight, lstm.state_linearity.weight),
                             lambda wx, wh: torch.cat([wx, wh], dim=1).T,
                             lambda t, n=n_in: (t.T[:, :n], t.T[:, n:]))
            yield TfVariable(f"{cell}/B", (lstm.state_linearity.bias,), _same, _one)
            yield TfVariable(f"{cell}/W_P_0", (lstm.state_projection.weight,),
                             lambda w: w.T, lambda t: (t.T,))


def tf_arrays(model: ElmoBiLm) -> Iterator[tuple[str, np.ndarray]]:
    """The model's parameters as (TF variable name, float32 array in TF layout)."""
    for v in tf_variables(model):
        yield v.name, v.to_tf(*v.params).detach().float().cpu().numpy()


def _assign(v: TfVariable, array: np.ndarray) -> None:
    values = v.from_tf(torch.from_numpy(np.asarray(array, dtype=np.float32)))
    for param, value in zip(v.params, values):
        if param.shape != value.shape:
            raise ModelUnavailable(f"{v.name} has shape {tuple(array.shape)}, which does not "
                                   "match options.json")
        param.copy_(value)


def load_allennlp(directory: Path, progress: bool = True, impl: str = "fast") -> ElmoBiLm:
    """An ElmoBiLm with the weights of an AllenNLP/bilm-tf checkpoint directory."""
    import h5py
    from tqdm import tqdm

    options_path, weights_path = find_files(Path(directory))
    model = ElmoBiLm(read_options(options_path), impl=impl)
    variables = list(tf_variables(model))
    show = progress and weights_path.stat().st_size > PROGRESS_BYTES
    with h5py.File(weights_path, "r") as f, torch.no_grad():
        missing = [v.name for v in variables if v.name not in f]
        if missing:
            raise ModelUnavailable(f"{weights_path.name} lacks {missing[0]} "
                                   f"({len(missing)} ELMo variables missing)")
        for v in tqdm(variables, desc=f"ELMo {weights_path.name}", disable=not show):
            _assign(v, f[v.name][...])
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
