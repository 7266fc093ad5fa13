"""The training loop shared by the three trainers: seeds, wall-clock budget, resumable
checkpoints, periodic held-out evaluation and a learning-curve PNG.

A trainer supplies `batch_at(step) -> (batch, n_words)` that is a pure function of the seed and
the step (so a resumed run sees exactly the batches it would have seen), `loss_fn(model, batch)`
and `evaluate(model) -> {"loss": ...}`. The budget is counted in corpus words so the three
models can be given the same amount of text whatever their tokenisation.
"""
from __future__ import annotations

import contextlib
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from tqdm import tqdm


@dataclass(frozen=True)
class RunConfig:
    run_dir: Path             # checkpoints and logs (ignored by git: training_runs/)
    max_words: int            # stop after this many corpus words of training text
    budget_minutes: float     # ... or after this much wall-clock time, whichever comes first
    lr: float = 1e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 50      # steps between held-out evaluations and checkpoints
    seed: int = 13
    threads: int = 1
    words_per_step: float = 1.0   # for the cosine schedule's length
    device: str = "cpu"       # "cuda" trains in bfloat16 autocast; the model returns on the CPU
    adam_beta2: float = 0.999
    # "words": the cosine runs over max_words (a pure function of the step, so a resumed run
    # repeats it exactly); "time": over budget_minutes of wall clock, for a lent machine whose
    # speed is unknown until it runs (a words plan would stop at its budget with the rate high)
    lr_schedule: str = "words"

    @classmethod
    def from_args(cls, args, words_per_step: float, **extra) -> "RunConfig":
        """The run settings every trainer_parser() command line carries; `extra` for the
        settings only some trainers expose (grad_clip)."""
        return cls(run_dir=args.run_dir, max_words=args.max_words,
                   budget_minutes=args.budget_minutes, lr=args.lr, warmup_steps=args.warmup,
                   eval_every=args.eval_every, seed=args.seed, threads=args.threads,
                   words_per_step=words_per_step, device=args.device,
                   adam_beta2=args.adam_beta2,
                   lr_schedule=getattr(args, "lr_schedule", "words"), **extra)


@dataclass
class TrainState:
    step: int = 0
    words: int = 0
    wall_s: float = 0.0
    history: list[dict] = field(default_factory=list)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def lr_lambda(cfg: RunConfig, elapsed_s: Callable[[], float] | None = None
              ) -> Callable[[int], float]:
    """Linear warm-up, then cosine decay to 10% at the planned number of steps, or (lr_schedule
    "time", `elapsed_s` the run's wall clock) over the budget left when the warm-up ended."""
    total = max(cfg.warmup_steps + 1, int(cfg.max_words / max(cfg.words_per_step, 1.0)))
    warm_end: list[float] = []

    def f(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.lr_schedule != "time":
            return cosine((step - cfg.warmup_steps) / (total - cfg.warmup_steps))
        if not warm_end:
            warm_end.append(elapsed_s())
        span = max(cfg.budget_minutes * 60 - warm_end[0], 1e-9)
        return cosine((elapsed_s() - warm_end[0]) / span)
    return f


def cosine(t: float) -> float:
    """The decay from 1 at t = 0 to 10% at t >= 1."""
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, max(0.0, t))))


def make_optimizer(model: torch.nn.Module, cfg: RunConfig,
                   lr_scale: Callable[[str], float] | None = None,
                   no_decay: Callable[[str], bool] | None = None) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters. `lr_scale(name)` multiplies cfg.lr per parameter
    (fine-tuning a pretrained encoder gently under a fresh head); frozen ones are left out.
    No weight decay on biases, norms and embeddings' 1-d parameters (common practice, GPT-2/BERT),
    nor on the parameters `no_decay(name)` names (a matrix of which only some rows train: AdamW's
    decay would shrink the frozen rows too)."""
    groups: dict[tuple[float, bool], list] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            scale = lr_scale(name) if lr_scale else 1.0
            decay = p.dim() >= 2 and not (no_decay and no_decay(name))
            groups.setdefault((scale, decay), []).append(p)
    return torch.optim.AdamW([{"params": ps, "lr": cfg.lr * scale,
                               "weight_decay": cfg.weight_decay if decay else 0.0}
                              for (scale, decay), ps in sorted(groups.items())], lr=cfg.lr,
                             betas=(0.9, cfg.adam_beta2))


def _save(path: Path, model, opt, sched, state: TrainState) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                "state": asdict(state), "rng": torch.get_rng_state()}, tmp)
    tmp.replace(path)


def _load(path: Path, model, opt, sched) -> TrainState:
    ck = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    sched.load_state_dict(ck["sched"])
    torch.set_rng_state(ck["rng"])
    return TrainState(**ck["state"])


def train(model: torch.nn.Module, loss_fn: Callable[[Any, Any], torch.Tensor],
          batch_at: Callable[[int], tuple[Any, int]], evaluate: Callable[[Any], dict],
          cfg: RunConfig, resume: bool = True, progress: bool = True,
          lr_scale: Callable[[str], float] | None = None,
          no_decay: Callable[[str], bool] | None = None) -> TrainState:
    torch.set_num_threads(cfg.threads)
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    model.to(cfg.device)
    opt = make_optimizer(model, cfg, lr_scale, no_decay)
    start = time.monotonic()      # moved back by a resumed run's wall time below
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg, lambda: time.monotonic() - start))
    ckpt = cfg.run_dir / "checkpoint.pt"
    state = _load(ckpt, model, opt, sched) if resume and ckpt.exists() else TrainState()
    seed_everything(cfg.seed + state.step)
    start = time.monotonic() - state.wall_s
    bar = tqdm(total=cfg.max_words, initial=state.words, unit="word", disable=not progress,
               desc=cfg.run_dir.name)
    recent: list[float] = []
    while state.words < cfg.max_words and time.monotonic() - start < cfg.budget_minutes * 60:
        model.train()
        batch, n_words = batch_at(state.step)
        with _autocast(cfg.device):
            loss = loss_fn(model, to_device(batch, cfg.device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad],
                                       cfg.grad_clip)
        opt.step()
        sched.step()
        state.step += 1
        state.words += n_words
        recent.append(float(loss.detach()))
        bar.update(n_words)
        bar.set_postfix(loss=f"{np.mean(recent[-20:]):.3f}")
        if state.step % cfg.eval_every == 0:
            _checkpoint(model, opt, sched, state, evaluate, recent, start, ckpt)
            recent = []
    bar.close()
    if not state.history or state.history[-1]["step"] != state.step:
        _checkpoint(model, opt, sched, state, evaluate, recent, start, ckpt)
    state.wall_s = time.monotonic() - start
    (cfg.run_dir / "history.json").write_text(json.dumps(asdict(state), indent=1))
    model.to("cpu")   # the trainers' final evaluation and export run on the CPU
    return state


def _autocast(device: str):
    # bfloat16 needs no loss scaling; on the CPU autocast stays off (float32 is faster there)
    if device.startswith("cuda"):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _checkpoint(model, opt, sched, state: TrainState, evaluate, recent, start, ckpt) -> None:
    model.eval()
    with torch.no_grad(), _autocast(str(model_device(model))):
        ev = evaluate(model)
    state.wall_s = time.monotonic() - start
    state.history.append({"step": state.step, "words": state.words, "wall_s": round(state.wall_s, 1),
                          "train_loss": float(np.mean(recent)) if recent else None,
                          "lr": opt.param_groups[0]["lr"],
                          **{f"heldout_{k}": float(v) for k, v in ev.items()}})
    tqdm.write(json.dumps(state.history[-1]))
    _save(ckpt, model, opt, sched, state)


def plot_curves(history: list[dict], path: Path, title: str, keys: tuple[str, ...] = ()) -> None:
    """Train and held-out loss against words seen (matplotlib, headless)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = keys or ("train_loss", "heldout_loss")
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    for k in keys:
        pts = [(h["words"], h[k]) for h in history if h.get(k) is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=3, label=k.replace("_", " "))
    ax.set_xlabel("training words seen")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def count_parameters(model: torch.nn.Module, embedding_names: tuple[str, ...]) -> dict:
    """Total and non-embedding parameters (embedding = any parameter whose name contains one of
    `embedding_names`; a tied output matrix is counted once)."""
    seen, total, emb = set(), 0, 0
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        if any(e in name for e in embedding_names):
            emb += p.numel()
    return {"total": total, "embedding": emb, "non_embedding": total - emb}


def resolve_device(name: str) -> str:
    """'auto' is CUDA when present, else the CPU; asking for CUDA without it is a one-line error."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: PyTorch sees no CUDA device here; use --device cpu")
    if name != "cpu" and not name.startswith("cuda"):
        raise SystemExit(f"--device {name}: expected auto, cpu or cuda[:N]")
    return name


def to_device(obj: Any, device: str) -> Any:
    """Tensors inside tuples, lists and dicts moved to `device` (batches are such nests)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_device(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def trainer_parser(description: str, model_id: str, *, budget_minutes: float, max_words: int,
                   batch_size: int, lr: float, eval_every: int, warmup: int = 30):
    """The arguments every trainer shares (budget, data, output, optimiser, seed); each
    trainer adds its architecture's own."""
    import argparse

    from engine.corpus import brown as corpus

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--budget-minutes", type=float, default=budget_minutes)
    ap.add_argument("--max-words", type=int, default=max_words)
    ap.add_argument("--corpus", type=Path, default=corpus.DATA / "corpus")
    ap.add_argument("--run-dir", type=Path, default=corpus.ROOT / "training_runs" / model_id)
    ap.add_argument("--out", type=Path, default=corpus.ROOT / "assets" / "models" / model_id)
    ap.add_argument("--batch-size", type=int, default=batch_size)
    ap.add_argument("--lr", type=float, default=lr)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--adam-beta2", type=float, default=0.999)
    ap.add_argument("--eval-every", type=int, default=eval_every)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", type=resolve_device, default="cpu",
                    help="cpu (default), cuda or auto; on CUDA steps run in bfloat16 autocast")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--lr-schedule", choices=["words", "time"], default="words",
                    help="the cosine's length: --max-words (default; a resumed run repeats it "
                    "exactly) or --budget-minutes of wall clock (a machine of unknown speed)")
    return ap


def add_transformer_args(ap, eval_blocks: int = 64) -> None:
    """Shape of the small transformers (GPT, BERT): same defaults so budgets compare."""
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--eval-blocks", type=int, default=eval_blocks)
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="residual, embedding and attention dropout (GPT-2 and BERT used 0.1)")
    ap.add_argument("--pos-init", choices=["learned", "sinusoidal"], default="learned",
                    help="initial position embeddings (trained either way)")
    ap.add_argument("--local-bias", type=float, default=0.0,
                    help="peak strength of the annealed locality attention bias (0: none; "
                         "lab/training/locality.py)")
    ap.add_argument("--local-bias-steps", type=int, default=0,
                    help="steps over which that bias decays linearly to zero")


def run_tokenizer(run_dir: Path, train_fn: Callable[[], Any], tokenizer_cls) -> Any:
    """The tokenizer a run trains with, kept in its run folder: a resumed run must reuse the
    vocabulary its checkpoint was trained with (retraining WordPiece can renumber pieces of equal
    count, which would silently scramble the learned embeddings)."""
    path = Path(run_dir) / "tokenizer"
    if path.is_dir():
        return tokenizer_cls.from_pretrained(str(path))
    tok = train_fn()
    path.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(path))
    return tok


def run_settings(args) -> dict:
    """A run's command-line settings for its report, as JSON values (paths as text), so the
    cards read numbers as numbers (lab/training/cards.py)."""
    from pathlib import PurePath

    return {k: str(v) if isinstance(v, PurePath) else v for k, v in vars(args).items()}
