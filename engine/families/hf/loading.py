"""Loading a Hugging Face model folder: its config, its fast tokenizer and the model, safetensors
only, on the requested device and dtype, refused before it is built when its weights or the
memory cannot hold it (engine/checkpoint.py) and after when transformers filled in tensors
(guards.py). transformers' own loading bars show only where LoadOptions.library_bars says."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from engine.errors import ModelUnavailable
from engine.families.base import LoadOptions, resolve_device, resolve_dtype
from engine.families.hf.guards import absent, check_loaded, described_parameters


def folder_config(path: Path) -> dict | None:
    """A Hugging Face model folder's config.json (None without one), read without loading
    transformers."""
    import json

    cfg_file = path / "config.json"
    return json.loads(cfg_file.read_text()) if cfg_file.exists() else None


def causal_config(path: Path) -> bool | None:
    """Whether a Hugging Face model folder's config.json names a left-to-right LM (None: no
    config.json); a config ctxlens cannot show (custom code, encoder-decoder) raises why."""
    from engine.checkpoint import kind_of, read_config

    cfg = read_config(path)
    if cfg is None:
        return None
    return kind_of(cfg, str(path)).family == "gpt"


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    from engine.checkpoint import check_tokenizer

    check_tokenizer(path)       # else transformers builds an empty one from the config alone
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True,
                                            trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise ModelUnavailable(f"cannot load a tokenizer from {path}: {err}") from err
    if not tok.is_fast:
        # offsets (token -> character span) exist only in the Rust `tokenizers` backend
        raise ModelUnavailable(f"{path} has no fast tokenizer (tokenizer.json); ctxlens needs "
                               "one to map tokens to words")
    return tok


@contextmanager
def progress_bars(show: bool):
    """transformers' own loading bars, on or off for the duration of a load (`show`: the load
    shows progress and its LoadOptions.library_bars allow the library's own)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    if not show:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled and not show:
            hf_logging.enable_progress_bar()


@contextmanager
def _quiet(on: bool):
    """transformers' load report, off while a base model loads under an overlay's config: its
    head is "missing" from the base by design and comes from the overlay right after."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    if on:
        hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def load_hf_model(auto_cls, path: Path, options: LoadOptions, progress: bool = True,
                  config=None, supplied: dict[str, int] | None = None, name: str = ""):
    """A model in eval mode on the requested device and dtype, with transformers' default
    attention (SDPA where the architecture has it, else eager). SDPA never materialises the
    attention weights, so a call that asks for attention maps switches the model to eager for
    that call (run_layers). Safetensors only: a pickle is never read (engine/checkpoint.py
    refuses a folder without safetensors before this).

    Before the model is built, the parameters its config describes are counted on the meta
    device (nothing allocated) and checked against the weights present and the free memory;
    after, every tensor the model needs must have come from the weights: transformers fills a
    missing or mis-shaped one with random numbers, which would be shown as the model's.
    `supplied`: tensors (name -> element count) that another file puts in right after this
    load (an overlay's head), so the weights here may lack them. `name`: the model's id, for
    messages (else the folder)."""
    device = resolve_device(options.device)
    dtype = resolve_dtype(options.dtype, device)
    where = name or str(path)
    supplied = supplied or {}
    config = _checked_config(auto_cls, path, config, supplied, options.dtype, device, where)
    try:
        with progress_bars(progress and options.library_bars), _quiet(bool(supplied)):
            # mis-shaped tensors come back in the loading info (refused below, named) instead
            # of transformers' RuntimeError pointing at a report the CLI does not show
            model, info = auto_cls.from_pretrained(
                str(path), dtype=dtype, local_files_only=True, trust_remote_code=False,
                use_safetensors=True, output_loading_info=True, ignore_mismatched_sizes=True,
                config=config)
    except Exception as err:  # noqa: BLE001 - a library's failure on these files is one line
        if not _load_failure(err):
            raise
        raise ModelUnavailable(f"cannot load the model in {path}: {_first_line(err)}") from err
    check_loaded(model, info, where, set(supplied))
    model = model.to(device).eval()
    if options.compile:
        import torch

        # the base model's forward, compiled for encode_pooled alone: a function, not a module,
        # so it is no submodule of the model, and every other path (attention maps switch the
        # attention implementation; hidden_until stops by hooks) keeps running eagerly.
        # dynamic: batches differ in size and length, and each new shape must not recompile
        model.base_model._ctxlens_compiled = torch.compile(model.base_model.forward,
                                                           dynamic=True)
    return model


def _checked_config(auto_cls, path: Path, config, supplied: dict[str, int], dtype: str,
                    device: str, where: str):
    """The model's config (read from `path` when None), once the parameters it describes,
    counted on the meta device, are found in the weights present (or `supplied`) and fit in
    the free memory."""
    import engine.checkpoint as checkpoint
    from engine.families.base import dtype_name

    try:
        if config is None:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(str(path), local_files_only=True,
                                                trust_remote_code=False)
        expected = described_parameters(auto_cls, config)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ModelUnavailable(f"cannot read the model's config in {path}: "
                               f"{_first_line(err)}") from err
    stored = checkpoint.tensor_counts(checkpoint.weight_files(path))
    present = sum(stored.values()) + sum(supplied.values())
    checkpoint.check_present(where, sum(expected.values()), present,
                             absent(expected, set(stored) | set(supplied),
                                    getattr(config, "model_type", "")))
    checkpoint.check_memory(path, dtype_name(dtype, device), device, where,
                            n_params=max(sum(expected.values()), present))
    return config


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def _load_failure(err: BaseException) -> bool:
    """Whether a from_pretrained failure is the files' (missing, unreadable, not matching the
    config, or the safetensors library refusing a file), not a bug of ours."""
    if isinstance(err, (OSError, ValueError, KeyError, TypeError, RuntimeError)):
        return True
    return type(err).__name__ == "SafetensorError"
