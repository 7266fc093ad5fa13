"""The adapter protocol every model family implements (its errors: engine/errors.py)."""
from __future__ import annotations

import os

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

from engine.budget import Anatomy
from engine.errors import EngineError, UnsupportedPrediction
from engine.result import Encoding, LogitLens, Prediction, QueryKey
from engine.text import WordText

if TYPE_CHECKING:
    from engine.attribution.objective import Objective
    from engine.generation_result import Generation, GenerationAttention


@dataclass(frozen=True)
class ModelInfo:
    model_id: str
    family: str
    n_layers: int          # transformer blocks / LSTM layers, not counting the embedding layer
    n_heads: int           # 0 for ELMo
    dim: int               # hidden size of the returned states
    # What a model can predict is its entry's `capabilities`, known before it loads; an
    # adapter without the head a prediction needs raises UnsupportedPrediction when asked.
    has_logit_lens: bool = False     # its final norm and output head were found
    device: str = "cpu"
    dtype: str = "float32"


@runtime_checkable
class Adapter(Protocol):
    """One loaded model. Implementations live in engine/families/{elmo,gpt,bert}.py.

    encode() must give each text the same vectors whatever else shares its batch; attention
    maps (Encoding.attentions) only when `attentions` is asked for and the model has them;
    with `layers`, hidden states of those layers only (in that order).
    Prediction methods raise UnsupportedPrediction when the checkpoint lacks the head.
    """

    info: ModelInfo

    def encode(self, texts: Sequence[WordText], batch_size: int = 16,
               attentions: bool = False, layers: Sequence[int] | None = None
               ) -> list[Encoding]: ...

    def predict_masked(self, text: WordText, top_k: int = 10,
                       sides: str = "both") -> Prediction: ...

    def predict_next(self, text: WordText, top_k: int = 10) -> Prediction: ...

    def predict_previous(self, text: WordText, top_k: int = 10) -> Prediction: ...

    def logit_lens(self, text: WordText, top_k: int = 1) -> LogitLens: ...


@runtime_checkable
class Costed(Protocol):
    """What an adapter whose models the heavy views run (attribution, head importance,
    patching, the logit's parts, generation) also says: what one pass costs, so that the
    Engine refuses a request over the work cap before it starts (engine/budget.py)."""

    def anatomy(self) -> "Anatomy": ...

    def count_tokens(self, text: WordText) -> int: ...


@runtime_checkable
class Pooled(Protocol):
    """An encoder that pools word vectors where the model runs (on a GPU only the words'
    vectors come back): what batch work asks first, before whole encodings."""

    def encode_pooled(self, texts: Sequence[WordText], batch_size: int = 16,
                      layers: Sequence[int] | None = None, pool: str = "mean") -> list: ...


@runtime_checkable
class QueryKeyed(Protocol):
    """An adapter with attention gives the query and key vectors behind one layer's scores
    (the neuron view); a model without attention has none."""

    def query_key(self, text: WordText, layer: int) -> QueryKey: ...


@runtime_checkable
class Explained(Protocol):
    """What an adapter whose predictions are explained (attribution, activation patching,
    head importance) also does: it makes each prediction kind it explains a function of its
    input embeddings, since only the family knows which embeddings its model reads and how
    its head scores a word (engine/attribution/objective.py). A family without it has no
    prediction to explain."""

    def check_explained(self, kind: str) -> None:
        """UnsupportedPrediction, saying why, when its `kind` predictions are not explained
        (asked before the target and the text are checked)."""

    def objective(self, text: WordText, kind: str, blank: int | None, words: Sequence[str],
                  contrast: str | None) -> "Objective":
        """f of `words[0]` (less `words[1]`, the checked `contrast`, when there is one) as
        the `kind` prediction on `text`; `blank`: the [MASK]'s word for kind "masked"."""


@runtime_checkable
class Generative(Protocol):
    """What a decoder with an output head also does: continue a prompt token by token
    (engine/generation.py checks the request and draws the seed first, the same for every
    decoder), say which tokens end a generation, and give the attention maps over a
    generation's whole sequence. A family without it has no Generation page."""

    def generate(self, prompt: WordText | str, max_tokens: int, sample: bool,
                 temperature: float, seed: int | None, top_k: int,
                 layer_ranks: bool) -> "Generation": ...

    def stop_ids(self) -> set[int]:
        """The ids that end a generation (what the model's own generate stops at)."""

    def generation_attention(self, gen: "Generation") -> "GenerationAttention": ...


@dataclass(frozen=True, eq=False)
class Sites:
    """One transformer's parts, per layer (index 0 = the first block), as its family found them
    (engine/families/hf/parts.py for the Hugging Face families): the modules a view hooks to
    read, knock out or patch a part, and the model they sit in (whose forward pass runs them).

    A head is its slice [h·head_dim, (h+1)·head_dim) of its layer's attention output
    projection's input, so grouped-query heads are the query heads."""

    model: object          # the root module: its forward pass runs every part below
    n_layers: int
    n_heads: int
    head_dim: int
    blocks: tuple          # the block modules, one per layer (ALBERT: the one shared block)
    attn_out: tuple        # the attention output projection of each layer
    mlp: tuple             # the feed-forward module of each layer (its output: the block's)
    final_norm: object     # the norm before the LM head, or None (post-norm encoders)
    # per layer, the norms on the block's attention and feed-forward outputs before they join
    # the stream (Gemma-2's and OLMo-2's sandwich norms), or None
    sandwich: tuple = ()
    shared: bool = False   # one block serves every layer (ALBERT): hooks count its calls

    def check_layer(self, layer: int, what: str = "layer") -> None:
        if not 0 <= layer < self.n_layers:
            raise UnsupportedPrediction(f"{what} {layer + 1} is out of range: this model has "
                                        f"layers 1-{self.n_layers}")

    def check_head(self, layer: int, head: int) -> None:
        self.check_layer(layer)
        if not 0 <= head < self.n_heads:
            raise UnsupportedPrediction(f"head {layer + 1}.{head + 1} is out of range: this "
                                        f"model's layers have heads 1-{self.n_heads}")


@dataclass(frozen=True)
class NextPieces:
    """A text as a decoder reads it before its next word, and each word spelled after it."""

    ids: tuple[int, ...]                       # the text's ids, its special tokens included
    tokens: tuple[str, ...]                    # the same, readable
    spelled: tuple[tuple[int, ...], ...]       # per word, its pieces after the text
    spelled_tokens: tuple[tuple[str, ...], ...]  # the same, readable


@runtime_checkable
class Transformer(Protocol):
    """What an adapter whose model is a stack of attention and feed-forward blocks also says:
    the prediction its own head makes at one position, and its parts. Attention rollout reads
    that position's row, activation patching patches that prediction, ablation and the other
    component views hook the parts, and generation needs a decoder ("next"). A family
    without it (ELMo's biLSTM, a family that declares nothing) has none of those views."""

    # "masked": an encoder's blank, read at the [MASK]; "next": a decoder's next word, read
    # at the last token
    own_kind: str

    def parts(self) -> Sites:
        """The model's parts, found once per loaded model; UnsupportedPrediction naming the
        part that was not found."""

    def forward_text(self, text: str) -> int:
        """One forward pass on `text` as the tokenizer reads it alone (special tokens
        included, no padding), for the hooks on its parts to read; how many tokens it read."""

    def next_pieces(self, text: WordText, words: Sequence[str]) -> NextPieces:
        """The text without its trailing space as the model reads it, and each word's pieces
        after it (the text, a space, the word); EngineError when the tokenizer merges a word
        with the text's end, cannot spell it, or the text leaves no room for it."""


@dataclass(frozen=True)
class LoadOptions:
    device: str = "auto"      # auto | cpu | cuda
    dtype: str = "float32"    # float32 | float16 | bfloat16 (half precision only on CUDA)
    # batch embedding through a torch.compile'd forward (fused kernels; worth its compile time
    # on a GPU and a large batch job, not for one sentence in the app)
    compile: bool = False
    # transformers' own loading bars may show where a load shows progress; off where the
    # caller shows its own (the CLI's progress lines, the app's status box)
    library_bars: bool = True


GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def gpu_driver_present() -> bool:
    """Whether a GPU driver shows a device node (NVIDIA, ROCm, WSL) this process may use (an
    empty CUDA_VISIBLE_DEVICES hides them all). Without one torch.cuda.is_available() is
    False, so "auto" means the CPU without importing torch: a process that only reads stored
    encodings never needs it. The one answer to "is there a GPU" before torch is loaded."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return False
    return any(os.path.exists(node) for node in GPU_DEVICE_NODES)


def cpu_only(device: str) -> bool:
    """Whether a model asked to run on `device` runs on the CPU, known without torch."""
    return device == "cpu" or (device == "auto" and not gpu_driver_present())


def resolve_device(device: str) -> str:
    if cpu_only(device):
        return "cpu"
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise EngineError("--device cuda was asked for, but no CUDA device is available")
    if device not in ("cpu", "cuda"):
        raise EngineError(f"unknown device {device!r}: use auto, cpu or cuda")
    return device


def parse_layers(spec: str) -> tuple[int, ...] | None:
    """--layers as people write it: 'all' -> None (every layer); '0,3,6' -> (0, 3, 6), distinct
    numbers from 0 up in the order given. Whether the model has them is check_layers'."""
    if spec.strip() == "all":
        return None
    try:
        layers = tuple(int(x) for x in spec.split(",") if x.strip())
    except ValueError:
        raise EngineError(f"--layers takes 'all' or comma-separated layer numbers such as "
                          f"0,3,6, not {spec!r}") from None
    if not layers or len(set(layers)) != len(layers) or min(layers) < 0:
        raise EngineError(f"--layers takes 'all' or distinct layer numbers from 0 up, "
                          f"not {spec!r}")
    return layers


def check_layers(layers: Sequence[int] | None, top: int) -> None:
    """A request for hidden-state layers 0..top (0 = the embeddings), said in one line."""
    if layers is not None and any(not 0 <= i <= top for i in layers):
        raise EngineError(f"layers must be between 0 and {top} for this model")


def dtype_name(dtype: str, device: str) -> str:
    """The dtype a model runs in, without importing torch: half precision only on a GPU
    (half-precision matmuls on CPU are slow and lossy; results stay comparable)."""
    if dtype not in ("float32", "float16", "bfloat16"):
        raise EngineError(f"unknown dtype {dtype!r}: use float32, float16 or bfloat16")
    return "float32" if device == "cpu" else dtype


def resolve_dtype(dtype: str, device: str):
    import torch

    name = dtype_name(dtype, device)
    if device == "cuda" and name == "float32":
        # float32 asked for means float32: PyTorch lets cuDNN convolutions (ELMo's char CNN)
        # round through TF32 by default, though not matmuls; on an H200 that puts ELMo's
        # layer 0 up to 6e-4 off the CPU. Process-wide, as the flag is.
        torch.backends.cudnn.allow_tf32 = False
    return getattr(torch, name)
