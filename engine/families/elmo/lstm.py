"""One direction of one ELMo biLSTM layer: an LSTM cell with a projection (bilm-tf's
tf.nn.rnn_cell.LSTMCell(num_proj=..., cell_clip=..., proj_clip=...)), masked by length.

Two implementations give the same numbers:
- "fast": the input-to-hidden products of every time step in one matmul, then the recurrence
  over a batch sorted by length, so step t only touches the sentences still running;
- "reference": a plain per-time-step loop over the whole batch with a mask, the way
  AllenNLP's LstmCellWithProjection reads.
In both, the backward direction starts at each sentence's own last token, so a sentence's
vectors do not depend on the padding its batch mates impose on it.
"""
from __future__ import annotations

import torch
from torch import nn

IMPLS = ("fast", "reference")

# TensorFlow's LSTMCell adds forget_bias=1.0 to the forget gate pre-activation at run time
# and does not store it in B (Jozefowicz et al. 2015 initialisation trick). AllenNLP folds the
# +1 into the loaded bias; we keep it at run time like TF, so the stored bias equals the file's
# B bit for bit and export -> load round-trips exactly.
FORGET_BIAS = 1.0

State = tuple[torch.Tensor, torch.Tensor]  # (h [B, proj], c [B, cell])


def reverse_within_length(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x [B, T, D] with each row's first lengths[b] steps reversed; padding stays in place."""
    t = torch.arange(x.shape[1], device=x.device)[None, :]            # (1, T)
    lens = lengths[:, None]                                            # (B, 1)
    index = torch.where(t < lens, lens - 1 - t, t)                     # (B, T)
    return x.gather(1, index[:, :, None].expand_as(x))


class LstmWithProjection(nn.Module):
    """Weights in bilm-tf's layout, transposed to PyTorch's (out, in):
    input_linearity + state_linearity = W_0 split at input_size (TF concatenates [x, h]),
    state_linearity.bias = B, state_projection = W_P_0. Gate order is TF's: i, j, f, o
    (input gate, new-cell candidate, forget gate, output gate); AllenNLP permutes these to
    i, f, j, o when it loads, we keep TF's so the file maps onto the module by transposes only.
    """

    def __init__(self, input_size: int, cell_size: int, proj_size: int, go_forward: bool,
                 cell_clip: float | None = None, proj_clip: float | None = None):
        super().__init__()
        self.input_size, self.cell_size, self.proj_size = input_size, cell_size, proj_size
        self.go_forward = go_forward
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.input_linearity = nn.Linear(input_size, 4 * cell_size, bias=False)
        self.state_linearity = nn.Linear(proj_size, 4 * cell_size, bias=True)
        self.state_projection = nn.Linear(cell_size, proj_size, bias=False)

    def zero_state(self, batch: int, like: torch.Tensor) -> State:
        return (like.new_zeros(batch, self.proj_size), like.new_zeros(batch, self.cell_size))

    def step(self, x_gates: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> State:
        """One time step; x_gates = input_linearity(x_t) [n, 4C], h [n, P], c [n, C]."""
        gates = x_gates + self.state_linearity(h)
        i, j, f, o = gates.chunk(4, dim=-1)                              # TF LSTMCell order
        c = torch.sigmoid(f + FORGET_BIAS) * c + torch.sigmoid(i) * torch.tanh(j)
        if self.cell_clip:
            c = c.clamp(-self.cell_clip, self.cell_clip)                # TF cell_clip
        h = self.state_projection(torch.sigmoid(o) * torch.tanh(c))    # num_proj: m = W_P m
        if self.proj_clip:
            h = h.clamp(-self.proj_clip, self.proj_clip)                # TF proj_clip
        return h, c

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, state: State | None = None,
                impl: str = "fast") -> tuple[torch.Tensor, State]:
        """x [B, T, in], lengths [B] -> outputs [B, T, P] (0 past each length), final state.

        The final state is taken at each row's own last step (forward: lengths-1, backward: 0).
        """
        if state is None:
            state = self.zero_state(x.shape[0], x)
        if impl == "fast":
            return self._forward_fast(x, lengths, state)
        if impl == "reference":
            return self._forward_reference(x, lengths, state)
        raise ValueError(f"impl must be one of {IMPLS}, not {impl!r}")

    def _forward_reference(self, x, lengths, state):
        h, c = state
        steps = x.shape[1]
        outputs = [None] * steps
        for s in range(steps):
            t = s if self.go_forward else steps - 1 - s
            running = (lengths > t)[:, None]                                 # (B, 1)
            h_new, c_new = self.step(self.input_linearity(x[:, t]), h, c)
            h, c = torch.where(running, h_new, h), torch.where(running, c_new, c)
            outputs[t] = torch.where(running, h_new, torch.zeros_like(h_new))
        return torch.stack(outputs, dim=1), (h, c)

    def _forward_fast(self, x, lengths, state):
        batch, steps = x.shape[:2]
        order = torch.argsort(lengths, descending=True, stable=True)
        restore = torch.argsort(order)
        x, lens = x[order], lengths[order]
        h, c = state[0][order], state[1][order]
        if not self.go_forward:
            # run the backward LM forward in time over each sentence reversed within its length
            x = reverse_within_length(x, lens)
        # one matmul for every time step; unbind once so that autograd does not build a
        # zero-filled (B, T, 4C) gradient for each step's slice
        x_gates = self.input_linearity(x).unbind(dim=1)                 # T x (B, 4C)
        running = (lens[None, :] > torch.arange(steps, device=x.device)[:, None]).sum(1)
        outputs = []
        for t, n in enumerate(running.tolist()):
            if n == 0:
                break
            h_n, c_n = self.step(x_gates[t][:n], h[:n], c[:n])          # only running rows
            h, c = torch.cat([h_n, h[n:]]), torch.cat([c_n, c[n:]])
            outputs.append(nn.functional.pad(h_n, (0, 0, 0, batch - n)))
        out = x.new_zeros(batch, steps, self.proj_size)
        if outputs:
            out = nn.functional.pad(torch.stack(outputs, dim=1), (0, 0, 0, steps - len(outputs)))
        if not self.go_forward:
            out = reverse_within_length(out, lens)
        return out[restore], (h[restore], c[restore])
