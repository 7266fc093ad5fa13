"""The attribution methods, all through Captum on an Objective's value function of the
attributed pieces' input embeddings: gradient × input (InputXGradient), integrated gradients
(IntegratedGradients, Gauss-Legendre steps, batched) and occlusion (FeatureAblation with one
feature group per word or per piece). Each returns one score per attributed piece (the sum
over the embedding's dimensions) or per group."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.attribution.objective import Objective
from engine.errors import EngineError

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
class IGResult:
    scores: np.ndarray          # (N,)
    f_baseline: float
    steps: int
    gap: float
    converged: bool


def finite(scores: torch.Tensor, what: str) -> np.ndarray:
    """The scores as float32 numpy, or a one-line error: a NaN or an infinity is never shown."""
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
    size = rows(obj, len(x), grad=False)
    with torch.no_grad():
        return torch.cat([obj.value(x[i:i + size]) for i in range(0, len(x), size)])


def gradxinput(obj: Objective) -> np.ndarray:
    """Σ_d x_d ∂f/∂x_d for each piece (Shrikumar et al. 2016; Captum's InputXGradient)."""
    from captum.attr import InputXGradient

    with torch.enable_grad():
        attr = InputXGradient(obj.value).attribute(obj.x.clone().requires_grad_())
    return finite(attr.sum(-1)[0], "gradient")


def integrated_gradients(obj: Objective, steps: int | None = None) -> IGResult:
    """Sundararajan et al. 2017 from obj.absent to obj.x; Captum's IntegratedGradients with its
    Gauss-Legendre rule and its convergence delta Σ attributions − (f(x) − f(baseline)),
    steps raised along STEP_LADDER until that gap is small enough (or exactly `steps`)."""
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


def occlusion(obj: Objective, groups: np.ndarray) -> np.ndarray:
    """f(x) − f(x with group g's pieces replaced by obj.absent), for each group id
    0..G-1 of `groups` (N,): exact, one forward pass per group (Captum's FeatureAblation,
    `rows` groups a pass)."""
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
