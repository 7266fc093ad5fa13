"""The attribution methods, all through Captum on an Objective's value function of the
attributed pieces' input embeddings: gradient × input (InputXGradient), saliency (Saliency:
the gradient's length), integrated gradients (IntegratedGradients, Gauss-Legendre steps,
batched) and occlusion (FeatureAblation with one feature group per word or per piece).

This module is each method's one home: `METHODS` holds, per method, what the app and the CLI
call it, one line on what it computes, whether its scores are signed and add up over a word's
pieces, the passes it runs (the budget's estimate, before it runs) and the function that runs
it. A new method is one `@method(...)` function here; explain.attribute, the Engine's cost
estimate, the CLI's --method and the app's method picker read it from METHODS.
Importing it loads neither torch nor Captum (the app's door lists the methods)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from engine.errors import EngineError

if TYPE_CHECKING:
    import torch

    from engine.attribution.objective import Objective

# IG's steps are raised along this ladder until the completeness gap is at most GAP_SHARE of
# |f(x) − f(baseline)| (or GAP_FLOOR, the float32 noise of an f of a few nats, when f hardly
# moves); a caller who names the steps gets exactly those, with their gap
STEP_LADDER = (32, 64, 128, 256)
GAP_SHARE = 0.01
GAP_FLOOR = 1e-5
# rows of one forward/backward pass (IG's steps, occlusion's perturbed inputs) of an
# objective whose value does not say how many it takes (see rows)
BATCH = 32


@dataclass(frozen=True)
class Passes:
    """What a method runs for one reading of a prediction, before it runs: `count` passes of
    the model (`backward`: each with its backward pass), described as `what`."""

    what: str
    count: int
    backward: bool = False
    shorter: str = "use a shorter text"


@dataclass(frozen=True)
class Scores:
    """A method's output on one Objective: a score per attributed piece; `words`, the scored
    words' own scores where the method measures a word whole (occlusion), else None (each word
    is the sum of its pieces); `ig`, integrated gradients' steps and completeness."""

    pieces: np.ndarray            # (N,) float32
    words: np.ndarray | None = None
    ig: IGResult | None = None


@dataclass(frozen=True)
class Method:
    """One attribution method, as every reader needs it (the module's docstring)."""

    name: str                     # the id in links, the CLI and the JSON
    label: str                    # how the app's charts name it
    note: str                     # one line for the app: what it computes, after whom
    passes: Callable[[int, int, int | None], Passes]   # (words, tokens, steps) -> one reading
    run: Callable[[Objective, np.ndarray, int | None], Scores]  # (obj, word groups, steps)
    signed: bool = True           # False: every score ≥ 0 (how much, not which way)
    additive: bool = True         # a word's score is the sum of its pieces' scores

    @property
    def many_passes(self) -> bool:
        """Whether it runs more than one pass whatever the text (the app shows the cap)."""
        return self.passes(2, 2, None).count > 1


METHODS: dict[str, Method] = {}


def method(name: str, label: str, note: str, passes: Callable[[int, int, int | None], Passes],
           signed: bool = True, additive: bool = True):
    """Registers the decorated run(obj, word_groups, steps) -> Scores as method `name`."""
    def register(run):
        METHODS[name] = Method(name, label, note, passes, run, signed, additive)
        return run
    return register


@dataclass(frozen=True)
class IGResult:
    scores: np.ndarray          # (N,)
    f_baseline: float
    steps: int
    gap: float
    converged: bool


def finite(scores: torch.Tensor, what: str) -> np.ndarray:
    """The scores as float32 numpy, or a one-line error: a NaN or an infinity is never shown."""
    import torch

    if not torch.isfinite(scores).all():
        raise EngineError(f"the {what} is not finite (the model overflows on this input in "
                          f"{scores.dtype}), so no map is drawn")
    return scores.detach().float().cpu().numpy()


def rows(obj: Objective, n: int, grad: bool) -> int:
    """Rows of one pass of obj.value among n (`grad`: with a backward pass): as many as the
    objective's builder says its model's memory allows (obj.value.rows, set by hf.py and
    elmo.py from the model's size and the token count: engine/memory.py), else BATCH."""
    sized = getattr(obj.value, "rows", None)
    return max(1, min(n, sized(n, grad=grad) if sized is not None else BATCH))


def f_of(obj: Objective, x: torch.Tensor) -> torch.Tensor:
    """f of a batch of inputs (no gradients), in batches of `rows`."""
    import torch

    size = rows(obj, len(x), grad=False)
    with torch.no_grad():
        return torch.cat([obj.value(x[i:i + size]) for i in range(0, len(x), size)])


@method("gradxinput", "gradient × input",
        "Gradient × input (Shrikumar et al. 2016): Σ over the embedding of x · ∂f/∂x per "
        "piece, one backward pass.",
        lambda words, tokens, steps: Passes("the gradient", 1, backward=True))
def _gradxinput(obj: Objective, groups: np.ndarray, steps: int | None) -> Scores:
    return Scores(gradxinput(obj))


def gradxinput(obj: Objective) -> np.ndarray:
    """Σ_d x_d ∂f/∂x_d for each piece (Shrikumar et al. 2016; Captum's InputXGradient)."""
    import torch
    from captum.attr import InputXGradient

    with torch.enable_grad():
        attr = InputXGradient(obj.value).attribute(obj.x.clone().requires_grad_())
    return finite(attr.sum(-1)[0], "gradient")


@method("saliency", "saliency",
        "Saliency (Simonyan et al. 2014): the length ‖∂f/∂x‖₂ of the gradient at each "
        "piece, one backward pass; how much, not which way.",
        lambda words, tokens, steps: Passes("the gradient", 1, backward=True), signed=False)
def _saliency(obj: Objective, groups: np.ndarray, steps: int | None) -> Scores:
    import torch
    from captum.attr import Saliency

    with torch.enable_grad():    # Captum's |∂f/∂x| per dimension, its L2 norm per piece
        grad = Saliency(obj.value).attribute(obj.x.clone().requires_grad_(), abs=True)
    return Scores(finite(grad.norm(dim=-1)[0], "gradient"))


def _ig_passes(words: int, tokens: int, steps: int | None) -> Passes:
    # a map that does not converge climbs the whole ladder
    n = steps if isinstance(steps, int) and steps > 0 else sum(STEP_LADDER)
    return Passes(f"integrated gradients of {n} steps", n, backward=True,
                  shorter="use a shorter text or fewer steps")


@method("ig", "integrated gradients",
        "Integrated gradients (Sundararajan et al. 2017): the gradient averaged along a "
        "straight path from the baseline to the input, times the difference.", _ig_passes)
def _ig(obj: Objective, groups: np.ndarray, steps: int | None) -> Scores:
    ig = integrated_gradients(obj, steps)
    return Scores(ig.scores, ig=ig)


def integrated_gradients(obj: Objective, steps: int | None = None) -> IGResult:
    """Sundararajan et al. 2017 from obj.absent to obj.x; Captum's IntegratedGradients with its
    Gauss-Legendre rule and its convergence delta Σ attributions − (f(x) − f(baseline)),
    steps raised along STEP_LADDER until that gap is small enough (or exactly `steps`)."""
    import torch
    from captum.attr import IntegratedGradients

    ladder = STEP_LADDER if steps is None else (steps,)
    ig = IntegratedGradients(obj.value)
    f_x, f_base = (float(v) for v in f_of(obj, torch.cat([obj.x, obj.absent])))
    if not np.isfinite([f_x, f_base]).all():
        raise EngineError("f is not finite on this input or its baseline, so no map is drawn")
    tolerance = max(GAP_SHARE * abs(f_x - f_base), GAP_FLOOR)
    for n in ladder:
        with torch.enable_grad():
            attr = ig.attribute(obj.x, baselines=obj.absent, n_steps=n,
                                method="gausslegendre",
                                internal_batch_size=rows(obj, n, grad=True))
        scores = finite(attr.sum(-1)[0], "gradient")
        gap = abs(float(scores.astype(np.float64).sum()) - (f_x - f_base))
        if gap <= tolerance:
            break
    return IGResult(scores, f_base, n, gap, gap <= tolerance)


@method("occlusion", "occlusion",
        "Occlusion: f minus f with the word removed, one run per word; exact, no gradients.",
        lambda words, tokens, steps: Passes("occlusion of every word and piece",
                                            words + tokens),
        additive=False)
def _occlusion(obj: Objective, groups: np.ndarray, steps: int | None) -> Scores:
    # a word removed whole, and each piece alone: a model is not additive, so the two differ
    return Scores(occlusion(obj, np.arange(len(obj.slots))), words=occlusion(obj, groups))


def occlusion(obj: Objective, groups: np.ndarray) -> np.ndarray:
    """f(x) − f(x with group g's pieces replaced by obj.absent), for each group id
    0..G-1 of `groups` (N,): exact, one forward pass per group (Captum's FeatureAblation,
    `rows` groups a pass)."""
    import torch
    from captum.attr import FeatureAblation

    mask = torch.from_numpy(groups).to(obj.x.device)[None, :, None].expand_as(obj.x)
    with torch.no_grad():
        attr = FeatureAblation(obj.value).attribute(
            obj.x, baselines=obj.absent, feature_mask=mask.contiguous(),
            perturbations_per_eval=rows(obj, int(groups.max()) + 1, grad=False))
    per_piece = finite(attr[0, :, 0], "occlusion difference")
    out = np.zeros(int(groups.max()) + 1, np.float32)
    out[groups] = per_piece
    return out
