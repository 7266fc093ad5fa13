"""What a view's work costs, known before it runs, and the cap every request must fit under.

The text caps (engine/text.py) count words and characters; the work a view does is tokens ×
forward passes × seeds, and a short text can be many tokens (300 astral-plane characters are
1,197 SmolLM2 tokens). So every heavy Engine method states its work as a `Work` (passes of
how many tokens, with or without a backward pass), and `check` refuses it, before the first
pass, when its estimated time is over the cap: the app, the CLI and any script that calls the
Engine meet the same refusal, with the estimate in it.

The operation count of one pass of T tokens is the matmul bound: 2 × the model's weights
(every parameter but the input embedding table) × T, plus attention's 4 × layers × width × T²
(scores and their weighted sum); a backward pass costs about twice the forward (3× in all).
The time is that count over a rate per device (RATES, measured: `python -m bench`'s speed
rows give SmolLM2-135M about 2e11 operations per second on this project's 2 CPU cores).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from engine.errors import EngineError

# the cap, in estimated seconds of work of one request; a class server or a GPU box may set
# its own (CTXLENS_MAX_WORK_S)
MAX_WORK_S_ENV = "CTXLENS_MAX_WORK_S"
DEFAULT_MAX_WORK_S = 300.0
# operations a second, by device type; CTXLENS_OPS_PER_S names this machine's own
RATE_ENV = "CTXLENS_OPS_PER_S"
RATES = {"cpu": 1e11, "cuda": 2e13}      # cpu: per core (torch's threads), measured on 2
BACKWARD_FACTOR = 3.0                    # forward + backward ≈ 3 forwards (Kaplan et al. 2020)


class TooMuchWork(EngineError):
    """A request whose estimated work is over the cap (refused before it starts)."""


@dataclass(frozen=True)
class Anatomy:
    """What one forward pass's cost depends on (engine.families fills it from the model)."""

    weights: int            # parameters a token's pass multiplies by (not the input embeddings)
    n_layers: int
    width: int              # attention's width (the hidden size; 0 for an LSTM): the T² term
    device: str = "cpu"


def pass_ops(anatomy: Anatomy, tokens: int) -> float:
    """Operations of one forward pass of `tokens` tokens (the matmul bound, see above)."""
    return 2.0 * anatomy.weights * tokens + 4.0 * anatomy.n_layers * anatomy.width * tokens ** 2


def rate(device: str) -> float:
    """Operations a second on `device`: CTXLENS_OPS_PER_S if set, else RATES (the CPU's per
    thread torch runs on)."""
    named = os.environ.get(RATE_ENV, "").strip()
    if named:
        try:
            value = float(named)
        except ValueError:
            raise EngineError(f"{RATE_ENV} must be a number of operations a second, "
                              f"not {named!r}") from None
        if value > 0 and math.isfinite(value):
            return value
        raise EngineError(f"{RATE_ENV} must be a positive number, not {named!r}")
    if device == "cuda":
        return RATES["cuda"]
    import torch

    return RATES["cpu"] * max(1, torch.get_num_threads())


def max_seconds() -> float:
    named = os.environ.get(MAX_WORK_S_ENV, "").strip()
    if not named:
        return DEFAULT_MAX_WORK_S
    try:
        value = float(named)
    except ValueError:
        raise EngineError(f"{MAX_WORK_S_ENV} must be a number of seconds, not {named!r}") \
            from None
    if not (value > 0 and math.isfinite(value)):
        raise EngineError(f"{MAX_WORK_S_ENV} must be a positive number, not {named!r}")
    return value


def duration(seconds: float) -> str:
    """A duration as people say it: "40 s", "12 min", "28 h", "6 days"."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 48 * 3600:
        return f"{round(seconds / 3600)} h"
    return f"{round(seconds / 86400):,} days"


@dataclass(frozen=True)
class Work:
    """`passes` forward passes of `tokens` tokens each (`backward`: each with its backward
    pass) of the model `anatomy` describes, for `what` ("activation patching"); `shorter`
    says what a user can cut to bring it under the cap."""

    what: str
    anatomy: Anatomy
    passes: int
    tokens: int
    backward: bool = False
    shorter: str = "use a shorter text"

    @property
    def ops(self) -> float:
        return self.passes * pass_ops(self.anatomy, self.tokens) * (
            BACKWARD_FACTOR if self.backward else 1.0)

    @property
    def seconds(self) -> float:
        return self.ops / rate(self.anatomy.device)

    def summary(self) -> str:
        kind = "forward and backward passes" if self.backward else "forward passes"
        return (f"{self.what} is {self.passes:,} {kind} of {self.tokens:,} tokens, about "
                f"{duration(self.seconds)} here")


def check(*works: Work) -> None:
    """TooMuchWork (one line, with the estimate) unless the works together fit the cap."""
    total = sum(w.seconds for w in works)
    cap = max_seconds()
    if total <= cap:
        return
    biggest = max(works, key=lambda w: w.seconds)
    raise TooMuchWork(f"refused before it starts: {biggest.summary()}, over the cap of "
                      f"{duration(cap)} a request ({MAX_WORK_S_ENV}); {biggest.shorter}")


def estimate(*works: Work) -> float:
    """The estimated seconds of `works` (what check compares with the cap)."""
    return sum(w.seconds for w in works)
