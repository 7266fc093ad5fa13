"""Whether a model transformers built holds its checkpoint's own tensors: the parameters a config
describes, counted without allocating them, and a load refused where transformers completed the
model with random numbers that would be shown as the model's."""
from __future__ import annotations

from engine.errors import ModelUnavailable


def described_parameters(auto_cls, config) -> dict[str, int]:
    """Each parameter of the model `config` describes (name -> element count; a tied one once),
    counted on the meta device: the modules are built without allocating a byte, so a 70B
    config is counted in seconds on a laptop."""
    import torch

    with torch.device("meta"):
        # an Auto* class builds from a config; a model class is its own constructor
        build = getattr(auto_cls, "from_config", None)
        model = build(config, trust_remote_code=False) if build else auto_cls(config)
    return {n: p.numel() for n, p in model.named_parameters()}


def absent(expected: dict[str, int], stored: set[str], model_type: str) -> list[str]:
    """The described parameters no stored tensor names, the largest first (for a message: a
    checkpoint may name a parameter with or without the base model's prefix)."""
    def there(n: str) -> bool:
        return (n in stored or n.partition(".")[2] in stored
                or any(f"{p}.{n}" in stored for p in prefixes))

    prefixes = {n.partition(".")[0] for n in stored} | {model_type}
    return sorted((n for n in expected if not there(n)), key=lambda n: -expected[n])


# parameters a checkpoint may lack because ctxlens never reads them: a BERT-like encoder's
# pooler (only a classifier reads its output; ctxlens reads hidden states and the LM heads)
UNREAD = ("pooler",)


def check_loaded(model, info: dict, where: str, supplied: set[str] = frozenset()) -> None:
    """Refuse a model that transformers completed with made-up tensors: one whose weights had
    another shape than the config makes (the config is another model's), or that the weights
    lack. A missing tensor is fine only where it is no weight of its own: a parameter tied to
    one that was loaded (an LM head tied to the input embeddings), a buffer the model computes
    when built (position ids, rotary frequencies), one ctxlens never reads (UNREAD), or one in
    `supplied` (an overlay puts it in right after)."""
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda m: m[0])
    if mismatched:
        key, got, want = mismatched[0]
        more = f" (and {len(mismatched) - 1} more)" if len(mismatched) > 1 else ""
        raise ModelUnavailable(
            f"{where}: tensor {key!r} is {list(got)} in the weights but {list(want)} in the "
            f"model its config.json describes{more}; the config is not these weights' own: "
            "use the config.json saved with them")
    missing = set(info.get("missing_keys") or ())
    if not missing:
        return
    buffers = {n for n, _ in model.named_buffers()}
    params = dict(model.named_parameters(remove_duplicate=False))
    # a parameter shared under several names is there when any of its names was loaded or
    # is supplied (BERT's decoder bias is its head's bias under a second name)
    filled = {id(p) for n, p in params.items() if n not in missing or n in supplied}
    unexplained = sorted(
        k for k in missing
        if k not in supplied and k not in buffers
        and not (k in params and id(params[k]) in filled)
        and not any(part in UNREAD for part in k.split(".")))
    if unexplained:
        named = ", ".join(repr(k) for k in unexplained[:3])
        more = f" and {len(unexplained) - 3} more" if len(unexplained) > 3 else ""
        raise ModelUnavailable(
            f"{where}: its weights lack {named}{more}, which transformers would fill with "
            "random numbers; download or save the model again (or use the checkpoint with "
            "that head)")
