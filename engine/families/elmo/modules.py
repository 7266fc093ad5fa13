"""The ELMo biLM as plain, trainable nn.Modules (Peters et al. 2018, section 3; bilm-tf).

char ids -> char embedding -> char CNN (max over time) -> highway -> projection = layer 0;
then L biLSTM layers with projection, forward and backward LMs side by side, a residual
connection between LSTM layers. Layers are returned as [forward; backward]; layer 0 (context
free) is duplicated [x; x] so that every layer has the same width, as AllenNLP does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from engine.families.elmo.chars import MAX_CHARS
from engine.families.elmo.lstm import IMPLS, LstmWithProjection

N_CHAR_ROWS = 262  # 261 character ids of bilm-tf (256 bytes + 5 markers) + padding row 0


@dataclass(frozen=True)
class ElmoOptions:
    """The architecture, read from AllenNLP's options.json."""

    char_dim: int
    filters: tuple[tuple[int, int], ...]  # (width, number of filters)
    n_highway: int
    activation: str                       # relu | tanh, after the max over time
    cell_size: int                        # lstm.dim
    proj_dim: int                         # lstm.projection_dim
    n_layers: int = 2
    cell_clip: float | None = None
    proj_clip: float | None = None
    use_skip_connections: bool = True
    max_chars: int = MAX_CHARS
    n_characters: int = N_CHAR_ROWS

    @classmethod
    def from_dict(cls, d: dict) -> ElmoOptions:
        cnn, lstm = d["char_cnn"], d["lstm"]
        return cls(char_dim=cnn["embedding"]["dim"],
                   filters=tuple((int(w), int(n)) for w, n in cnn["filters"]),
                   n_highway=cnn["n_highway"], activation=cnn.get("activation", "relu"),
                   cell_size=lstm["dim"], proj_dim=lstm["projection_dim"],
                   n_layers=lstm.get("n_layers", 2), cell_clip=lstm.get("cell_clip"),
                   proj_clip=lstm.get("proj_clip"),
                   use_skip_connections=bool(lstm.get("use_skip_connections", False)),
                   max_chars=cnn.get("max_characters_per_token", MAX_CHARS),
                   n_characters=cnn.get("n_characters", N_CHAR_ROWS))

    def to_dict(self) -> dict:
        return {"lstm": {"dim": self.cell_size, "projection_dim": self.proj_dim,
                         "n_layers": self.n_layers, "cell_clip": self.cell_clip,
                         "proj_clip": self.proj_clip,
                         "use_skip_connections": self.use_skip_connections},
                "char_cnn": {"embedding": {"dim": self.char_dim},
                             "filters": [list(f) for f in self.filters],
                             "n_highway": self.n_highway, "activation": self.activation,
                             "n_characters": self.n_characters,
                             "max_characters_per_token": self.max_chars}}

    @property
    def n_filters(self) -> int:
        return sum(n for _, n in self.filters)


def _as_options(options: ElmoOptions | dict) -> ElmoOptions:
    return options if isinstance(options, ElmoOptions) else ElmoOptions.from_dict(options)


class Highway(nn.Module):
    """bilm-tf's highway layer (Srivastava et al. 2015). TF names the gate the *carry* gate but
    it multiplies the transform: y = g * relu(W_t x + b_t) + (1 - g) * x, g = sigmoid(W_c x + b_c).
    We keep TF's meaning (AllenNLP instead negates W_carry and b_carry and swaps the roles)."""

    def __init__(self, dim: int):
        super().__init__()
        self.transform = nn.Linear(dim, dim)
        self.carry = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.carry(x))
        return gate * torch.relu(self.transform(x)) + (1 - gate) * x


class CharCNN(nn.Module):
    """Context-independent token embedding from character ids (Kim et al. 2016)."""

    def __init__(self, options: ElmoOptions):
        super().__init__()
        o = options
        # row 0 is the batch-padding id and stays zero (and gets no gradient)
        self.char_embedding = nn.Embedding(N_CHAR_ROWS, o.char_dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(o.char_dim, n, w) for w, n in o.filters)
        self.highways = nn.ModuleList(Highway(o.n_filters) for _ in range(o.n_highway))
        self.projection = nn.Linear(o.n_filters, o.proj_dim)
        if o.activation not in ("relu", "tanh"):
            raise ValueError(f"char_cnn.activation must be relu or tanh, not {o.activation!r}")
        self.activation = torch.relu if o.activation == "relu" else torch.tanh

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """char_ids [B, T, chars] -> token embeddings [B, T, proj]."""
        batch, steps, chars = char_ids.shape
        # The embedding is context free: compute each distinct token (and the padding row)
        # once. Real text repeats words and every sentence has <S> and </S>; the CNN is the
        # larger part of the work for released model sizes.
        unique, inverse = torch.unique(char_ids.reshape(-1, chars), dim=0, return_inverse=True)
        return self.embed_tokens(unique)[inverse].reshape(batch, steps, -1)

    def embed_tokens(self, char_ids: torch.Tensor) -> torch.Tensor:
        """char_ids [N, chars] -> [N, proj]."""
        x = self.char_embedding(char_ids).transpose(1, 2)                   # (N, E, chars)
        # bilm-tf applies the activation before the max over time; relu and tanh are monotone,
        # so max-then-activate gives the same numbers on fewer elements.
        pooled = [self.activation(conv(x).max(dim=-1).values) for conv in self.convs]
        h = torch.cat(pooled, dim=-1)                                        # (N, n_filters)
        for highway in self.highways:
            h = highway(h)
        return self.projection(h)


class BiLmOutput(NamedTuple):
    layers: torch.Tensor          # [L+1, B, T, 2*proj], 0 at padding
    mask: torch.Tensor            # [B, T] bool, True at real tokens (boundaries included)
    state: tuple[torch.Tensor, torch.Tensor]  # h [L, B, 2*proj], c [L, B, 2*cell]: [fwd; bwd]


class ElmoBiLm(nn.Module):
    """The biLM. impl picks the LSTM implementation ("fast" or "reference", same numbers)."""

    def __init__(self, options: ElmoOptions | dict, impl: str = "fast", dropout: float = 0.0):
        super().__init__()
        self.options = o = _as_options(options)
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, not {impl!r}")
        self.impl = impl
        self.dropout = dropout  # on each LSTM layer's input, in training mode only
        self.char_cnn = CharCNN(o)

        def layers(go_forward: bool) -> nn.ModuleList:
            return nn.ModuleList(
                LstmWithProjection(o.proj_dim, o.cell_size, o.proj_dim, go_forward,
                                   o.cell_clip, o.proj_clip) for _ in range(o.n_layers))

        self.forward_layers, self.backward_layers = layers(True), layers(False)

    @classmethod
    def from_options(cls, options: ElmoOptions | dict, seed: int | None = None,
                     impl: str = "fast", dropout: float = 0.0,
                     init_scale: float | None = None) -> ElmoBiLm:
        """A randomly initialised biLM: bilm-tf's initialisers by default, or every parameter
        uniform in +-init_scale when given (embedding row 0 stays zero either way)."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        model = cls(options, impl=impl, dropout=dropout)
        with torch.no_grad():
            if init_scale is None:
                _bilm_tf_init(model, gen)
            else:
                for p in model.parameters():
                    p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * init_scale)
            model.char_cnn.char_embedding.weight[0].zero_()
        return model

    def forward(self, char_ids: torch.Tensor, state=None, impl: str | None = None) -> BiLmOutput:
        """char_ids [B, T, chars] (with <S> ... </S>; all-0 rows are batch padding).

        state: None (zeros: the deterministic interactive mode) or a previous call's
        BiLmOutput.state, to carry the LSTM states per batch row (AllenNLP's stateful mode).
        """
        impl = impl or self.impl
        mask = (char_ids > 0).any(dim=-1)                                   # (B, T)
        lengths = mask.sum(dim=1)
        embedding = self.char_cnn(char_ids)                                 # (B, T, P)
        m = mask[..., None].to(embedding.dtype)
        layers = [torch.cat([embedding, embedding], dim=-1) * m]
        P, C = self.options.proj_dim, self.options.cell_size
        fwd_in = bwd_in = embedding
        hs, cs = [], []
        for k, (fwd, bwd) in enumerate(zip(self.forward_layers, self.backward_layers)):
            if self.training and self.dropout:
                # bilm-tf's DropoutWrapper sits outside the ResidualWrapper: the dropped
                # input is both the LSTM's input and the residual added to its output
                fwd_in = nn.functional.dropout(fwd_in, self.dropout, training=True)
                bwd_in = nn.functional.dropout(bwd_in, self.dropout, training=True)
            f_state = b_state = None
            if state is not None:
                h, c = state[0][k], state[1][k]
                f_state, b_state = (h[:, :P], c[:, :C]), (h[:, P:], c[:, C:])
            f_out, f_state = fwd(fwd_in, lengths, f_state, impl)
            b_out, b_state = bwd(bwd_in, lengths, b_state, impl)
            if self.options.use_skip_connections and k > 0:
                # residual connection between LSTM layers (bilm-tf ResidualWrapper, not on
                # the first layer whose input is the char-CNN embedding)
                f_out, b_out = f_out + fwd_in, b_out + bwd_in
            layers.append(torch.cat([f_out, b_out], dim=-1) * m)
            hs.append(torch.cat([f_state[0], b_state[0]], dim=-1))
            cs.append(torch.cat([f_state[1], b_state[1]], dim=-1))
            fwd_in, bwd_in = f_out, b_out
        return BiLmOutput(torch.stack(layers), mask, (torch.stack(hs), torch.stack(cs)))

    def lm_outputs(self, char_ids: torch.Tensor, impl: str | None = None):
        """(forward top [B, T, P], backward top [B, T, P], mask [B, T]) for LM training:
        the forward top at t predicts token t+1, the backward top at t predicts token t-1."""
        out = self.forward(char_ids, impl=impl)
        P = self.options.proj_dim
        return out.layers[-1][..., :P], out.layers[-1][..., P:], out.mask


def _bilm_tf_init(model: ElmoBiLm, gen: torch.Generator | None) -> None:
    """bilm-tf's initialisers (bilm/training.py), so a trainer starts where bilm-tf did."""
    def uniform(p, a):
        p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * a)

    def normal(p, std):
        p.copy_(torch.randn(p.shape, generator=gen) * std)

    cnn, o = model.char_cnn, model.options
    uniform(cnn.char_embedding.weight, 1.0)
    for (width, _), conv in zip(o.filters, cnn.convs):
        if o.activation == "relu":
            uniform(conv.weight, 0.05)
        else:
            normal(conv.weight, (1.0 / (width * o.char_dim)) ** 0.5)
        conv.bias.zero_()
    for hw in cnn.highways:
        normal(hw.carry.weight, (1.0 / o.n_filters) ** 0.5)
        normal(hw.transform.weight, (1.0 / o.n_filters) ** 0.5)
        hw.carry.bias.fill_(-2.0)   # gate starts nearly closed: the layer begins as identity
        hw.transform.bias.zero_()
    normal(cnn.projection.weight, (1.0 / o.n_filters) ** 0.5)
    cnn.projection.bias.zero_()
    for lstm in [*model.forward_layers, *model.backward_layers]:
        # TF's default for LSTMCell kernels is Glorot-uniform over the (in, out) kernel
        fan_in = lstm.input_size + lstm.proj_size
        uniform(lstm.input_linearity.weight, (6.0 / (fan_in + 4 * lstm.cell_size)) ** 0.5)
        uniform(lstm.state_linearity.weight, (6.0 / (fan_in + 4 * lstm.cell_size)) ** 0.5)
        lstm.state_linearity.bias.zero_()
        uniform(lstm.state_projection.weight,
                (6.0 / (lstm.cell_size + lstm.proj_size)) ** 0.5)
